"""Resilience to message dropping on G^ind (eventguard.txt §5, §6.2.1 Figs. 5, 8-10).

Theory of operation
-------------------
Two simulations of the same thing, the second validated against the first:

*Real cores* (:func:`simulate_cores`, up to a few hundred brokers): one
:class:`~pubguard.sim.malicious.AdversarySimulator` per relabelled spanning tree ``T_k`` of
G^ind (:mod:`pubguard.overlay.multipath`), all with the same malicious brokers (which drop
every publication they route), GT-ITM-like latencies (:mod:`pubguard.sim.internet`) and the
real broker core. The publisher sits at the root (Theorem 5.2's ``P``); a subscriber whose home
is leaf position ``L`` attaches to ``sigma_k(L)`` in ``T_k``. eventguard.txt §5.2 sends each
publication down all ``ind`` trees; the subscriber keeps the first copy of an event id.

*Graph level* (:func:`reached`, :func:`run_resilience`, the papers' 4K-node scale): a
publication reaches the subscriber at ``L`` iff on some ``T_k`` no broker on the root-to-
``sigma_k(L)`` path is malicious; computed level by level with numpy. For the same malicious
set and subscriptions it gives exactly the deliveries of the real cores (a test).

The papers' setup (§6.2.1): a binary tree of 4K brokers, 32 publishers, NS = 8K subscribers on
random leaf brokers, 128 topics with Zipf popularity, 16 topics per publisher (uniform), 4 per
subscriber (Zipf), 5 runs. Appendix A gives each publisher its own tree, so each publisher's
tree places the brokers in its own random order below the root (publisher 0: the identity);
a subscriber keeps its leaf position in every publisher's tree.
Resilience = received / N(w) per (publisher, topic), averaged (§6.2.1 "Selective and Random
Dropping Attack"). Analytic: ``Pr(succ) = 1 - (1 - (1 - p)^h)^ind`` (§5.2), ``h`` = brokers on
a path = depth of the leaf brokers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any, Final

import numpy as np

from pubguard.errors import ValidationError
from pubguard.model.events import Event
from pubguard.overlay.multipath import relabel_map, spanning_trees
from pubguard.overlay.resilient import resilient_graph
from pubguard.overlay.tree import Tree, ary_tree
from pubguard.sim.internet import internet_latencies
from pubguard.sim.malicious import AdversarySimulator, RandomDrop
from pubguard.sim.topic_workloads import zipf_weights
from pubguard.sim.topology import SimTopology
from pubguard.wire.messages import Publish

__all__ = [
    "EVENTGUARD_SETUP",
    "CoreRun",
    "ResilienceSetup",
    "TreeArrays",
    "analytic_resilience",
    "bft_cost",
    "complete_tree",
    "h_bound",
    "reached",
    "run_resilience",
    "simulate_cores",
    "tree_cost",
]


@dataclass(frozen=True, slots=True)
class ResilienceSetup:
    """One resilience experiment (defaults: eventguard.txt §6.2.1)."""

    nodes: int = 4096
    arity: int = 2
    ind: int = 1
    p: float = 0.0
    publishers: int = 32
    subscribers: int = 8192
    topics: int = 128
    topics_per_publisher: int = 16
    topics_per_subscriber: int = 4
    zipf_s: float = 1.0
    runs: int = 5
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise ValidationError("p must be in [0, 1]")
        if self.arity < 2 or self.ind < 1 or self.ind > self.arity:
            raise ValidationError("need arity >= 2 and 1 <= ind <= arity")
        if min(self.publishers, self.subscribers, self.runs) < 1:
            raise ValidationError("publishers, subscribers and runs must be >= 1")
        if not 1 <= self.topics_per_publisher <= self.topics:
            raise ValidationError("topics per publisher must be in 1 .. topics")
        if not 1 <= self.topics_per_subscriber <= self.topics:
            raise ValidationError("topics per subscriber must be in 1 .. topics")


EVENTGUARD_SETUP: Final = ResilienceSetup()


def complete_tree(nodes: int, arity: int) -> Tree:
    """The largest complete ``arity``-ary tree with at most ``nodes`` nodes (4K binary: 4095)."""
    if nodes < 1 + arity:
        raise ValidationError("need at least a root and one full level")
    depth = 1
    while (arity ** (depth + 2) - 1) // (arity - 1) <= nodes:
        depth += 1
    return ary_tree(arity, depth)


def analytic_resilience(p: float, h: int, ind: int) -> float:
    """eventguard.txt §5.2: ``Pr(succ) = 1 - (1 - (1 - p)^h)^ind``."""
    return 1.0 - (1.0 - (1.0 - p) ** h) ** ind


def h_bound(p: float, ind: int, r: float) -> float:
    """The largest height with ``Pr(succ) >= r`` (§5.2: p = 0.1, ind = 2, r = 0.9 -> 3.61)."""
    return math.log(1.0 - (1.0 - r) ** (1.0 / ind)) / math.log(1.0 - p)


def tree_cost(h: int, n_w: int, a: int, ns: int) -> float:
    """eventguard.txt Appendix A (3): ``M^tree(w) <= min(h N(w), a / (a - 1) (NS - 1))``."""
    return min(h * n_w, a / (a - 1) * (ns - 1))


def bft_cost(n_w: int, m: int) -> int:
    """Appendix A: BFT dissemination needs ``M^bft(w) >= (m + 1) N(w)`` messages."""
    return (m + 1) * n_w


@dataclass(frozen=True, slots=True)
class TreeArrays:
    """A tree and its ``ind`` relabellings as index arrays (positions in breadth-first order)."""

    tree: Tree
    ind: int
    parent: np.ndarray  # parent position of each position (-1 for the root)
    levels: tuple[np.ndarray, ...]  # positions per depth, depth >= 1
    sigma: np.ndarray  # (ind, N): position -> label of the broker serving it in T_k
    leaves: np.ndarray

    @classmethod
    def build(cls, tree: Tree, ind: int) -> TreeArrays:
        spanning_trees(tree, ind)  # validates ind against the arity
        idx = {n: i for i, n in enumerate(tree.nodes)}
        parent = np.array([-1 if (q := tree.parent[n]) is None else idx[q] for n in tree.nodes])
        depth = np.zeros(len(idx), dtype=int)
        for i in range(1, len(idx)):
            depth[i] = depth[parent[i]] + 1
        levels = tuple(np.flatnonzero(depth == d) for d in range(1, int(depth.max()) + 1))
        maps = [relabel_map(tree, k) for k in range(ind)]
        sigma = np.array([[idx[m[n]] for n in tree.nodes] for m in maps])
        leaves = np.array([idx[n] for n in tree.leaves])
        return cls(tree, ind, parent, levels, sigma, leaves)

    @property
    def height(self) -> int:
        return len(self.levels)


def reached(arrays: TreeArrays, bad: np.ndarray) -> np.ndarray:
    """Per position: does a publication from the root reach it on some ``T_k``? ``bad[label]``
    marks the malicious brokers (the root, the publisher, is never bad)."""
    out = np.zeros(len(arrays.parent), dtype=bool)
    for k in range(arrays.ind):
        clean = np.zeros(len(arrays.parent), dtype=bool)
        clean[0] = True
        for lv in arrays.levels:
            clean[lv] = ~bad[arrays.sigma[k, lv]] & clean[arrays.parent[lv]]
        out |= clean
    return out


def _placement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A publisher's own tree (Appendix A): label -> broker, the brokers in random order
    below the root (which is the publisher)."""
    return np.concatenate(([0], 1 + rng.permutation(n - 1)))


