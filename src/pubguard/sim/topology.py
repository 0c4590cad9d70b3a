"""Simulated network topologies: a broker tree with per-link latencies.

The tree comes from :mod:`pubguard.overlay` (an a-ary tree, an edge list) or from
:func:`random_tree`; latencies are seconds of virtual time, one value per broker edge (both
directions) plus one for every client's access link.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from random import Random
from types import MappingProxyType

from pubguard.errors import ValidationError
from pubguard.overlay.tree import Tree

__all__ = ["SimTopology", "random_tree"]


def random_tree(n: int, rng: Random, *, prefix: str = "b") -> Tree:
    """A random recursive tree on ``n`` nodes: node ``i`` hangs under a uniform earlier node."""
    if n < 1:
        raise ValidationError("a tree needs at least one node")
    names = [f"{prefix}{i}" for i in range(n)]
    children: dict[str, list[str]] = {x: [] for x in names}
    for i in range(1, n):
        children[names[rng.randrange(i)]].append(names[i])
    return Tree(names[0], {k: tuple(v) for k, v in children.items()})


@dataclass(frozen=True, slots=True)
class SimTopology:
    """A broker tree and its link latencies (seconds)."""

    tree: Tree
    default_latency: float = 0.001
    client_latency: float = 0.0002
    latencies: Mapping[frozenset[str], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default_latency < 0 or self.client_latency < 0:
            raise ValidationError("latencies must be >= 0")
        lat: dict[frozenset[str], float] = {}
        edges = {frozenset(e) for e in self.tree.edges}
        for k, v in self.latencies.items():
            key = frozenset(k)
            if key not in edges:
                raise ValidationError(f"latency given for {sorted(key)}, which is not an edge")
            if v < 0:
                raise ValidationError("latencies must be >= 0")
            lat[key] = float(v)
        object.__setattr__(self, "latencies", MappingProxyType(lat))

    @property
    def brokers(self) -> tuple[str, ...]:
        return self.tree.nodes

    def latency(self, a: str, b: str) -> float:
        return self.latencies.get(frozenset((a, b)), self.default_latency)
