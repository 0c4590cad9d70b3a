"""``pubguard bench broker``: the sans-IO broker core's routing cost, in process, no sockets.

What it measures: one :class:`~pubguard.broker.core.Broker` serving the plain profile with 32
client links (the subscribers of ``bench network``) and a publisher link. ``N`` subscriptions
``sym = "s<i>"`` are spread over the 32 links and every publication carries one random symbol,
so each event is delivered to exactly one subscription (the ``bench network`` workload, whose
goal is >= 20,000 events/s to 32 subscribers from one broker). Publications go in as
wire dicts, as the transport hands them over, through ``handle`` (one call per message) and
``handle_batch`` (one call per ``--batch`` messages); the time is CPU time of this thread, best
of ``--repeat`` runs, so other processes on the machine disturb it little.

Baseline, in the same process: the same broker with the reference linear matcher (every filter
checked against every event, what a broker without an index does), on ``--reference-events``
of the same workload; the ratio is the indexed core's events/s over the baseline's. The two
brokers' actions are compared on those publications (``agrees``). Setting up a broker with N
subscriptions costs O(N^2) covering checks (``ForwardSet``), which is not timed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json, progress

if TYPE_CHECKING:  # the broker core and the schemes are imported when the bench runs
    from pubguard.broker.core import Broker
    from pubguard.schemes.plain import PlainScheme

__all__ = ["register", "run_broker_bench"]

LINKS: Final = 32
DEFAULT_SUBSCRIPTIONS: Final = (32, 256, 1024)
GOAL_EPS: Final = 20_000  # goal: one broker routes >= 20,000 events/s to 32 subscribers
PAPER_NOTE: Final = (
    "goal: one broker >= 20,000 events/s to 32 subscribers (loopback, end to end); "
    "EventGuard Fig. 11 plots basic Siena's maximum throughput per tree size (550 MHz PIII); "
    "Siena fast forwarding: about 10 ms per event for 1M subscriptions (vcaps.txt §4.2)"
)


def _linear_plain() -> PlainScheme:
    """The plain profile with the reference linear matcher: the in-process baseline."""
    from pubguard.matching.reference import ReferenceMatcher
    from pubguard.schemes.base import Matcher
    from pubguard.schemes.plain import PlainScheme

    class _LinearPlain(PlainScheme):
        def new_matcher(self) -> Matcher:
            return ReferenceMatcher()  # type: ignore[return-value]

    return _LinearPlain()


def _broker(scheme: PlainScheme, n_subs: int) -> Broker:
    from pubguard.broker.core import Broker

    b = Broker("bench", [scheme])
    b.add_link("c:pub", "client", "pub")
    for j in range(LINKS):
        b.add_link(f"c:sub{j}", "client", f"sub{j}")
    for i in range(n_subs):
        wire = {
            "op": "subscribe",
            "sub_id": f"x{i}",
            "profile": "plain",
            "filter": {"constraints": [["sym", "=", f"s{i}"]]},
        }
        b.handle(wire, f"c:sub{i % LINKS}", 0.0)
    return b


def _publications(n_subs: int, count: int, payload: int, rng: random.Random, tag: str) -> list[Any]:
    body = b"\0" * payload
    return [
        {
            "op": "publish",
            "event_id": f"{tag}-{k}",
            "profile": "plain",
            "routing": {"sym": f"s{rng.randrange(n_subs)}"},
            "body": body,
        }
        for k in range(count)
    ]


def _best_cpu(run: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        c0 = time.thread_time()
        run()
        best = min(best, time.thread_time() - c0)
    return best


def _measure(
    n_subs: int, events: int, batch: int, ref_events: int, payload: int, repeat: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(f"bench-broker:{seed}:{n_subs}")
    # fresh event ids for every run: a repeated id is a duplicate, dropped unmatched
    runs = [_publications(n_subs, events, payload, rng, f"r{r}") for r in range(2 * repeat)]
    from pubguard.schemes.plain import PlainScheme

    indexed = _broker(PlainScheme(), n_subs)
    it = iter(runs)

    def one_by_one() -> None:
        handle = indexed.handle
        for i, w in enumerate(next(it)):
            handle(w, "c:pub", i * 1e-6)

    def batched() -> None:
        pubs = next(it)
        for i in range(0, len(pubs), batch):
            indexed.handle_batch(pubs[i : i + batch], "c:pub", i * 1e-6)

    t_handle = _best_cpu(one_by_one, repeat)
    t_batch = _best_cpu(batched, repeat)
    delivered = indexed.counters["delivered"]
    # the baseline, and agreement of the two on the same publications
    sample = _publications(n_subs, ref_events, payload, rng, "ref")
    linear = _broker(_linear_plain(), n_subs)
    c0 = time.thread_time()
    want = [linear.handle(w, "c:pub", 0.0) for w in sample]
    t_ref = time.thread_time() - c0
    agrees = [indexed.handle(w, "c:pub", 0.0) for w in sample] == want  # ids not seen yet
    us = 1e6 / events
    return {
        "subscriptions": n_subs,
        "events": events,
        "handle_us_per_event": round(t_handle * us, 2),
        "handle_events_per_s": round(events / t_handle) if t_handle else None,
        "batch": batch,
        "batch_us_per_event": round(t_batch * us, 2),
        "batch_events_per_s": round(events / t_batch) if t_batch else None,
        "reference_us_per_event": round(t_ref * 1e6 / ref_events, 2),
        "reference_events": ref_events,
        "ratio": round(t_ref / ref_events / (t_handle / events), 2) if t_handle else None,
        "deliveries_per_event": round(delivered / (2 * repeat * events), 3),
        "agrees": agrees,
    }


def run_broker_bench(
    subscriptions: list[int],
    *,
    events: int = 5000,
    batch: int = 512,
    reference_events: int = 300,
    payload: int = 16,
    repeat: int = 3,
    seed: int = 1,
) -> dict[str, Any]:
    """Measure every subscription count; returns the JSON report."""
    rows = []
    with progress() as bar:
        task = bar.add_task("bench broker", total=len(subscriptions))
        for n in subscriptions:
            rows.append(_measure(n, events, batch, reference_events, payload, repeat, seed))
            bar.advance(task)
    return {
        "bench": "broker",
        "profile": "plain",
        "links": LINKS,
        "payload": payload,
        "workload": 'N subscriptions sym = "s<i>" over 32 client links; one random symbol per '
        "event (fan-out 1, the bench network workload)",
        "time": "CPU time of the core only (no sockets, no framing), best of runs",
        "baseline": "the same broker with the reference linear matcher",
        "results": rows,
        "goal_events_per_s": GOAL_EPS,
        "paper_note": PAPER_NOTE,
    }


def register(cli: click.Group) -> None:
    bench = get_group(cli, "bench", "Benchmarks (rich table; --json for one JSON object).")

    @bench.command("broker")
    @click.option(
        "--subscriptions",
        "-n",
        type=click.IntRange(1, 1_000_000),
        multiple=True,
        help="Subscription counts (repeatable).  [default: 32 256 1024]",
    )
    @click.option("--events", type=click.IntRange(1), default=5000, show_default=True)
    @click.option(
        "--batch",
        type=click.IntRange(1),
        default=512,
        show_default=True,
        help="Messages per handle_batch call.",
    )
    @click.option(
        "--reference-events",
        type=click.IntRange(1),
        default=300,
        show_default=True,
        help="Publications the linear baseline routes.",
    )
    @click.option("--payload", type=click.IntRange(0, 1 << 20), default=16, show_default=True)
    @click.option("--repeat", type=click.IntRange(1), default=3, show_default=True)
    @click.option("--seed", type=int, default=1, show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
    def bench_broker(
        subscriptions: tuple[int, ...],
        events: int,
        batch: int,
        reference_events: int,
        payload: int,
        repeat: int,
        seed: int,
        as_json: bool,
    ) -> None:
        """In-process broker core throughput vs subscriptions (plain profile), against the
        reference linear matcher."""
        report = run_broker_bench(
            list(subscriptions or DEFAULT_SUBSCRIPTIONS),
            events=events,
            batch=batch,
            reference_events=reference_events,
            payload=payload,
            repeat=repeat,
            seed=seed,
        )
        if as_json:
            print_json(report)
            return
        table = Table(title="pubguard bench broker (plain core, in process, CPU time)")
        for col in (
            "subscriptions",
            "handle µs/ev",
            "handle ev/s",
            "batch µs/ev",
            "batch ev/s",
            "linear µs/ev",
            "ratio",
            "agrees",
        ):
            table.add_column(col, justify="right")
        for r in report["results"]:
            table.add_row(
                f"{r['subscriptions']:,}",
                f"{r['handle_us_per_event']:.1f}",
                f"{r['handle_events_per_s']:,}",
                f"{r['batch_us_per_event']:.1f}",
                f"{r['batch_events_per_s']:,}",
                f"{r['reference_us_per_event']:.1f}",
                f"{r['ratio']:.1f}x",
                "yes" if r["agrees"] else "NO",
            )
        console.print(table)
        console.print(f"goal: {GOAL_EPS:,} events/s end to end. {PAPER_NOTE}")
