"""How ``bench pipeline`` measures: rounds in alternating order, ratios within a round,
medians and spreads over rounds, and a tiny real run on the shared session whose two joins
agree on the deliveries."""

from __future__ import annotations

import io
import statistics
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.pipeline import bench as B

SECS = st.floats(min_value=0.01, max_value=100.0, allow_nan=False)


def test_rounds_alternate_their_order() -> None:
    orders = B._round_orders(["plain", "eventguard/deterministic"], 4)
    assert (
        orders
        == [
            ["plain", "eventguard/deterministic"],
            ["eventguard/deterministic", "plain"],
        ]
        * 2
    )


def test_ratio_is_the_median_of_per_round_ratios_not_a_ratio_of_bests() -> None:
    # a neighbour's burst slows round 2 of the plaintext join and round 3 of the run
    timed = {"plain": B._Timed([10.0, 20.0, 10.0], 7), "eg/d": B._Timed([10.0, 10.0, 20.0], 7)}
    timed1 = {"plain": B._Timed([20.0, 20.0, 20.0], 7), "eg/d": B._Timed([25.0, 20.0, 20.0], 7)}
    out = B._group_result(timed, timed1, 100, "topics", lambda *_: None)
    r = out["eg/d"]
    assert r["ratio_rounds"] == [1.0, 2.0, 0.5]
    assert r["ratio_vs_plain"] == 1.0 and r["ratio_spread"] == [0.5, 2.0]
    assert r["seconds"] == 10.0 and r["seconds_rounds"] == [10.0, 10.0, 20.0]
    assert r["ratio_1core_rounds"] == [0.8, 1.0, 1.0]
    # round i of 2 cores against round i of 1 core: (ours_1/ours_2) / (plain_1/plain_2)
    assert r["scaling_vs_plain_rounds"] == pytest.approx([1.25, 2.0, 0.5])
    assert r["scaling_vs_plain"] == pytest.approx(1.25)
    assert r["scaling_vs_plain_spread"] == pytest.approx([0.5, 2.0])
    assert out["plain"]["scaling"] == 2.0 and "ratio_vs_plain" not in out["plain"]


@given(st.lists(st.tuples(SECS, SECS, SECS, SECS), min_size=1, max_size=7))
def test_scaling_vs_plain_is_the_per_round_ratio_of_ratios(rounds: list[Any]) -> None:
    p2, o2, p1, o1 = (list(c) for c in zip(*rounds, strict=True))
    timed = {"plain": B._Timed(p2, 1), "x/d": B._Timed(o2, 1)}
    timed1 = {"plain": B._Timed(p1, 1), "x/d": B._Timed(o1, 1)}
    r = B._group_result(timed, timed1, 10, "k", lambda *_: None)["x/d"]
    per_round = [(b / a) / (d / c) for a, b, c, d in zip(o2, o1, p2, p1, strict=True)]
    assert r["scaling_vs_plain_rounds"] == pytest.approx(per_round)
    assert r["scaling_vs_plain"] == pytest.approx(statistics.median(per_round))
    lo, hi = r["ratio_spread"]
    assert lo <= r["ratio_vs_plain"] <= hi


def test_a_tiny_bench_on_the_shared_session(spark: Any) -> None:
    """One round (no warm-up, to keep the suite short) of the eventguard match stage beside the plaintext
    join: the same deliveries, a time per round, the ratio and a table with its spread."""
    from rich.console import Console

    groups = B._groups(40, 12, ["eventguard"], ["deterministic"], seed=3)
    timed = B._time_all(spark, groups["topics"], 1, warm_up=False)  # suite time: no warm-up
    assert timed["plain"].deliveries == timed["eventguard/deterministic"].deliveries > 0
    assert all(len(t.seconds) == len(t.publications) == 1 for t in timed.values())
    assert all(0 < t.publications[0] < t.seconds[0] for t in timed.values())
    assert all(len(t.cpu) == 1 and t.cpu[0] > 0 for t in timed.values())  # the JVM's work
    out = B._group_result(timed, None, 12, "topics", lambda *_: None)
    res = {
        "events": 12,
        "master": "local[2]",
        "subscriptions": {"topics": 40},
        "groups": {"topics": out},
        "repeat": 1,
        "paper": B.PAPER,
    }
    buf = io.StringIO()
    B.print_bench(res, Console(file=buf, width=200))
    r = out["eventguard/deterministic"]
    ratio = timed["plain"].seconds[0] / timed["eventguard/deterministic"].seconds[0]
    assert r["ratio_vs_plain"] == ratio and r["ratio_spread"] == [ratio, ratio]
    assert f"{ratio:.2f}-{ratio:.2f}" in buf.getvalue()
    assert "median of 1 rounds" in buf.getvalue()
    cpu_ratio = timed["plain"].cpu[0] / timed["eventguard/deterministic"].cpu[0]
    assert r["cpu_ratio_vs_plain"] == cpu_ratio and f"{cpu_ratio:.2f} (" in buf.getvalue()
    narrow = io.StringIO()  # piped to a file or a pager: 80 columns, nothing cut off
    B.print_bench(res, Console(file=narrow, width=80))
    lines = narrow.getvalue().splitlines()
    assert max(len(x) for x in lines) <= 80 and "…" not in narrow.getvalue()
    assert any(f"{ratio:.2f} (" in x for x in lines)


_BURN = "import time\nt = time.process_time() + 0.25\nwhile time.process_time() < t: pass\n"


def test_tree_cpu_counts_live_and_reaped_descendants() -> None:
    """A run's CPU is its process tree's: a worker still running is counted, and one that
    has exited and been reaped stays counted (in its parent's cutime), once."""
    import subprocess
    import sys
    import time

    before = B.tree_cpu_seconds()
    assert before is not None
    child = subprocess.Popen([sys.executable, "-c", _BURN + "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        live = before
        while live - before < 0.2 and time.monotonic() < deadline:
            time.sleep(0.05)
            live = B.tree_cpu_seconds() or before
        assert live - before >= 0.2  # the live child's burn
    finally:
        child.kill()
        child.wait()
    reaped = B.tree_cpu_seconds()
    assert reaped is not None and reaped - before >= 0.2
    assert B.tree_cpu_seconds(root=2**22 + 7) is None  # no such process
