"""psguard.txt §4.2: probabilistic multi-path routing and the apparent entropy S_app."""

from __future__ import annotations

import math
from collections import Counter
from random import Random

import numpy as np
import pytest

from pubguard.model.events import Event
from pubguard.overlay.multipath import relabel_map, spanning_trees
from pubguard.overlay.tree import ary_tree
from pubguard.pipeline.sweeps import run_sweep
from pubguard.sim.entropy import (
    EntropySetup,
    entropy_point,
    interest_matrix,
    observe,
    run_entropy,
    zipf_frequencies,
)
from pubguard.sim.malicious import AdversarySimulator, Eavesdrop
from pubguard.sim.resilience import TreeArrays
from pubguard.wire.messages import Publish


def test_paper_counts_and_full_collusion() -> None:
    # sparse interest (4 topics a subscriber) keeps it small; the counts do not depend on it
    r = run_entropy(EntropySetup(events=50_000, collusion_draws=2, tokens_per_subscriber=4), 10)
    assert r["S_max"] == pytest.approx(4.852, abs=5e-4)
    assert r["S_act_exact"] == pytest.approx(3.849, abs=5e-4)
    assert (r["tokens_at_ind_max"], r["tokens_below_2"]) == (12, 48)
    # every routing node colluding sees every routed event: S_app -> S_act (within 1 %)
    assert r["S_app_collusive"]["1"] == pytest.approx(r["S_act"], rel=0.01)
    assert r["S_app_collusive"]["0.1"] < r["S_app_collusive"]["1"] + 1e-9


def test_per_node_s_app_at_ind_1_is_the_routed_tokens_entropy() -> None:
    """psguard.txt §4.2 at ind = 1: a node's apparent frequencies are lambda restricted to the
    tokens it routes, renormalised. With the paper's workload (63-node binary tree, 32 Zipf
    topics per subscriber, §5) every routing node routes the most popular token, and then no
    node's S_app reaches S_act (docs/resilience.md: why Fig. 6's S_app > S_act at ind = 1
    does not follow from the paper's definitions)."""
    setup = EntropySetup(arity=2, depth=5, events=100_000, collusion_draws=1)
    r = run_entropy(setup, 1)
    assert r["routing_nodes"] == 30 and r["nodes_routing_top_token"] == 1.0
    assert r["nodes_above_S_act"] == 0.0 and r["S_app_node_max"] < r["S_act"]
    lam = zipf_frequencies(128)
    rest = lam[1:] / lam[1:].sum()  # without the top token the tail alone is flatter
    assert -(rest * np.log(rest)).sum() > r["S_act_exact"]


def test_eavesdroppers_on_real_cores_count_what_the_model_counts() -> None:
    """Curious brokers (Eavesdrop) on T_0, T_1 of a 3-ary tree record per token exactly the
    counts the graph-level observation gives for the same events and tree choices."""
    tree = ary_tree(3, 2)
    ind, tokens = 2, 3
    arrays = TreeArrays.build(tree, ind)
    subs = [[i % tokens] for i in range(len(arrays.leaves))]
    interest = interest_matrix(arrays, subs, tokens)
    rng = Random(4)
    plan = [(rng.randrange(tokens), rng.randrange(ind)) for _ in range(30)]
    n_tk = np.zeros((ind, tokens), dtype=np.int64)
    for t, k in plan:
        n_tk[k, t] += 1
    obs = observe(arrays, interest, n_tk)
    spies: dict[str, Counter[object]] = {n: Counter() for n in tree.nodes[1:]}
    sims = []
    for k, tk in enumerate(spanning_trees(tree, ind)):
        sigma = relabel_map(tree, k)
        beh = {n: Eavesdrop() for n in tree.nodes[1:]}
        sim = AdversarySimulator(tk, behaviours=beh)
        sim.add_client("pub", tree.root)
        for leaf, ts in zip(tree.leaves, subs, strict=True):
            # psguard: subscribers are the leaves; here a client on the leaf's broker
            sim.add_client(f"s-{leaf}", sigma[leaf])
            sim.subscribe(f"s-{leaf}", f'topic = "t{ts[0]}"')
        sim.run()
        sims.append((sim, beh))
    for i, (t, k) in enumerate(plan):
        sim = sims[k][0]
        pe = sim.clients["pub"].scheme.protect_event(
            Event({"topic": f"t{t}", "i": i}), now=sim.now, rng=rng
        )
        sim.send_raw("pub", tree.root, Publish(pe.event_id, "plain", pe.routing, pe.body, pe.meta))
    for sim, beh in sims:
        sim.run()
        for n, e in beh.items():
            spies[n].update(e.counts)
    idx = {n: i for i, n in enumerate(tree.nodes)}
    for n, c in spies.items():
        assert {f"t{t}": int(v) for t, v in enumerate(obs.per_node[idx[n]]) if v} == dict(c), n


def test_sweep_runs_as_a_spark_job(spark: object) -> None:
    """One point through the shared Spark session: the executor computes what the driver
    computes (a point is a pure function of its seeded parameters)."""
    setup = EntropySetup(
        arity=3, depth=2, tokens=16, tau=40.0, events=2000, tokens_per_subscriber=4
    )
    rows = run_sweep(spark, entropy_point, [(setup, 3)])
    assert rows == [run_entropy(setup, 3)]
    assert math.isfinite(rows[0]["S_app_noncollusive"]) and rows[0]["ind_max"] == 3