@dataclass(slots=True)
class _Workload:
    sub_leaf: np.ndarray  # subscriber -> its leaf position
    subs_of: list[np.ndarray]  # topic -> subscribers
    pub_topics: list[np.ndarray]


def _workload(s: ResilienceSetup, arrays: TreeArrays, g: np.random.Generator) -> _Workload:
    w = zipf_weights(s.topics, s.zipf_s, g)
    sub_leaf = g.choice(arrays.leaves, size=s.subscribers)
    # k topics per subscriber drawn by weight without replacement: the k largest
    # log(w) + Gumbel keys (the Gumbel-top-k trick, the same law as drawing one at a time)
    keys = np.log(w) + g.gumbel(size=(s.subscribers, s.topics))
    k = s.topics_per_subscriber
    picks = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    subs_idx = np.repeat(np.arange(s.subscribers), k)
    flat = picks.ravel()
    order = np.argsort(flat, kind="stable")
    bounds = np.searchsorted(flat[order], np.arange(s.topics + 1))
    members = [subs_idx[order[bounds[t] : bounds[t + 1]]] for t in range(s.topics)]
    pubs = [
        g.choice(s.topics, size=s.topics_per_publisher, replace=False) for _ in range(s.publishers)
    ]
    return _Workload(sub_leaf, members, pubs)


