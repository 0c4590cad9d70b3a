"""Probabilistic multi-path routing against frequency inference (psguard.txt §4.2, Figs. 6-8).

Theory of operation
-------------------
Token ``t`` (frequency ``lambda_t``, Zipf) is set up on ``ind_t = clamp(round(tau lambda_t),
1, ind_max)`` of the relabelled spanning trees ``T_0 ..`` of G^ind
(:mod:`pubguard.overlay.multipath`); each event takes one of them uniformly at random
(§4.2: "the publisher P uniformly and randomly chooses one path amongst the set of ind_t
independent paths"). The publisher is the root; subscribers are the leaf positions; every
broker in between is a curious routing node (psguard.txt §5.2.2). The paper's 63-node network
is a binary tree, which has at most 2 independent paths; the sweep to ind_max = 10 needs every
inner node to have 10 children, so its default is the 10-ary tree of depth 3 (110 routing
nodes, 1000 subscribers; ``--arity 2 --depth 5`` is the paper's 63 nodes, ind_max <= 2).

What a routing node observes is counted on *its own routed paths*: broker ``m`` sees an event
of token ``t`` sent on ``T_k`` iff the position it serves there, ``sigma_k^{-1}(m)``, has a
subscriber of ``t`` below it (the event is routed only toward matching subscribers). Its
apparent entropy is ``S_app(m) = -sum lambda'_t log lambda'_t`` over its own counts; the
non-collusive figure (Fig. 6) is the mean over routing nodes that saw any event. Colluding
nodes (Fig. 7) pool what they saw and recognise the same event on several of them (its id), so
a pooled count is the number of *distinct* events of ``t`` any of them saw; with every node
colluding that is every routed event, and ``S_app`` returns to ``S_act`` (tested within 1 %).
Every token gets at least one subscriber (round robin), the remaining subscriptions are drawn
by Zipf weight, so every published event is routed somewhere.

Construction cost (Fig. 8): setting token ``t`` up on one tree costs one subscription message
per edge of the subtree spanning its subscribers (the same on every ``T_k``, which are
isomorphic), so the cost is ``sum_t ind_t * edges_t``, normalised to ``ind_max = 1``; we also
report the paper's simpler count, paths set up ``sum_t ind_t / |Gamma|``.

tau: the paper reports, at ind_max = 10, 12 tokens on 10 paths and 48 on fewer than 2; with
Zipf s = 1 over 128 tokens both hold exactly for tau in [652, 660), so the default is 655
(the counts themselves are computed, and reported, from tau).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from pubguard.errors import ValidationError
from pubguard.overlay.resilient import entropy, ind_for_frequencies
from pubguard.overlay.tree import ary_tree
from pubguard.sim.resilience import TreeArrays

__all__ = [
    "DEFAULT_TAU",
    "PSGUARD_PAPER",
    "EntropySetup",
    "Observation",
    "interest_matrix",
    "entropy_point",
    "observe",
    "run_entropy",
    "zipf_frequencies",
]

DEFAULT_TAU: Final = 655.0
# psguard.txt §5.2.2 (Figs. 6-8 are plots; these are the numbers the text gives)
PSGUARD_PAPER: Final = {
    "S_max": 4.852,
    "S_act": 3.849,
    "tokens_on_10_paths_at_ind_max_10": 12,
    "tokens_below_2_paths_at_ind_max_10": 48,
    "S_app_at_ind_max_5_within_of_S_max": 0.10,
    "cost_ratio_ind_max_5": 3.0,
}


def zipf_frequencies(n: int, s: float = 1.0) -> np.ndarray:
    """``lambda_t`` for ranks 1..n, normalised (token ``t`` has rank ``t + 1``)."""
    w = 1.0 / np.arange(1, n + 1, dtype=float) ** s
    return w / w.sum()


@dataclass(frozen=True, slots=True)
class EntropySetup:
    arity: int = 10
    depth: int = 3
    tokens: int = 128
    zipf_s: float = 1.0
    tau: float = DEFAULT_TAU
    tokens_per_subscriber: int = 32  # psguard.txt §5: "each subscriber subscribed for 32 topics"
    events: int = 200_000
    collusion_draws: int = 20
    seed: int = 1

    def __post_init__(self) -> None:
        if self.arity < 1 or self.depth < 1 or self.tokens < 1 or self.events < 1:
            raise ValidationError("arity, depth, tokens and events must be >= 1")
        if not 1 <= self.tokens_per_subscriber <= self.tokens:
            raise ValidationError("tokens per subscriber must be in 1 .. tokens")


def interest_matrix(arrays: TreeArrays, subs: Sequence[Sequence[int]], tokens: int) -> np.ndarray:
    """``[t, position]``: is there a subscriber of ``t`` at or below the position?
    ``subs[i]`` are the tokens of the subscriber on the i-th leaf."""
    n = len(arrays.parent)
    m = np.zeros((tokens, n), dtype=bool)
    for leaf, ts in zip(arrays.leaves, subs, strict=True):
        m[list(ts), leaf] = True
    for lv in reversed(arrays.levels):
        for pos in lv:
            m[:, arrays.parent[pos]] |= m[:, pos]
    return m


@dataclass(frozen=True, slots=True)
class Observation:
    """``counts[k][t]`` events of token t sent on ``T_k``; ``seen[k][t]`` the brokers
    (labels) that routed them."""

    n_tk: np.ndarray  # (ind_max, tokens)
    per_node: np.ndarray  # (nodes, tokens) counts each broker saw
    seen: list[list[np.ndarray]]


def observe(arrays: TreeArrays, interest: np.ndarray, n_tk: np.ndarray) -> Observation:
    """What every broker counts when ``n_tk[k, t]`` events of token t take ``T_k``."""
    n = len(arrays.parent)
    per_node = np.zeros((n, interest.shape[0]), dtype=np.int64)
    seen: list[list[np.ndarray]] = []
    for k in range(n_tk.shape[0]):
        row = []
        for t in range(interest.shape[0]):
            brokers = arrays.sigma[k, np.flatnonzero(interest[t])]
            brokers = brokers[brokers != 0]  # the root is the publisher, not an observer
            row.append(brokers)
            if n_tk[k, t]:
                per_node[brokers, t] += n_tk[k, t]
        seen.append(row)
    return Observation(n_tk, per_node, seen)


def _pooled(obs: Observation, members: np.ndarray) -> np.ndarray:
    """Distinct events per token seen by any of ``members`` (colluders share event ids)."""
    mask = np.zeros(obs.per_node.shape[0], dtype=bool)
    mask[members] = True
    out = np.zeros(obs.n_tk.shape[1], dtype=np.int64)
    for k, row in enumerate(obs.seen):
        for t, brokers in enumerate(row):
            if obs.n_tk[k, t] and mask[brokers].any():
                out[t] += obs.n_tk[k, t]
    return out


def _entropy(counts: np.ndarray) -> float:
    return entropy({i: float(c) for i, c in enumerate(counts) if c > 0})


def _subscriptions(s: EntropySetup, leaves: int, g: np.random.Generator) -> list[list[int]]:
    lam = zipf_frequencies(s.tokens, s.zipf_s)
    subs: list[set[int]] = [set() for _ in range(leaves)]
    for t in range(s.tokens):  # every token has a subscriber (round robin)
        if len(subs[t % leaves]) < s.tokens_per_subscriber:
            subs[t % leaves].add(t)
    for ts in subs:
        while len(ts) < s.tokens_per_subscriber:
            ts.add(int(g.choice(s.tokens, p=lam)))
    return [sorted(ts) for ts in subs]


def run_entropy(
    setup: EntropySetup, ind_max: int, fractions: Sequence[float] = (0.0, 0.1, 0.2, 0.5, 1.0)
) -> dict[str, Any]:
    """One point of Figs. 6-8: S_app (non-collusive, and collusive per fraction), the paths
    used per token and the construction cost at this ``ind_max``."""
    tree = ary_tree(setup.arity, setup.depth)
    if ind_max > setup.arity:
        raise ValidationError(f"ind_max {ind_max} needs arity >= ind_max (have {setup.arity})")
    arrays = TreeArrays.build(tree, ind_max)
    g = np.random.default_rng(setup.seed)
    lam = zipf_frequencies(setup.tokens, setup.zipf_s)
    ind = ind_for_frequencies(dict(enumerate(lam)), tau=setup.tau, ind_max=ind_max)
    subs = _subscriptions(setup, len(arrays.leaves), g)
    interest = interest_matrix(arrays, subs, setup.tokens)
    per_token = g.multinomial(setup.events, lam)
    n_tk = np.zeros((ind_max, setup.tokens), dtype=np.int64)
    for t in range(setup.tokens):
        n_tk[: ind[t], t] = g.multinomial(per_token[t], np.full(ind[t], 1.0 / ind[t]))
    obs = observe(arrays, interest, n_tk)
    # the routing nodes: every broker between the publisher (root) and the subscribers
    # (leaves), psguard.txt §5.2.2 "the tree's root node acts as the publisher and its leaf
    # nodes act as subscribers"; a broker keeps its depth in every T_k
    routing = np.concatenate(arrays.levels[:-1]) if len(arrays.levels) > 1 else arrays.levels[0]
    active = [m for m in routing if obs.per_node[m].sum() > 0]
    per_node = np.array([_entropy(obs.per_node[m]) for m in active])
    s_app = float(per_node.mean())
    s_act = _entropy(per_token)
    collusive = {}
    for f in fractions:
        size = round(f * len(routing))
        vals = [
            _entropy(_pooled(obs, g.choice(routing, size=size, replace=False)))
            for _ in range(1 if size in (0, len(routing)) else setup.collusion_draws)
            if size > 0
        ]
        collusive[f"{f:g}"] = float(np.mean(vals)) if vals else s_app
    edges = interest[:, 1:].sum(axis=1)  # positions below the root with a subscriber below
    paths = np.array([ind[t] for t in range(setup.tokens)])
    return {
        "ind_max": ind_max,
        "S_max": math.log(setup.tokens),
        "S_act": s_act,
        "S_act_exact": entropy(dict(enumerate(lam))),
        "S_app_noncollusive": s_app,
        # the spread behind the mean, and why it stays below S_act (docs/resilience.md)
        "S_app_node_min": float(per_node.min()),
        "S_app_node_max": float(per_node.max()),
        "nodes_above_S_act": float((per_node > s_act).mean()),
        "nodes_routing_top_token": float(interest[0, routing].mean()),
        "S_app_collusive": collusive,
        "tokens_at_ind_max": int((paths == ind_max).sum()),
        "tokens_below_2": int((paths < 2).sum()),
        "paths_per_token_mean": float(paths.mean()),
        "setup_messages": int((paths * edges).sum()),
        "routing_nodes": len(routing),
        "observers_active": len(active),
    }


def entropy_point(args: tuple[EntropySetup, int]) -> dict[str, Any]:
    """``run_entropy(setup, ind_max)`` for one sweep task (a picklable module function)."""
    setup, ind_max = args
    return run_entropy(setup, ind_max)
