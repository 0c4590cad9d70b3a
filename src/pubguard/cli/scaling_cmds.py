"""``pubguard experiments scaling``: eventguard.txt Fig. 11/12 and psguard.txt Fig. 9/10
(throughput and latency versus the number of brokers, one processor per entity) as a
measured-cost simulation (:mod:`pubguard.sim.scaling`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import click
from rich import box
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json, progress
from pubguard.errors import ValidationError

__all__ = ["register"]

# pubguard.sim.scaling.PROFILES, spelled out so that ``--help`` need not import the simulation
# and every scheme (tests/cli/test_cli_startup.py checks that the two agree)
SCALING_PROFILES: Final = (
    "plain",
    "psguard",
    "psguard-merkle",
    "psguard-paper",
    "eventguard",
    "eventguard-nosig",
    "eventguard-merkle",
    "default",
    "default-merkle",
    "narada",
)


def _csv(text: str, what: str, conv: Callable[[str], Any]) -> tuple[Any, ...]:
    try:
        vals = tuple(conv(x.strip()) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValidationError(f"--{what} must be a comma-separated list, got {text!r}") from None
    if not vals:
        raise ValidationError(f"--{what} needs at least one value")
    return vals


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def _scaling_table(doc: dict[str, Any]) -> None:
    from pubguard.sim.scaling_report import PAPER

    t = Table(
        title="experiments scaling: max throughput and latency vs brokers "
        "(measured-cost simulation, one processor per entity)",
        box=box.SIMPLE_HEAD,
        padding=(0, 0),
        collapse_padding=True,
    )
    cols = (
        "profile",
        "brokers",
        "max/s",
        "x plain",
        "drop%",
        "p50 ms",
        "p99 ms",
        "lat+%",
        "bottleneck",
    )
    for c in cols:
        left = c in ("profile", "bottleneck")
        t.add_column(c, justify="left" if left else "right", no_wrap=True)
    for r in doc["rows"]:
        t.add_row(
            r["profile"],
            str(r["brokers"]),
            _fmt(r["max_throughput_eps"], ".0f"),
            _fmt(r.get("throughput_ratio"), ".3f"),
            _fmt(r.get("throughput_drop_pct")),
            _fmt(r["latency_p50_ms"]),
            _fmt(r["latency_p99_ms"]),
            _fmt(r.get("latency_increase_pct"), ".2f"),
            str(r["bottleneck"]),
        )
    console.print(t)
    fan = sorted({round(r["mean_fanout"], 2) for r in doc["rows"]})
    console.print(f"mean fan-out (deliveries per publication): {', '.join(map(str, fan))}")
    for prof in doc["paper"]:
        g = doc["throughput_growth"].get(prof)
        console.print(
            f"[bold]{prof}[/bold]: growth {_fmt(g, '.2f')}x; paper: "
            f"{PAPER.get(prof, {}).get('paper', '-')}"
        )
    console.print(f"[dim]{doc['method']}; {doc['deterministic']}[/dim]")


@click.command(
    "scaling",
    short_help="Throughput and latency vs brokers, one processor each (eventguard Fig 11-12, psguard Fig 9-10).",
)
@click.option(
    "--profiles",
    default=",".join(SCALING_PROFILES),
    show_default=True,
    help="Comma-separated (plain always runs).",
)
@click.option(
    "--brokers",
    default="1,3,7,15,31",
    show_default=True,
    help="Tree sizes (complete binary trees).",
)
@click.option("--subscribers", type=int, default=32, show_default=True)
@click.option("--latency-ms", type=float, default=70.0, show_default=True, help="Per hop.")
@click.option("--publications", type=int, default=120, show_default=True, help="Per run.")
@click.option(
    "--observe-every",
    type=int,
    default=12,
    show_default=True,
    help="Publications' worth of time between queue observations.",
)
@click.option("--bisect", type=int, default=4, show_default=True, help="Bisection steps.")
@click.option(
    "--repeat",
    type=int,
    default=1,
    show_default=True,
    help="Searches per (profile, size), interleaved; the median is reported.",
)
@click.option("--topics", type=int, default=16, show_default=True)
@click.option(
    "--per-subscriber",
    type=int,
    default=3,
    show_default=True,
    help="Topics each subscriber subscribes to (Zipf popularity).",
)
@click.option("--zipf", type=float, default=1.0, show_default=True)
@click.option("--payload", type=int, default=64, show_default=True, help="Bytes per event.")
@click.option(
    "--cost-scale",
    type=float,
    default=1.0,
    show_default=True,
    help="Multiply every measured service time (e.g. 20 for a slower processor).",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--quick", is_flag=True, help="Small and fast (tests): 1,3,7 brokers, short runs.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the figure (PNG), e.g. docs/img/scaling.png.",
)
def scaling(
    profiles: str,
    brokers: str,
    subscribers: int,
    latency_ms: float,
    publications: int,
    observe_every: int,
    bisect: int,
    repeat: int,
    topics: int,
    per_subscriber: int,
    zipf: float,
    payload: int,
    cost_scale: float,
    seed: int,
    quick: bool,
    as_json: bool,
    plot: Path | None,
) -> None:
    """eventguard.txt Fig. 11/12, psguard.txt Fig. 9/10: throughput and latency vs brokers.

    A MEASURED-COST SIMULATION, not wall-clock on separate machines: every broker, the
    publisher and each subscriber is its own processor in virtual time, and each message's
    service time is the CPU time the real broker core / scheme code took on it (wire codec
    on). 70 ms per hop; saturation = a queue growing for five consecutive observations;
    double then bisect the offered rate; latency at 80% of the maximum. Routing is
    deterministic given --seed, the measured costs are not.
    """
    import os

    from pubguard.sim.scaling import PROFILES, MeasuredCost, ScalingParams, Workload, run_scaling
    from pubguard.sim.scaling_report import plot_scaling, scaling_doc

    if plot is not None:  # before the simulation, not after
        from pubguard.cli.common import check_writable

        check_writable(plot, "--plot")
    profs = _csv(profiles, "profiles", str)
    bad = [x for x in profs if x not in PROFILES]
    if bad:
        raise ValidationError(f"unknown profile {bad[0]!r} (known: {', '.join(PROFILES)})")
    profs = ("plain", *[x for x in dict.fromkeys(profs) if x != "plain"])
    sizes = _csv(brokers, "brokers", int)
    if quick:
        sizes = tuple(b for b in sizes if b <= 7) or (1, 3)
        publications, observe_every, bisect = min(publications, 60), min(observe_every, 10), 2
    params = ScalingParams(
        brokers=sizes,
        subscribers=subscribers,
        latency=latency_ms / 1000.0,
        publications=publications,
        observe_every=observe_every,
        bisect=bisect,
        repeat=repeat,
        workload=Workload(topics=topics, per_subscriber=per_subscriber, zipf=zipf, payload=payload),
        cost=MeasuredCost(cost_scale),
        seed=seed,
    )
    t0 = time.perf_counter()
    with progress() as bar:
        task = bar.add_task("scaling", total=len(profs) * len(sizes) * repeat)

        def step(label: str) -> None:
            bar.update(task, description=f"scaling: {label}")
            bar.advance(task) if step.started else None  # type: ignore[attr-defined]
            step.started = True  # type: ignore[attr-defined]

        step.started = False  # type: ignore[attr-defined]
        series = run_scaling(params, profs, on_step=step)
    doc = scaling_doc(
        series, params, seconds=time.perf_counter() - t0, quick=quick, load=os.getloadavg()[:2]
    )
    if plot is not None:
        doc["png"] = str(plot_scaling(doc, plot))
    if as_json:
        print_json(doc)
        return
    _scaling_table(doc)
    if plot is not None:
        console.print(f"figure: {doc['png']}")


def register(cli: click.Group) -> None:
    get_group(cli, "experiments", "Reproduce the papers' experiments.").add_command(scaling)
