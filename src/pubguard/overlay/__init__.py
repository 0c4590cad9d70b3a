"""Overlay topologies: a-ary trees, edge lists, EventGuard/PSGuard G^ind and independent paths."""

from pubguard.overlay.resilient import (
    apparent_frequencies,
    choose_paths,
    disjoint_paths,
    entropy,
    ind_for_frequencies,
    independent_paths,
    is_independent,
    resilient_graph,
    sibling,
)
from pubguard.overlay.tree import MAX_TREE_NODES, Tree, ary_tree, tree_from_edges

__all__ = [
    "MAX_TREE_NODES",
    "Tree",
    "apparent_frequencies",
    "ary_tree",
    "choose_paths",
    "disjoint_paths",
    "entropy",
    "ind_for_frequencies",
    "independent_paths",
    "is_independent",
    "resilient_graph",
    "sibling",
    "tree_from_edges",
]
