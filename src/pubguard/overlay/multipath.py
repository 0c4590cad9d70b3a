"""The ``ind`` relabelled spanning trees of G^ind that multi-path routing runs on.

Theory of operation
-------------------
Theorem 5.2 (eventguard.txt, psguard.txt Theorem 4.2) turns the tree path
``Q = <P, n_1, ..., n_d, S>`` into ``Q_k = <P, sib_k(n_1), ..., sib_k(n_d), S>``. Applied to
every path at once this is a relabelling of the whole tree: the map
``sigma_k(n) = sib_k(n)`` (the root is fixed) is a bijection of the nodes (a cyclic shift
inside every sibling group), and the image ``T_k = sigma_k(T)`` is a spanning tree of G^ind:
its edge ``sigma_k(q) - sigma_k(n)`` for a tree edge ``q - n`` is the edge from
``sib_k(n)`` (a child of ``q``) to ``sib_k(parent(sib_k(n)))``, one of the ``ind - 1`` extra
edges G^ind adds (or a tree edge when ``q`` is the root). ``T_0 = T``.

The *position* ``n`` of the original tree is served in ``T_k`` by the broker ``sigma_k(n)``;
a subscriber whose home is the leaf position ``L`` attaches to ``sigma_k(L)`` in ``T_k`` (the
subscriber's own ``ind`` edges, eventguard.txt §5.2 "one additional edge to every subscriber").
For one subscriber the root-to-``L`` paths of ``T_0 .. T_{ind-1}`` are exactly the
independent paths ``Q_0 .. Q_{ind-1}`` of the theorem (tested in tests/overlay).
"""

from __future__ import annotations

from pubguard.overlay.resilient import _check_ind, sibling
from pubguard.overlay.tree import Tree

__all__ = ["relabel_map", "relabelled_tree", "spanning_trees"]


def relabel_map(tree: Tree, k: int) -> dict[str, str]:
    """``sigma_k``: position -> the broker serving it in ``T_k`` (the root maps to itself)."""
    return {n: (n if tree.parent[n] is None else sibling(tree, n, k)) for n in tree.nodes}


def relabelled_tree(tree: Tree, k: int) -> Tree:
    """``T_k = sigma_k(T)``: the k-th relabelled spanning tree of G^ind (``T_0`` is ``tree``)."""
    if k == 0:
        return tree
    sigma = relabel_map(tree, k)
    return Tree(
        sigma[tree.root], {sigma[n]: tuple(sigma[c] for c in cs) for n, cs in tree.children.items()}
    )


def spanning_trees(tree: Tree, ind: int) -> list[Tree]:
    """``T_0 .. T_{ind-1}`` (eventguard.txt §5.2, Claim 5.3): one tree per independent path."""
    _check_ind(tree, ind)
    return [relabelled_tree(tree, k) for k in range(ind)]
