"""Malicious nodes, GT-ITM-like latencies, and resilience on G^ind: the graph-level Monte Carlo
against the real broker cores, and against eventguard.txt §5.2's formula."""

from __future__ import annotations

import statistics
from random import Random

import numpy as np
import pytest

from pubguard.errors import ValidationError
from pubguard.overlay.tree import ary_tree
from pubguard.sim.canary import canary_scan
from pubguard.sim.internet import RTT_MAX_MS, RTT_MIN_MS, draw_rtt_ms
from pubguard.sim.malicious import place_malicious
from pubguard.sim.resilience import (
    ResilienceSetup,
    TreeArrays,
    reached,
    run_resilience,
    simulate_cores,
)
from pubguard.sim.resilience_report import analytic_numbers, fig8_cost


def test_rtts_have_the_gt_itm_statistics() -> None:
    r = draw_rtt_ms(Random(7), 20_000)
    assert RTT_MIN_MS <= min(r) and max(r) <= RTT_MAX_MS
    assert abs(statistics.fmean(r) - 74) < 1.5
    assert abs(statistics.pstdev(r) - 50) < 1.5


def test_placement_sparse_and_clustered() -> None:
    tree = ary_tree(2, 6)
    sparse = place_malicious(tree, 20, Random(1), exclude=[tree.root])
    clustered = place_malicious(tree, 20, Random(1), clusters=2, exclude=[tree.root])
    assert len(sparse) == len(clustered) == 20 and tree.root not in sparse | clustered

    def boundary(bad: frozenset[str]) -> int:
        return sum((u in bad) != (v in bad) for u, v in tree.edges)

    assert boundary(clustered) < boundary(sparse)
    with pytest.raises(ValidationError):
        place_malicious(tree, len(tree), Random(1), exclude=[tree.root])


@pytest.mark.parametrize("ind", [1, 2, 3])
def test_monte_carlo_equals_real_cores(ind: int) -> None:
    """Same malicious droppers, same subscriptions: the graph-level predicate gives exactly the
    deliveries of real broker cores on T_0 .. T_{ind-1}, each event at most once."""
    tree = ary_tree(3, 3)  # 40 brokers
    rng = Random(ind)
    bad = place_malicious(tree, 8, rng, exclude=[tree.root])
    topics = ["a", "b", "c"]
    subs = {
        f"s{i}": (leaf, rng.sample(topics, rng.randint(1, 3))) for i, leaf in enumerate(tree.leaves)
    }
    run = simulate_cores(tree, ind, bad, subs, topics, seed=ind)
    arrays = TreeArrays.build(tree, ind)
    idx = {n: i for i, n in enumerate(tree.nodes)}
    mask = np.zeros(len(tree), dtype=bool)
    mask[[idx[b] for b in bad]] = True
    ok = reached(arrays, mask)
    for sub, (leaf, its) in subs.items():
        assert run.received[sub] == (set(its) if ok[idx[leaf]] else set()), sub
    assert 0 < run.last_delivery_s < 2.0  # virtual time over 24-184 ms RTT links


def test_monte_carlo_resilience_equals_the_cores_at_255_brokers() -> None:
    """The validation at the largest real-core size: 255 brokers, ind = 2, p ~ 0.1."""
    tree = ary_tree(2, 7)
    bad = place_malicious(tree, 25, Random(5), exclude=[tree.root])
    subs = {f"s{i}": (leaf, ["w"]) for i, leaf in enumerate(tree.leaves)}
    run = simulate_cores(tree, 2, bad, subs, ["w"], seed=3)
    arrays = TreeArrays.build(tree, 2)
    idx = {n: i for i, n in enumerate(tree.nodes)}
    mask = np.zeros(len(tree), dtype=bool)
    mask[[idx[b] for b in bad]] = True
    mc = reached(arrays, mask)[arrays.leaves].mean()
    cores = sum(bool(r) for r in run.received.values()) / len(subs)
    assert cores == pytest.approx(mc)
    assert 0 < cores < 1
    assert run.duplicates == run.deliveries - sum(map(len, run.received.values())) > 0


