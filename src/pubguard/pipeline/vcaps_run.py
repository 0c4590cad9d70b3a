"""vcaps.txt §6.1's workload on the Spark pipeline (``pubguard experiments vcaps --spark``).

The simulator (:mod:`pubguard.sim.vcaps_experiment`) measures the 40-broker tree; this runs
the same workload shape through the batch pipeline instead: the trusted driver registers every
filter (Stage I) and protects the notifications, the executors (untrusted brokers) intersect
each routing header with the BFPoset of the broadcast tokens
(:class:`~pubguard.pipeline.vcaps_profile.VcapsPipeline`), and the subscribers open what they
receive. The opened (subscriber, notification) pairs are compared with the reference
matcher's, and the stage times come from :func:`~pubguard.pipeline.run.run_pipeline`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pubguard.matching.index import IndexedMatcher
from pubguard.pipeline.opener import read_opened
from pubguard.pipeline.run import load_run_workload, run_pipeline
from pubguard.sim.workloads import Workload, generate

__all__ = ["reference_pairs", "run_vcaps_on_spark"]


def reference_pairs(wl: Workload) -> set[tuple[str, str]]:
    """(subscriber, event id) for every subscription each event matches (indexed matcher)."""
    m = IndexedMatcher(wl.filters.items())
    holders: dict[str, list[str]] = {}
    for s in wl.subscriptions:
        holders.setdefault(str(s.filter.id), []).append(s.subscriber)
    return {
        (sub, str(e.id))
        for e in wl.events
        for fid in m.match(e)
        for sub in holders.get(str(fid), ())
    }


def run_vcaps_on_spark(
    spark: Any,
    n_filters: int,
    n_subscribers: int,
    workdir: Path,
    *,
    events: int,
    profiles: Sequence[str],
    seed: int = 0,
    progress: Callable[[str, str], None] | None = None,
) -> dict[str, Any]:
    """Generate the §6.1 workload (``n_filters`` unique filters, ``n_subscribers`` drawing
    U[1, 200] each, ``events`` notifications) in ``workdir`` and run every profile of
    ``profiles`` through the pipeline on ``spark``; JSON-ready rows."""
    wl_dir = workdir / f"wl-vcaps-{n_filters}"
    generate(
        "vcaps",
        wl_dir,
        seed=seed,
        force=True,
        filters=n_filters,
        subscribers=n_subscribers,
        events=events,
    )
    wl = load_run_workload(wl_dir, profile=profiles[0] if profiles else "vcaps-rv")
    ref = reference_pairs(wl)
    out: dict[str, Any] = {
        "filters": len(wl.filters),
        "subscribers": len(wl.subscribers),
        "subscriptions": len(wl.subscriptions),
        "events": len(wl.events),
        "reference_deliveries": len(ref),
        "master": spark.sparkContext.master,
        "profiles": {},
    }
    for p in profiles:
        t0 = time.perf_counter()
        summary = run_pipeline(
            spark, wl, workdir / f"out-{p}", profile=p, seed=seed, progress=progress or _quiet
        )
        wall = time.perf_counter() - t0
        opened = read_opened(workdir / f"out-{p}" / "opened")
        pairs = list(zip(opened.subscriber, opened.event_id, strict=True))
        out["profiles"][p] = {
            "deliveries": summary["deliveries"],
            "opened": summary["opened"],
            "drops": summary["drops"],
            "equal_reference": set(pairs) == ref and len(pairs) == len(set(pairs)),
            "seconds": summary["seconds"],
            "wall_s": round(wall, 2),
        }
    return out


def _quiet(stage: str, msg: str) -> None:
    pass
