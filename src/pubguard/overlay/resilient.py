"""Resilient and multi-path overlays: G^ind, independent paths, probabilistic path choice.

Theory of operation
-------------------
A tree has one path from the publisher (root) to each node, so one malicious node on it can
drop everything (eventguard.txt §5.1). EventGuard's r-resilient network guard (§5.2) and
PSGuard's multi-path dissemination network (psguard.txt §4.2.1) add edges to an a-ary tree:
"connecting every node n to parent(n) and ind - 1 distinct siblings of parent(n)", which gives
``ind`` independent paths (sharing only their end points) from the root to every node
(eventguard.txt Claim 5.3, psguard.txt Claim 4.3). Theorem 5.2 / 4.2 builds them explicitly:
with ``Q = <P, n_1, ..., n_d, S>`` the tree path, ``Q_k = <P, sib_k(n_1), ..., sib_k(n_d), S>``
where ``sib_k`` is the k-th sibling. We take ``sib_k(n)`` = the sibling ``k`` places after ``n``
in its parent's child order, cyclically, and connect every node to ``sib_k(parent(n))`` for
``k = 1 .. ind-1``; then ``sib_k(n_{i+1})`` is adjacent to ``sib_k(n_i)`` because
``parent(sib_k(n_{i+1})) = n_i``, and the paths are disjoint because the ``sib_k(n_i)`` differ in
``k`` at each depth. :func:`disjoint_paths` cross-checks with networkx's max-flow construction.

PSGuard routes each event on one of ``ind_t`` independent paths chosen uniformly, with
``ind_t = tau * lambda_t`` (capped by ``ind_max``) so every token's apparent frequency
``lambda'_t = lambda_t / ind_t`` is nearly constant; leakage is measured by the entropies
``S_act`` and ``S_app`` (psguard.txt §4.2).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
from random import Random
from typing import TypeVar

import networkx as nx
from networkx.algorithms.connectivity import node_disjoint_paths

from pubguard.errors import ValidationError
from pubguard.overlay.tree import Tree

__all__ = [
    "apparent_frequencies",
    "choose_paths",
    "disjoint_paths",
    "entropy",
    "ind_for_frequencies",
    "independent_paths",
    "is_independent",
    "resilient_graph",
    "sibling",
]

T = TypeVar("T")


def sibling(tree: Tree, node: str, k: int) -> str:
    """``sib_k(node)``: the sibling ``k`` places after ``node``, cyclically (``sib_0`` = node)."""
    sibs = tree.siblings(node)
    if k >= len(sibs):
        raise ValidationError(f"{node!r} has only {len(sibs) - 1} siblings, asked for #{k}")
    return sibs[(sibs.index(node) + k) % len(sibs)]


def _check_ind(tree: Tree, ind: int) -> None:
    if isinstance(ind, bool) or not isinstance(ind, int) or ind < 1:
        raise ValidationError("ind must be an integer >= 1")
    for n in tree.nodes:
        kids = tree.children[n]
        if kids and len(kids) < ind and n != tree.root:
            raise ValidationError(
                f"ind = {ind} needs every inner node to have >= ind children; {n!r} has {len(kids)}"
            )


def resilient_graph(tree: Tree, ind: int) -> nx.Graph:
    """G^ind (eventguard.txt §5.2, psguard.txt §4.2.1): the tree plus, for every node with a
    grandparent, edges to ``ind - 1`` siblings of its parent. ``ind = 1`` is the tree itself."""
    _check_ind(tree, ind)
    g = nx.Graph()
    g.add_nodes_from(tree.nodes)
    g.add_edges_from(tree.edges, kind="tree")
    for n in tree.nodes:
        p = tree.parent[n]
        if p is None or tree.parent[p] is None:
            continue
        for k in range(1, ind):
            g.add_edge(n, sibling(tree, p, k), kind="resilient")
    return g


def independent_paths(tree: Tree, ind: int, target: str) -> Iterator[list[str]]:
    """The ``ind`` independent root-to-``target`` paths of Theorem 5.2 (eventguard.txt) in
    G^ind. A child of the root has only its direct edge, so it yields one path."""
    _check_ind(tree, ind)
    path = tree.path_from_root(target)
    if len(path) <= 2:
        yield path
        return
    inner = path[1:-1]
    for k in range(ind):
        yield [path[0], *(sibling(tree, n, k) for n in inner), target]


def is_independent(paths: Sequence[Sequence[Hashable]]) -> bool:
    """Do the paths share no node other than their common end points?"""
    if not paths:
        return True
    ends = {paths[0][0], paths[0][-1]}
    seen: set[Hashable] = set()
    for p in paths:
        if {p[0], p[-1]} != ends:
            return False
        inner = set(p[1:-1])
        if len(inner) != len(p) - 2 or inner & seen:
            return False
        seen |= inner
    return True


def disjoint_paths(graph: nx.Graph, source: Hashable, target: Hashable) -> list[list[Hashable]]:
    """A maximum set of node-disjoint source-target paths (networkx, max-flow based)."""
    if source == target:
        return [[source]]
    if graph.has_edge(source, target):
        h = graph.copy()
        h.remove_edge(source, target)
        rest = (
            []
            if not nx.has_path(h, source, target)
            else list(node_disjoint_paths(h, source, target))
        )
        return [[source, target], *rest]
    if not nx.has_path(graph, source, target):
        return []
    return [list(p) for p in node_disjoint_paths(graph, source, target)]


def choose_paths(paths: Sequence[T], rng: Random, k: int = 1) -> list[T]:
    """psguard.txt §4.2: the publisher "uniformly and randomly chooses one path amongst the set
    of ind_t independent paths"; ``k > 1`` sends on several in parallel (fault tolerance)."""
    if not paths:
        raise ValidationError("no paths to choose from")
    if not 1 <= k <= len(paths):
        raise ValidationError(f"cannot choose {k} of {len(paths)} paths")
    return rng.sample(list(paths), k)


def ind_for_frequencies(freqs: Mapping[T, float], *, tau: float, ind_max: int) -> dict[T, int]:
    """``ind_t = tau * lambda_t`` rounded, clamped to ``1 .. ind_max`` (psguard.txt §4.2)."""
    if tau <= 0 or ind_max < 1:
        raise ValidationError("tau must be > 0 and ind_max >= 1")
    total = sum(freqs.values())
    if total <= 0:
        raise ValidationError("frequencies must have a positive sum")
    return {t: max(1, min(ind_max, round(tau * f / total))) for t, f in freqs.items()}


def apparent_frequencies(freqs: Mapping[T, float], ind: Mapping[T, int]) -> dict[T, float]:
    """``lambda'_t = lambda_t / ind_t``, normalised to sum to 1 (non-colluding routing node)."""
    raw = {t: f / ind[t] for t, f in freqs.items()}
    total = sum(raw.values())
    if total <= 0:
        raise ValidationError("frequencies must have a positive sum")
    return {t: v / total for t, v in raw.items()}


def entropy(freqs: Mapping[T, float]) -> float:
    """``S = -sum lambda_t log lambda_t`` over normalised frequencies (natural log)."""
    total = sum(freqs.values())
    if total <= 0:
        raise ValidationError("frequencies must have a positive sum")
    return -sum((f / total) * math.log(f / total) for f in freqs.values() if f > 0)
