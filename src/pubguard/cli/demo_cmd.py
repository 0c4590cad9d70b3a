"""``pubguard demo`` (first version): generate a vcaps workload, match it, summarise.

Self-contained real work: a seeded ssbg-like workload (vcaps.txt §6.1) is written to a temporary
folder, read back strictly, indexed with the counting matcher and matched event by event; the
result is checked against the reference matcher on a sample and summarised in rich tables.
Later issues replace this with the secure multi-domain network scenario.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from pubguard.cli.common import console, print_json
from pubguard.errors import StateError
from pubguard.matching import IndexedMatcher, ReferenceMatcher
from pubguard.sim.workloads import generate, load_workload

__all__ = ["DemoResult", "register", "run_demo"]

CHECK_SAMPLE = 50  # events cross-checked against the reference matcher


@dataclass(frozen=True, slots=True)
class DemoResult:
    events: int
    subscribers: int
    subscriptions: int
    filters: int
    deliveries: int
    matched_filters: int
    events_delivered: int
    generate_s: float
    build_s: float
    match_ms_per_event: float
    checked: int
    top_subscribers: tuple[tuple[str, int], ...]
    top_events: tuple[tuple[str, int], ...]

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["top_subscribers"] = [list(x) for x in self.top_subscribers]
        d["top_events"] = [list(x) for x in self.top_events]
        return d


def run_demo(
    workdir: Path, *, seed: int, filters: int, subscribers: int, events: int
) -> DemoResult:
    """Generate, load, index, match; every step on real files and the real matchers."""
    t0 = time.perf_counter()
    generate("vcaps", workdir, seed=seed, filters=filters, subscribers=subscribers, events=events)
    w = load_workload(workdir)
    gen_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    index = IndexedMatcher(w.filters.items())
    build_s = time.perf_counter() - t0

    by_filter: dict[str, list[str]] = {}
    for s in w.subscriptions:
        by_filter.setdefault(s.filter.id or "", []).append(s.subscriber)
    t0 = time.perf_counter()
    matches = [index.match(e) for e in w.events]
    match_s = time.perf_counter() - t0

    reference = ReferenceMatcher(w.filters.items())
    sample = w.events[:CHECK_SAMPLE]
    for e, got in zip(sample, matches, strict=False):
        if reference.match(e) != got:  # the demo refuses to report numbers it cannot trust
            raise StateError(f"indexed and reference matchers disagree on event {e.id}")

    per_sub: Counter[str] = Counter()
    per_event: Counter[str] = Counter()
    matched: set[str] = set()
    for e, fids in zip(w.events, matches, strict=True):
        subs = {s for fid in fids for s in by_filter.get(str(fid), ())}
        per_sub.update(subs)
        per_event[e.id or ""] = len(subs)
        matched.update(str(f) for f in fids)
    n = max(1, len(w.events))
    return DemoResult(
        events=len(w.events),
        subscribers=len(w.subscribers),
        subscriptions=len(w.subscriptions),
        filters=len(w.filters),
        deliveries=sum(per_event.values()),
        matched_filters=len(matched),
        events_delivered=sum(1 for v in per_event.values() if v),
        generate_s=round(gen_s, 3),
        build_s=round(build_s, 3),
        match_ms_per_event=round(1000 * match_s / n, 4),
        checked=min(CHECK_SAMPLE, len(w.events)),
        top_subscribers=tuple(sorted(per_sub.items(), key=_rank)[:5]),
        top_events=tuple(sorted(per_event.items(), key=_rank)[:3]),
    )


def _rank(item: tuple[str, int]) -> tuple[int, int, str]:
    # most first; ties in natural id order (s2 before s10), independent of set iteration order
    return (-item[1], len(item[0]), item[0])


def _tables(r: DemoResult, seed: int) -> list[Table]:
    t = Table(title=f"pubguard demo: vcaps workload (seed {seed}), counting matcher")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [
        ("events", f"{r.events:,}"),
        ("subscribers", f"{r.subscribers:,}"),
        ("subscriptions", f"{r.subscriptions:,}"),
        ("unique filters", f"{r.filters:,}"),
        ("filters matched by some event", f"{r.matched_filters:,}"),
        ("deliveries (event, subscriber)", f"{r.deliveries:,}"),
        ("events delivered to someone", f"{r.events_delivered:,}"),
        ("generate + load", f"{r.generate_s:.2f} s"),
        ("index build", f"{r.build_s:.3f} s"),
        ("match per event", f"{r.match_ms_per_event:.3f} ms"),
        ("checked against reference matcher", f"{r.checked} events, all equal"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    top = Table(title="top subscribers")
    top.add_column("subscriber")
    top.add_column("events received", justify="right")
    for s, c in r.top_subscribers:
        top.add_row(s, f"{c:,}")
    pop = Table(title="most popular events")
    pop.add_column("event")
    pop.add_column("subscribers reached", justify="right")
    for e, c in r.top_events:
        pop.add_row(e, f"{c:,}")
    return [t, top, pop]


def register(cli: click.Group) -> None:
    @cli.command("demo")
    @click.option("--seed", type=int, default=1, show_default=True, help="workload seed")
    @click.option("--filters", type=click.IntRange(1), default=2000, show_default=True)
    @click.option("--subscribers", type=click.IntRange(1), default=200, show_default=True)
    @click.option("--events", type=click.IntRange(1), default=200, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="print one JSON object")
    def demo(seed: int, filters: int, subscribers: int, events: int, as_json: bool) -> None:
        """Generate a vcaps workload, match it with the indexed matcher, print a summary."""
        with tempfile.TemporaryDirectory(prefix="pubguard-demo-") as tmp:
            r = run_demo(
                Path(tmp) / "workload",
                seed=seed,
                filters=filters,
                subscribers=subscribers,
                events=events,
            )
        if as_json:
            print_json(r.to_json())
        else:
            for table in _tables(r, seed):
                console.print(table)
