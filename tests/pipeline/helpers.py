"""Helpers shared by the pipeline tests (tiny workloads, the reference pairs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pubguard.matching.reference import ReferenceMatcher
from pubguard.pipeline.opener import read_opened
from pubguard.pipeline.run import run_pipeline
from pubguard.sim.workloads import Workload, generate, load_workload

NOW = 1_700_000_000_000
# JVM options for the test-only cluster's JVMs (master, worker, the driver and its executor):
# tiny jobs on short-lived JVMs spend most of their CPU in the JIT's optimising compiler, and
# C1 alone halves their start-up and job latency on two shared cores (never for user runs:
# long jobs need C2)
FAST_JVM = "-XX:TieredStopAtLevel=1"
MASTER = b"M" * 32
SHAPES: dict[str, dict[str, int]] = {
    "psguard": {"subscribers": 4, "events": 40, "topics_per_subscriber": 10},
    "vcaps": {"filters": 80, "subscribers": 5, "events": 40},
    "eventguard": {
        "subscribers": 10,
        "events": 30,
        "topics": 12,
        "publishers": 3,
        "topics_per_publisher": 4,
        "topics_per_subscriber": 2,
    },
}


def make_workload(root: Path, shape: str) -> tuple[Path, Workload]:
    d = root / f"wl-{shape}"
    if not d.exists():
        generate(shape, d, seed=11, **SHAPES[shape])
    return d, load_workload(d)


def expected_pairs(wl: Workload) -> set[tuple[str, str]]:
    ref = ReferenceMatcher(wl.filters)
    out = set()
    for e in wl.events:
        fs = ref.match(e)
        out |= {(s.subscriber, str(e.id)) for s in wl.subscriptions if s.filter.id in fs}
    return out


def opened_pairs(out: Path) -> set[tuple[str, str]]:
    pdf = read_opened(out / "opened")
    pairs = list(zip(pdf.subscriber, pdf.event_id, strict=True))
    assert len(pairs) == len(set(pairs)), "a subscriber got an event twice"
    return set(pairs)


def run(spark: Any, wl_dir: Path, out: Path, mode: str) -> dict[str, Any]:
    return run_pipeline(
        spark, wl_dir, out, profile="psguard", mode=mode, master_secret=MASTER, now_ms=NOW, seed=5
    )


class Runs:
    """Batch runs of every (profile, mode) on one small psguard-shape workload, made on first
    use and shared by the tests that need them (the matrix, the cluster run)."""

    def __init__(self, spark: Any, root: Path) -> None:
        self.spark, self.root = spark, root
        self.wl_dir, wl = make_workload(root, "psguard")
        # a second subscriber who chose the same constraints under its own filter id
        # (Filter equality ignores ids: both ids must be matched and delivered)
        twin = next(s for s in wl.subscriptions if len(s.filter.constraints) > 1)
        line = {"subscriber": "twin", "filter": twin.filter.with_id("twin-filter").to_json()}
        with (self.wl_dir / "subscriptions.jsonl").open("a") as fh:
            fh.write(json.dumps(line) + "\n")
        self.wl = load_workload(self.wl_dir)
        self.twin = twin.filter.id
        self.done: dict[tuple[str, str], tuple[Path, dict[str, Any]]] = {}

    def get(self, profile: str, mode: str) -> tuple[Path, dict[str, Any]]:
        if (profile, mode) not in self.done:
            out = self.root / f"out-{profile}-{mode}"
            summary = run_pipeline(
                self.spark,
                self.wl_dir,
                out,
                profile=profile,
                mode=mode,
                master_secret=MASTER,
                now_ms=NOW,
                seed=5,
            )
            self.done[(profile, mode)] = (out, summary)
        return self.done[(profile, mode)]
