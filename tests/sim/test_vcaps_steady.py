"""The steady broker figure of ``experiments vcaps``: interleaved repeats, medians, ratios per
notification; and Fig. 6's sampled broker column under ``--poset-stage-ii``."""

from __future__ import annotations

import time
from random import Random

import pytest

from pubguard.schemes.vcaps import FAST, RV, VcapsTree
from pubguard.schemes.vcaps.tokens import decode_token
from pubguard.sim.vcaps_experiment import STAGE_II_SAMPLE, run_workload
from pubguard.sim.vcaps_steady import ratio_stats, steady_broker_cpu
from pubguard.sim.workloads import vcaps_filters
from tests.schemes.vcaps.helpers import publisher
from tests.schemes.vcaps.test_native_fast import TREE, _poset_shape


class StepClock:
    """A clock that each route advances by its own cost: the figure's arithmetic, exactly."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_repeats_interleave_profiles_and_keep_each_notifications_median() -> None:
    clock = StepClock()
    calls: list[tuple[str, int]] = []
    # notification j costs (j + 1) ms under "a" and 2(j + 1) ms under "b", except one burst
    burst = {("b", 1, 2)}  # profile b's third repeat of notification 1 lands on a burst

    def route(p: str, j: int, factor: int):  # type: ignore[no-untyped-def]
        def f() -> str:
            r = sum(1 for c in calls if c == (p, j))
            calls.append((p, j))
            clock.now += (j + 1) * factor * 1_000_000 * (50 if (p, j, r) in burst else 1)
            return f"{p}{j}"

        return f

    routes = {p: [route(p, j, k) for j in range(3)] for p, k in (("a", 1), ("b", 2))}
    seen: list[tuple[str, int, object]] = []
    ms = steady_broker_cpu(
        routes, repeats=3, clock=clock, check=lambda p, j, got: seen.append((p, j, got))
    )
    assert ms == {"a": [1.0, 2.0, 3.0], "b": [2.0, 4.0, 6.0]}  # the burst is not the median
    assert calls[:6] == [("a", 0), ("b", 0), ("b", 0), ("a", 0), ("a", 0), ("b", 0)]  # rotated
    assert {(p, j, got) for p, j, got in seen} == {
        (p, j, f"{p}{j}") for p in "ab" for j in range(3)
    }
    stats = ratio_stats(ms["b"], ms["a"], ["x", "y", "x"], ["x", "y"])
    assert stats["x"]["median"] == 2.0 and stats["x"]["n"] == 2
    assert stats["all"] == {
        "median": 2.0,
        "q1": 2.0,
        "q3": 2.0,
        "min": 2.0,
        "max": 2.0,
        "n": 3,
        "num_ms": 4.0,
        "den_ms": 2.0,
    }
    with pytest.raises(ValueError, match="same notifications"):
        steady_broker_cpu({"a": routes["a"], "b": routes["b"][:2]}, repeats=1, clock=clock)
    with pytest.raises(ValueError, match="at least 1"):
        steady_broker_cpu(routes, repeats=0, clock=clock)


def test_workload_reports_the_steady_figure_and_a_sampled_fig6_column() -> None:
    """A tiny workload: every profile of the steady figure routes as the reference does in
    every repeat; under ``poset_stage_ii`` SRV-fast's Fig. 6 broker column is sampled."""
    out = run_workload(
        100,
        12,
        events=9,
        profiles=("plain", RV, FAST),
        timer=time.perf_counter,
        seed=3,
        tree={"B0": None, "B1": "B0", "B2": "B0"},
        poset_stage_ii=True,
        steady_repeats=3,
        cpu_clock=time.thread_time_ns,
    )
    st = out["steady"]
    assert st["repeats"] == 3 and "thread_time_ns" in st["clock"]
    assert set(st["broker_ms_median"]) == {RV, FAST, "plain"}
    fast_rv = st["ratios"][f"{FAST}/{RV}"]["all"]
    assert fast_rv["n"] == 9 and 0 < fast_rv["min"] <= fast_rv["median"] <= fast_rv["max"]
    assert st["ratios"][f"{RV}/plain"]["all"]["n"] == 9
    for p, r in out["profiles"].items():
        assert r["equal_reference"] is True, p
    fast = out["profiles"][FAST]
    assert fast["stage_ii"] == "poset"
    assert fast["new_filter_broker_sampled"] == f"1 in {STAGE_II_SAMPLE} new filters per broker"
    assert fast["new_filter_broker_ms"]  # measured, in buckets of 200
    assert out["profiles"][RV]["new_filter_broker_sampled"] is False


def test_upkeep_keeps_the_scheduled_keys_of_a_fully_tested_run() -> None:
    """Inserting with the PFPoset's relation plus ``stage_ii_upkeep`` leaves each broker's
    scheduled SRV-fast keys (and its poset) as the real Stage II tests leave them, so a
    sampled insertion pays what it would in the full run (natively: the keys are rebuilt
    as the held set grows past 64 + an eighth)."""
    N = 160  # noqa: N806
    rng = Random(5)
    filters = vcaps_filters(N, rng)
    pub = publisher(FAST, seed=5)
    toks = [decode_token(FAST, pub.register(f, subscriber=f"S{j}")) for j, f in enumerate(filters)]
    handle = {pub.filter_id(f): t.handle for f, t in zip(filters, toks, strict=True)}
    fid = {h: x for x, h in handle.items()}

    def covering(h: bytes) -> tuple[list[bytes], list[bytes]]:
        above, below = pub.relations(fid[h])  # type: ignore[arg-type]
        return [handle[x] for x in above], [handle[x] for x in below]

    tested, given = VcapsTree(TREE), VcapsTree(TREE)
    for j in rng.choices(range(N), k=3 * N):
        leaf = "B2" if j % 2 else "B3"
        tested.subscribe(leaf, f"S{j}", toks[j])
        at: str | None = leaf
        x = f"S{j}"
        while at is not None:
            bf = given.posets[at]
            if toks[j].handle not in bf.tokens:
                bf.stage_ii_upkeep(toks[j])
            if not bf.insert(toks[j], x, covering=covering):
                break
            at, x = TREE[at], at
    assert _poset_shape(tested) == _poset_shape(given)
    for b in TREE:
        a, g = tested.posets[b], given.posets[b]
        assert (a._keys_base is None) == (g._keys_base is None)  # noqa: SLF001
        if a._keys_base is not None and g._keys_base is not None:  # noqa: SLF001
            assert a._keys_base[0] == g._keys_base[0]  # noqa: SLF001
            assert a._keys_pending == g._keys_pending  # noqa: SLF001
