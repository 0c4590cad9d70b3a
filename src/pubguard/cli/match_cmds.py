"""``pubguard match`` (match a workload folder) and ``pubguard bench match`` (the matcher bench).

``bench match`` anchors (vcaps.txt §4.2): Siena fast forwarding matches one notification
against a million subscriptions in about 10 ms (Carzaniga & Wolf, SIGCOMM 2003, C++);
aws/event-ruler reports 120K-220K events/s (Java).
"""

from __future__ import annotations

import gc
import random
import resource
import statistics
import sys
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json, progress
from pubguard.errors import InputError, ValidationError

if TYPE_CHECKING:  # the matchers and the model are imported when a command runs
    from pubguard.model import Event, Filter

__all__ = ["register"]

PAPER_SIENA_MS_PER_EVENT: Final = 10.0  # vcaps.txt §4.2, 1M subscriptions
EVENT_RULER_EVENTS_PER_S: Final = "120000-220000"
REFERENCE_SAMPLE: Final = 10_000  # filters the reference matcher scans in the bench
REFERENCE_EVENTS: Final = 200
MATCH_BATCH: Final = 1024


# -- pubguard match ----------------------------------------------------------------------------
def load_subscriptions(path: Path) -> tuple[dict[str, Filter], dict[str, set[str]]]:
    """Filters by id and their subscribers; a filter id reused with other constraints is an
    error naming the line. Filters without an id are named by their text form."""
    from pubguard.model import format_filter, read_subscriptions

    filters: dict[str, Filter] = {}
    subscribers: dict[str, set[str]] = {}
    for n, sub in enumerate(read_subscriptions(path), 1):
        f = sub.filter
        fid = f.id if f.id is not None else format_filter(f)
        old = filters.get(fid)
        if old is None:
            filters[fid] = f
        elif old != f:
            raise InputError(
                f"filter id {fid!r} reused with different constraints", path=str(path), line=n
            )
        subscribers.setdefault(fid, set()).add(sub.subscriber)
    return filters, subscribers


def _match_workload(directory: Path, summary: bool) -> None:
    from pubguard.matching import IndexedMatcher  # numpy: imported when a command runs
    from pubguard.model import read_events

    if not directory.is_dir():
        why = "it is a file" if directory.exists() else "no such directory"
        raise InputError(f"not a workload folder ({why})", path=str(directory))
    t0 = time.perf_counter()
    filters, subscribers = load_subscriptions(directory / "subscriptions.jsonl")
    events = list(read_events(directory / "events.jsonl"))
    matcher = IndexedMatcher()
    matcher.add_many(filters.items())
    matcher.flush()
    t_load = time.perf_counter() - t0
    n_filters = n_subs = 0
    t1 = time.perf_counter()
    with progress() as bar:
        task = bar.add_task("matching", total=len(events))
        for start in range(0, len(events), MATCH_BATCH):
            chunk = events[start : start + MATCH_BATCH]
            for i, (ev, keys) in enumerate(zip(chunk, matcher.match_batch(chunk), strict=True)):
                fids = sorted(str(k) for k in keys)
                subs = sorted({s for k in fids for s in subscribers[k]})
                n_filters += len(fids)
                n_subs += len(subs)
                if not summary:
                    eid = ev.id if ev.id is not None else str(start + i + 1)
                    print_json({"event": eid, "filters": fids, "subscribers": subs})
            bar.advance(task, len(chunk))
    t_match = time.perf_counter() - t1
    if summary:
        all_subs = set().union(*subscribers.values()) if subscribers else set()
        table = Table(title=f"pubguard match {directory}")
        table.add_column("quantity")
        table.add_column("value", justify="right")
        rows = [
            ("events", f"{len(events):,}"),
            ("unique filters", f"{len(filters):,}"),
            ("subscribers", f"{len(all_subs):,}"),
            ("matched filters / event", f"{n_filters / max(1, len(events)):.1f}"),
            ("reached subscribers / event", f"{n_subs / max(1, len(events)):.1f}"),
            ("load + index (s)", f"{t_load:.3f}"),
            ("match (ms / event)", f"{1e3 * t_match / max(1, len(events)):.3f}"),
        ]
        for r in rows:
            table.add_row(*r)
        console.print(table)


