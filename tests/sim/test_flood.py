"""eventguard.txt Fig. 13 / Fig. 3 in the simulator (small, seeded, real Ed25519 and AES-GCM):
with the routing guard a flooding broker's traffic stops at its honest neighbours and the
legitimate throughput holds; without it the flood spreads and the throughput falls."""

from __future__ import annotations

import pytest

from pubguard.errors import ValidationError
from pubguard.sim.flood import CostModel, FloodParams, run_flood, run_point

SMALL = FloodParams(depth=3, duration=0.4, warmup=0.15, flood_rates=(0.0, 100.0, 400.0))


@pytest.fixture(scope="module")
def series():
    return run_flood(SMALL)


def _neighbours(p: FloodParams) -> set[str]:
    t = p.tree()
    out = set()
    for a in p.attacker_brokers():
        out |= set(t.children[a]) | ({t.parent[a]} if t.parent[a] else set())
    return out - set(p.attacker_brokers())


def test_guard_contains_the_flood_to_the_attackers_neighbours(series):
    top = series["guard"][-1]
    assert top.flood_sent > 0 and top.flood_handled > 0
    assert set(top.reached) == _neighbours(SMALL)  # Fig. 3: nothing beyond the neighbours
    assert all(n == 0 for h, n in top.reach_by_hop.items() if h > 1)
    assert top.flood_delivered == 0  # no flood message reached a subscriber
    assert {"duplicate", "forged"} <= set(top.drops)  # replays and forgeries, each refused


def test_guard_throughput_stays_near_no_attack_and_beats_no_guard(series):
    g, n = series["guard"], series["noguard"]
    g_rel = g[-1].throughput / g[0].throughput
    n_rel = n[-1].throughput / n[0].throughput
    assert g[0].throughput > 0 and n[0].throughput > 0
    assert g_rel > n_rel  # the more graceful drop (Fig. 13)
    # only the subscribers behind the flooded neighbour can lose anything
    behind = sum(1 for leaf in SMALL.tree().leaves if leaf not in SMALL.attacker_brokers())
    assert g_rel >= 1 - 1 / behind - 1e-9


def test_without_the_guard_the_flood_spreads_and_throughput_falls(series):
    n, g = series["noguard"], series["guard"]
    assert len(n[-1].reached) > len(g[-1].reached)
    assert max(h for h, k in n[-1].reach_by_hop.items() if k) > 1
    thr = [r.throughput for r in n]
    step = 1 / ((len(SMALL.tree().leaves) - 1) * SMALL.duration)  # one delivery
    assert all(b <= a + step for a, b in zip(thr, thr[1:], strict=False))
    assert thr[-1] < thr[0]
    assert n[-1].refused_by_subscribers > 0  # forged copies reach subscribers, who refuse them
    assert n[-1].max_utilisation > g[0].max_utilisation


def test_plain_baseline_runs_beside_and_is_not_contained(series):
    pl = series["plain"]
    assert [r.flood_rate for r in pl] == list(SMALL.flood_rates)
    assert pl[0].throughput > 0 and pl[0].reached == ()
    assert len(pl[-1].reached) > len(series["guard"][-1].reached)
    assert "duplicate" in pl[-1].drops  # plain keeps the core's id dedup: verbatim replays stop


def test_interior_attacker_like_fig3_reaches_only_its_neighbours():
    p = FloodParams(depth=3, attacker_depth=1, duration=0.3, warmup=0.1, flood_rates=(200.0,))
    r = run_point(p, "guard", 200.0)
    assert set(r.reached) == _neighbours(p) and len(r.reached) == 3  # parent + two children
    assert r.flood_delivered == 0


def test_runs_are_deterministic():
    p = FloodParams(depth=2, duration=0.2, warmup=0.1, flood_rates=(150.0,), seed=3)
    a, b = run_point(p, "guard", 150.0), run_point(p, "guard", 150.0)
    assert a.to_json() == b.to_json()


@pytest.mark.parametrize(
    "kw",
    [
        {"depth": 0},
        {"arity": 2, "depth": 2, "attackers": 4},  # every leaf malicious
        {"attacker_depth": 5},
        {"flood_rates": (-1.0,)},
        {"flood_rates": ()},
        {"duration": 0.0},
        {"load": float("nan")},
        {"depth": 12},  # too many brokers
        {"seed": 1.5},
    ],
)
def test_bad_parameters_are_validation_errors(kw):
    with pytest.raises(ValidationError):
        FloodParams(**kw)


def test_bad_costs_and_variants():
    with pytest.raises(ValidationError):
        CostModel(route_us=0)
    with pytest.raises(ValidationError):
        CostModel(check_us=-1)
    with pytest.raises(ValidationError):
        run_point(FloodParams(depth=2), "spam", 0.0)
    with pytest.raises(ValidationError):
        run_flood(FloodParams(depth=2), variants=["guard", "nope"])