def run_resilience(setup: ResilienceSetup) -> dict[str, Any]:
    """Graph-level Monte Carlo of §6.2.1 Figs. 9-10 for one point: mean and per-run values."""
    tree = complete_tree(setup.nodes, setup.arity)
    arrays = TreeArrays.build(tree, setup.ind)
    n = len(arrays.parent)
    per_run = []
    for run in range(setup.runs):
        g = np.random.default_rng([setup.seed, run])
        wl = _workload(setup, arrays, g)
        bad = np.zeros(n, dtype=bool)
        count = round(setup.p * (n - 1))
        bad[1 + g.choice(n - 1, size=count, replace=False)] = True
        ratios: list[float] = []
        for j in range(setup.publishers):
            perm = np.arange(n) if j == 0 else _placement(n, g)
            sub_ok = reached(arrays, bad[perm])[wl.sub_leaf]  # position m: broker perm[m]
            ratios.extend(
                float(sub_ok[wl.subs_of[t]].mean()) for t in wl.pub_topics[j] if len(wl.subs_of[t])
            )
        per_run.append(float(np.mean(ratios)) if ratios else 1.0)
    return {
        "nodes": n,
        "arity": setup.arity,
        "ind": setup.ind,
        "p": setup.p,
        "h": arrays.height,
        "resilience": float(np.mean(per_run)),
        "per_run": per_run,
        "analytic": analytic_resilience(setup.p, arrays.height, setup.ind),
    }


# -- the real cores ------------------------------------------------------------------------


@dataclass(slots=True)
class CoreRun:
    """What :func:`simulate_cores` measured: per subscriber, the topics it received."""

    received: dict[str, set[str]] = field(default_factory=dict)
    duplicates: int = 0
    deliveries: int = 0
    last_delivery_s: float = 0.0


def simulate_cores(
    tree: Tree,
    ind: int,
    malicious: Iterable[str],
    subscriptions: Mapping[str, tuple[str, Sequence[str]]],
    topics: Sequence[str],
    *,
    seed: int = 0,
) -> CoreRun:
    """Real broker cores on ``T_0 .. T_{ind-1}`` (module docstring). ``subscriptions`` maps a
    subscriber to (its home leaf position, its topics); one publication per topic."""
    bad = frozenset(malicious)
    rng = Random(seed)
    lat = internet_latencies(sorted(resilient_graph(tree, ind).edges), rng)
    sims = []
    for k, tk in enumerate(spanning_trees(tree, ind)):
        sigma = relabel_map(tree, k)
        topo = SimTopology(tk, latencies={frozenset(e): lat[frozenset(e)] for e in tk.edges})
        sim = AdversarySimulator(topo, seed=seed + k, behaviours={b: RandomDrop(1.0) for b in bad})
        sim.add_client("pub", tree.root)
        sim.advertise("pub", "topic exists", at=0.0)
        for sub, (leaf, its) in subscriptions.items():
            sim.add_client(sub, sigma[leaf])
            for t in its:
                sim.subscribe(sub, f'topic = "{t}"', at=0.0)
        sim.run()
        sims.append(sim)
    start = max(s.now for s in sims) + 1.0
    pub = sims[0].clients["pub"]
    out = CoreRun({sub: set() for sub in subscriptions})
    seen: dict[str, set[str]] = {sub: set() for sub in subscriptions}
    for i, t in enumerate(topics):
        pe = pub.scheme.protect_event(Event({"topic": t, "seq": i}), now=start, rng=rng)
        msg = Publish(pe.event_id, pub.scheme.profile, pe.routing, pe.body, pe.meta)
        for sim in sims:  # eventguard.txt §5.2: multicast along all ind trees
            sim.send_raw("pub", tree.root, msg, at=start)
    for sim in sims:
        sim.run()
        for sub in subscriptions:
            for d in sim.clients[sub].deliveries:
                out.deliveries += 1
                out.last_delivery_s = max(out.last_delivery_s, d.time - start)
                if d.event_id in seen[sub]:  # subscriber-side dedup by event id
                    out.duplicates += 1
                    continue
                seen[sub].add(d.event_id)
                out.received[sub].add(str(d.event["topic"]))
    return out