# -- pubguard bench match ----------------------------------------------------------------------
def _workload(n: int, m: int, seed: int) -> tuple[list[Filter], list[Event]]:
    from pubguard.sim.workloads import vcaps_events, vcaps_filters

    filters = vcaps_filters(n, random.Random(f"bench-match:{seed}:filters"))
    events = vcaps_events(m, random.Random(f"bench-match:{seed}:events"))
    return filters, events


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _bench(n: int, m: int, seed: int, batch: int | None, sample: int) -> dict[str, Any]:
    from pubguard.matching import IndexedMatcher, ReferenceMatcher

    t0 = time.perf_counter()
    filters, events = _workload(n, m, seed)
    gen_s = time.perf_counter() - t0
    matcher = IndexedMatcher()
    step = max(1, n // 100)
    with progress() as bar:
        task = bar.add_task(f"indexing {n:,} filters", total=n)
        t0, c0 = time.perf_counter(), time.thread_time()
        for i in range(0, n, step):
            matcher.add_many((f.id, f) for f in filters[i : i + step])
            bar.advance(task, min(step, n - i))
        matcher.flush()
        build_s, build_cpu_s = time.perf_counter() - t0, time.thread_time() - c0
    # The index is long-lived: move it (and the workload) out of the cyclic GC's generations,
    # so collections triggered by the result sets do not rescan millions of filter objects.
    gc.collect()
    gc.freeze()
    wall: list[float] = []
    cpu: list[float] = []
    results: list[set[Hashable]] = []
    total = 0
    for ev in events:
        c0, w0 = time.thread_time(), time.perf_counter()
        r = matcher.match(ev)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.thread_time() - c0)
        results.append(r)
        total += len(r)
    # the reference matcher, same process, same events, on a sample of the filters
    rng = random.Random(f"bench-match:{seed}:sample")
    chosen = filters if n <= sample else rng.sample(filters, sample)
    ref = ReferenceMatcher((f.id, f) for f in chosen)
    chosen_ids = {f.id for f in chosen}
    ref_ms: list[float] = []
    agrees = True
    for ev, ours in zip(events[:REFERENCE_EVENTS], results, strict=False):
        w0 = time.perf_counter()
        want = ref.match(ev)
        ref_ms.append(time.perf_counter() - w0)
        agrees = agrees and want == {k for k in ours if k in chosen_ids}
    scale = n / len(chosen) if chosen else 1.0
    p50 = 1e3 * statistics.median(wall) if wall else 0.0
    ref_p50 = 1e3 * statistics.median(ref_ms) * scale if ref_ms else 0.0
    out: dict[str, Any] = {
        "filters": n,
        "events": m,
        "seed": seed,
        "workload": "vcaps (pubguard.sim.workloads.vcaps_filters / vcaps_events)",
        "generate_s": round(gen_s, 3),
        "build_s": round(build_s, 3),
        "build_cpu_s": round(build_cpu_s, 3),
        "ms_per_event_p50": round(p50, 4),
        "ms_per_event_p95": round(1e3 * _pct(wall, 0.95), 4) if wall else 0.0,
        "cpu_ms_per_event_p50": round(1e3 * statistics.median(cpu), 4) if cpu else 0.0,
        "matches_per_event": round(total / max(1, m), 1),
        "reference_ms_per_event_p50": round(ref_p50, 4),
        "reference_sampled_filters": len(chosen),
        "reference_events": len(ref_ms),
        "reference_scaled_to_all_filters": n > len(chosen),
        "reference_agrees": agrees,
        "speedup": round(ref_p50 / p50, 1) if p50 else None,
    }
    if batch:
        c0, w0 = time.thread_time(), time.perf_counter()
        batched: list[set[Hashable]] = []
        for i in range(0, m, batch):
            batched.extend(matcher.match_batch(events[i : i + batch]))
        dt, dc = time.perf_counter() - w0, time.thread_time() - c0
        out["batch"] = batch
        out["batch_events_per_s"] = round(m / dt) if dt else None
        out["batch_cpu_events_per_s"] = round(m / dc) if dc else None
        out["batch_agrees"] = batched == results
    gc.unfreeze()
    out["gc_frozen_after_build"] = True
    out["rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    out["paper_siena_ms_per_event"] = PAPER_SIENA_MS_PER_EVENT
    out["paper_siena_filters"] = 1_000_000
    out["event_ruler_events_per_s"] = EVENT_RULER_EVENTS_PER_S
    return out


def _bench_table(r: dict[str, Any]) -> Table:
    t = Table(title=f"pubguard bench match: {r['filters']:,} filters, {r['events']:,} events")
    t.add_column("measure")
    t.add_column("pubguard", justify="right")
    t.add_column("baseline / paper", justify="right")
    ref_note = " (scaled from a sample)" if r["reference_scaled_to_all_filters"] else ""
    t.add_row(
        "ms / event p50",
        f"{r['ms_per_event_p50']:.3f}",
        f"reference {r['reference_ms_per_event_p50']:.2f}{ref_note}; "
        f"Siena {r['paper_siena_ms_per_event']} @1M",
    )
    t.add_row("ms / event p95", f"{r['ms_per_event_p95']:.3f}", "")
    t.add_row("speedup vs reference", f"{r['speedup']}x", "")
    t.add_row("build (s)", f"{r['build_s']:.2f}", "")
    if "batch_events_per_s" in r:
        t.add_row(
            f"batch events/s (K={r['batch']})",
            f"{r['batch_events_per_s']:,}",
            f"event-ruler {r['event_ruler_events_per_s']}",
        )
    t.add_row("matches / event", f"{r['matches_per_event']}", "")
    t.add_row("peak RSS (MiB)", f"{r['rss_mib']}", "")
    return t


def register(cli: click.Group) -> None:
    @cli.command("match")
    @click.option(
        "--workload",
        "directory",
        required=True,
        type=click.Path(path_type=Path),
        help="Folder with subscriptions.jsonl and events.jsonl.",
    )
    @click.option("--json", "as_json", is_flag=True, help="JSON lines (the default output).")
    @click.option("--summary", is_flag=True, help="A summary table instead of JSON lines.")
    def match_cmd(directory: Path, as_json: bool, summary: bool) -> None:
        """Match every event of a workload against its subscriptions (indexed matcher).

        Writes one JSON line per event: {"event": id, "filters": [...], "subscribers": [...]}.
        """
        if as_json and summary:
            raise ValidationError("--json and --summary exclude each other")
        _match_workload(directory, summary)

    bench = get_group(cli, "bench", "Benchmarks (rich table; --json for one JSON object).")

    @bench.command("match")
    @click.option("--filters", "n", type=click.IntRange(min=1), default=100_000, show_default=True)
    @click.option("--events", "m", type=click.IntRange(min=1), default=1_000, show_default=True)
    @click.option("--seed", type=int, default=1, show_default=True)
    @click.option(
        "--batch", type=click.IntRange(min=1), default=None, help="Also time match_batch(K)."
    )
    @click.option(
        "--reference-sample",
        type=click.IntRange(min=1),
        default=REFERENCE_SAMPLE,
        show_default=True,
        help="Filters the reference matcher scans (its time is scaled up to all filters).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    def bench_match(
        n: int, m: int, seed: int, batch: int | None, reference_sample: int, as_json: bool
    ) -> None:
        """Index N vcaps-style filters and time matching M events against them."""
        result = _bench(n, m, seed, batch, reference_sample)
        if as_json:
            print_json(result)
        else:
            console.print(_bench_table(result))
        sys.stdout.flush()