def test_simulated_resilience_tracks_the_formula() -> None:
    """eventguard.txt §5.2: 1 - (1 - (1 - p)^h)^ind, within 0.03 over p in [0, 0.5]."""
    for ind in (1, 2):
        for p in (0.0, 0.1, 0.2, 0.35, 0.5):
            setup = ResilienceSetup(nodes=511, ind=ind, p=p, subscribers=512, publishers=64, runs=3)
            r = run_resilience(setup)
            assert abs(r["resilience"] - r["analytic"]) <= 0.03, (ind, p, r)


def test_analytic_numbers_and_cost() -> None:
    a = analytic_numbers()
    assert a["s5_1_pr_succ_p0.1_h5"]["ours"] == pytest.approx(0.59, abs=0.005)
    assert a["s5_2_h_max_ind2_p0.1_r0.9"]["ours"] == pytest.approx(3.61, abs=0.005)
    assert a["s5_2_arity_for_ns1000"]["ours"] == 7
    assert a["appendix_a_tree_cost_a4_ns1000"]["ours"] == 1332
    assert a["appendix_a_bft_over_tree"]["ours"] >= 20
    rows = fig8_cost((2, 4), 256, (1, 16, 256), (1, 2), seed=1, draws=3)
    for r in rows:
        assert r["messages"] <= r["bound"] + 1e-9
        assert r["by_ind"]["2"] == pytest.approx(2 * r["messages"])  # Claim 5.4


def test_canary_scan_plain_exposed_eventguard_not() -> None:
    tree = ary_tree(2, 3)
    bad = place_malicious(tree, 3, Random(2), exclude=[tree.root])
    plain = canary_scan(tree, bad, profile="plain", events=3, seed=1)
    eg = canary_scan(tree, bad, profile="eventguard", events=3, seed=1)
    assert plain["delivered"] == eg["delivered"] == 3 * len(tree.leaves)
    exposed_paths = sum(bool(set(tree.path_from_root(leaf)) & bad) for leaf in tree.leaves)
    assert plain["exposed"] == 3 * exposed_paths > 0
    assert eg["exposed"] == 0 and eg["publications_read"] == 0


def test_table2_costs_measured_and_fig7_load_model() -> None:
    from pubguard.sim.eventguard_load import PAPER_TABLE2_MS, fig7_load, measure_costs

    ours = measure_costs(5)
    assert set(ours["table2_ms"]) <= set(PAPER_TABLE2_MS)
    assert all(v > 0 for v in ours["table2_ms"].values())
    assert ours["table3_publication_bytes"]["added"] > 0
    rows = fig7_load(PAPER_TABLE2_MS, (0.1, 0.5, 0.9))
    # the MS only sees (un)subscriptions, a publisher only publications (§6.2.1)
    assert [r["ms_relative"] for r in rows] == sorted(r["ms_relative"] for r in rows)
    assert rows[0]["publisher_relative"] == 1.0 > rows[-1]["publisher_relative"]


def test_selective_dropping_by_topic_on_real_cores() -> None:
    """A broker that drops one topic silences it below itself and forwards the rest."""
    from pubguard.model.events import Event
    from pubguard.sim.malicious import AdversarySimulator, SelectiveDrop

    tree = ary_tree(2, 2)
    drop = SelectiveDrop(frozenset({"a"}))
    sim = AdversarySimulator(tree, behaviours={"b1": drop})
    sim.add_client("pub", "b0")
    for leaf in tree.leaves:
        sim.add_client(f"s-{leaf}", leaf)
        for t in ("a", "b"):
            sim.subscribe(f"s-{leaf}", f'topic = "{t}"')
    sim.run()
    for t in ("a", "b", "a"):
        sim.publish("pub", Event({"topic": t}))
    sim.run()
    got = {
        leaf: sorted(d.event["topic"] for d in sim.clients[f"s-{leaf}"].deliveries)
        for leaf in tree.leaves
    }
    assert got == {"b3": ["b"], "b4": ["b"], "b5": ["a", "a", "b"], "b6": ["a", "a", "b"]}
    assert drop.dropped == 2
