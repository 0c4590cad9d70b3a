"""Internet-like link latencies with the GT-ITM statistics both papers report.

eventguard.txt §6.2.1 and psguard.txt §5.2.2: "The round trip times on these links varied from
24ms to 184ms with mean 74ms and standard deviation 50ms" (a GT-ITM transit-stub topology). We
do not have GT-ITM's graph, so each broker link draws its round-trip time from the one
distribution with exactly those four numbers on a bounded support: a Beta law scaled to
``[24, 184]`` ms whose mean and standard deviation are matched by the method of moments
(``alpha + beta = mu (1 - mu) / sigma^2 - 1`` on the unit interval). A link's one-way latency
is half its RTT. The draw is seeded, so a topology is a pure function of its seed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from random import Random
from typing import Final

from pubguard.errors import ValidationError
from pubguard.overlay.tree import Tree
from pubguard.sim.topology import SimTopology

__all__ = [
    "RTT_MAX_MS",
    "RTT_MEAN_MS",
    "RTT_MIN_MS",
    "RTT_SD_MS",
    "draw_rtt_ms",
    "internet_latencies",
    "internet_topology",
]

# eventguard.txt §6.2.1 / psguard.txt §5.2.2 (GT-ITM)
RTT_MIN_MS: Final = 24.0
RTT_MAX_MS: Final = 184.0
RTT_MEAN_MS: Final = 74.0
RTT_SD_MS: Final = 50.0


def _beta_shape() -> tuple[float, float]:
    width = RTT_MAX_MS - RTT_MIN_MS
    mu = (RTT_MEAN_MS - RTT_MIN_MS) / width
    var = (RTT_SD_MS / width) ** 2
    total = mu * (1 - mu) / var - 1
    if total <= 0:  # pragma: no cover - the constants above are fixed and valid
        raise ValidationError("no Beta law has these moments")
    return mu * total, (1 - mu) * total


def draw_rtt_ms(rng: Random, n: int) -> list[float]:
    """``n`` link RTTs in ms, each in [24, 184] with mean 74 and sd 50 (in expectation)."""
    if n < 0:
        raise ValidationError("n must be >= 0")
    a, b = _beta_shape()
    width = RTT_MAX_MS - RTT_MIN_MS
    return [RTT_MIN_MS + width * rng.betavariate(a, b) for _ in range(n)]


def internet_latencies(
    edges: Iterable[tuple[str, str]], rng: Random
) -> dict[frozenset[str], float]:
    """One-way latency (seconds, RTT / 2) for every undirected edge, in the order given."""
    keys = list(dict.fromkeys(frozenset(e) for e in edges))
    rtts = draw_rtt_ms(rng, len(keys))
    return {k: r / 2000.0 for k, r in zip(keys, rtts, strict=True)}


def internet_topology(tree: Tree, rng: Random, *, client_latency: float = 0.0002) -> SimTopology:
    """A :class:`SimTopology` over ``tree`` with GT-ITM-like link latencies."""
    lat = internet_latencies(tree.edges, rng)
    mean = math.fsum(lat.values()) / len(lat) if lat else 0.037
    return SimTopology(tree, default_latency=mean, client_latency=client_latency, latencies=lat)
