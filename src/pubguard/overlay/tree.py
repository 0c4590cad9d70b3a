"""Hierarchical broker topologies: a-ary trees and explicit edge lists.

Theory of operation
-------------------
"A natural choice for the topology of a pub-sub network is a hierarchical topology"
(eventguard.txt §2.1, Fig. 1; psguard.txt §2.1): the broker core routes on a tree, each broker
having one parent and any number of children. :class:`Tree` is that shape, immutable and
validated: exactly one root, every other node has exactly one parent, every node is reachable
from the root, and there is no cycle (a tree with ``n`` nodes has ``n - 1`` edges). Builders:
:func:`ary_tree` (complete a-ary tree of a given depth, nodes numbered breadth-first
``b0, b1, ...``) and :func:`tree_from_edges` (directed ``(parent, child)`` pairs, or undirected
pairs oriented away from a given root).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

import networkx as nx

from pubguard.errors import ValidationError

__all__ = ["MAX_TREE_NODES", "Tree", "ary_tree", "tree_from_edges"]

MAX_TREE_NODES: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Tree:
    """A rooted tree of node names; children are kept in the order given (sibling order)."""

    root: str
    children: Mapping[str, tuple[str, ...]]
    parent: Mapping[str, str | None] = field(init=False, repr=False)
    nodes: tuple[str, ...] = field(init=False, repr=False)  # breadth-first from the root

    def __post_init__(self) -> None:
        kids = {n: tuple(cs) for n, cs in self.children.items()}
        parent: dict[str, str | None] = {self.root: None}
        order = [self.root]
        i = 0
        while i < len(order):
            n = order[i]
            i += 1
            for c in kids.get(n, ()):
                if c in parent:
                    raise ValidationError(f"node {c!r} is reached twice (cycle or two parents)")
                parent[c] = n
                order.append(c)
        mentioned = set(kids) | {c for cs in kids.values() for c in cs}
        stray = mentioned - set(parent)
        if stray:
            raise ValidationError(
                f"nodes not reachable from root {self.root!r}: {sorted(stray)[:5]}"
            )
        for n in order:
            kids.setdefault(n, ())
        object.__setattr__(self, "children", MappingProxyType(kids))
        object.__setattr__(self, "parent", MappingProxyType(parent))
        object.__setattr__(self, "nodes", tuple(order))

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def edges(self) -> list[tuple[str, str]]:
        """(parent, child) pairs in breadth-first order."""
        return [(p, n) for n in self.nodes if (p := self.parent[n]) is not None]

    @property
    def leaves(self) -> list[str]:
        return [n for n in self.nodes if not self.children[n]]

    def depth(self, node: str) -> int:
        return len(self.path_from_root(node)) - 1

    def path_from_root(self, node: str) -> list[str]:
        if node not in self.parent:
            raise ValidationError(f"no node {node!r} in the tree")
        path = [node]
        while (p := self.parent[path[-1]]) is not None:
            path.append(p)
        return path[::-1]

    def siblings(self, node: str) -> tuple[str, ...]:
        """The children of ``node``'s parent, in order, including ``node`` itself."""
        p = self.parent[node]
        return (node,) if p is None else self.children[p]

    def to_networkx(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        g.add_edges_from(self.edges)
        return g


def ary_tree(a: int, depth: int, *, prefix: str = "b") -> Tree:
    """The complete ``a``-ary tree of the given depth (root at depth 0), nodes ``b0, b1, ...``."""
    if isinstance(a, bool) or not isinstance(a, int) or a < 1:
        raise ValidationError("tree arity a must be an integer >= 1")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValidationError("tree depth must be an integer >= 0")
    size = depth + 1 if a == 1 else (a ** (depth + 1) - 1) // (a - 1)
    if size > MAX_TREE_NODES:
        raise ValidationError(
            f"a {a}-ary tree of depth {depth} has {size} nodes (limit {MAX_TREE_NODES})"
        )
    names = [f"{prefix}{i}" for i in range(size)]
    children = {
        names[i]: tuple(names[j] for j in range(a * i + 1, a * i + a + 1) if j < size)
        for i in range(size)
    }
    return Tree(names[0], children)


def tree_from_edges(
    edges: Iterable[Sequence[str]], *, root: str | None = None, nodes: Iterable[str] = ()
) -> Tree:
    """A tree from an edge list.

    Without ``root`` the pairs are directed ``(parent, child)`` and the root is the one node
    with no parent. With ``root`` the pairs are undirected and oriented away from it. ``nodes``
    names isolated nodes (a one-broker network has no edges).
    """
    pairs: list[tuple[str, str]] = []
    for e in edges:
        if not isinstance(e, Sequence) or isinstance(e, str) or len(e) != 2:
            raise ValidationError(f"an edge is a pair of node names, got {e!r}")
        u, v = e
        if not isinstance(u, str) or not isinstance(v, str) or not u or not v:
            raise ValidationError(f"edge endpoints must be non-empty strings, got {e!r}")
        if u == v:
            raise ValidationError(f"self-loop on {u!r}")
        pairs.append((u, v))
    all_nodes = set(nodes) | {x for p in pairs for x in p}
    if not all_nodes:
        raise ValidationError("a topology needs at least one node")
    if root is None:
        has_parent: dict[str, str] = {}
        children: dict[str, list[str]] = {}
        for p, c in pairs:
            if c in has_parent:
                raise ValidationError(f"node {c!r} has two parents ({has_parent[c]!r}, {p!r})")
            has_parent[c] = p
            children.setdefault(p, []).append(c)
        roots = sorted(all_nodes - set(has_parent))
        if len(roots) != 1:
            raise ValidationError(
                f"a tree has exactly one root; found {len(roots)}"
                + (f": {roots[:5]}" if roots else " (there is a cycle)")
            )
        return Tree(roots[0], {k: tuple(v) for k, v in children.items()})
    if root not in all_nodes:
        raise ValidationError(f"root {root!r} is not in the topology")
    g = nx.Graph()
    g.add_nodes_from(sorted(all_nodes))
    g.add_edges_from(pairs)
    if g.number_of_edges() != len(pairs):
        raise ValidationError("duplicate edge in the topology")
    if not nx.is_connected(g):
        raise ValidationError("the topology is not connected")
    if g.number_of_edges() != g.number_of_nodes() - 1:
        raise ValidationError("the topology has a cycle (tree routing needs a tree)")
    order = {n: i for i, n in enumerate(x for p in pairs for x in p)}
    kids = {
        n: tuple(sorted(nbrs, key=lambda c: order.get(c, 0)))
        for n, nbrs in nx.bfs_successors(g, root)
    }
    return Tree(root, kids)
