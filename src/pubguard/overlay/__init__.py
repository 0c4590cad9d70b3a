"""Overlay topologies: a-ary trees, edge lists, EventGuard/PSGuard G^ind and independent paths.

Public names are imported on first use (PEP 562 module ``__getattr__``), so that importing one
submodule, or the command line, does not load every heavy module of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubguard.lazy import lazy_exports

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "MAX_TREE_NODES": "pubguard.overlay.tree",
    "Tree": "pubguard.overlay.tree",
    "ary_tree": "pubguard.overlay.tree",
    "tree_from_edges": "pubguard.overlay.tree",
    "apparent_frequencies": "pubguard.overlay.resilient",
    "choose_paths": "pubguard.overlay.resilient",
    "disjoint_paths": "pubguard.overlay.resilient",
    "entropy": "pubguard.overlay.resilient",
    "ind_for_frequencies": "pubguard.overlay.resilient",
    "independent_paths": "pubguard.overlay.resilient",
    "is_independent": "pubguard.overlay.resilient",
    "resilient_graph": "pubguard.overlay.resilient",
    "sibling": "pubguard.overlay.resilient",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
