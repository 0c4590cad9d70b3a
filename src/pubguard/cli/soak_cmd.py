"""``pubguard cluster soak``: key-epoch changes and broker crashes under a steady stream, per
profile (``pubguard.ops.soak``).

Example::

    pubguard cluster soak --profiles psguard,default,eventguard --duration 40 \\
        --kill b1@8 --kill b2@18 --kill b0@28
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from pubguard.cli.common import console, err_console, get_group, print_json, progress

if TYPE_CHECKING:
    from pubguard.ops.soak import SoakResult

__all__ = ["register", "render"]


def register(cli: click.Group) -> None:
    cluster = get_group(cli, "cluster", "Start, stop and inspect a local broker network.")

    @cluster.command("soak")
    @click.option(
        "--profiles",
        default="plain,psguard,default,eventguard",
        show_default=True,
        help="Comma-separated: plain, psguard, default, eventguard, narada.",
    )
    @click.option(
        "--brokers",
        type=click.IntRange(2, 8),
        default=3,
        show_default=True,
        help="Brokers in the chain b0 - b1 - ...; publishers on b0, a durable "
        "subscriber per profile on each other broker.",
    )
    @click.option(
        "--epoch",
        type=click.FloatRange(1.0, 3600.0),
        default=3.0,
        show_default=True,
        help="Key epoch, seconds.",
    )
    @click.option(
        "--duration",
        type=click.FloatRange(1.0, 3600.0),
        default=40.0,
        show_default=True,
        help="Seconds of publishing.",
    )
    @click.option(
        "--kill",
        "kills",
        multiple=True,
        metavar="BROKER@SECONDS",
        help="kill -9 a broker then (repeatable); default b1@8, b2@18, b0@28 "
        "(those within the chain and the duration).",
    )
    @click.option("--no-kill", is_flag=True, help="No outages: epoch changes only.")
    @click.option(
        "--outage",
        type=click.FloatRange(0.1, 60.0),
        default=1.5,
        show_default=True,
        help="Seconds a killed broker stays down.",
    )
    @click.option(
        "--max-delay",
        type=click.FloatRange(1.0, 600.0),
        default=10.0,
        show_default=True,
        help="The brokers' timestamp window, seconds.",
    )
    @click.option(
        "--rate",
        type=click.FloatRange(1.0, 500.0),
        default=30.0,
        show_default=True,
        help="Events per second per profile.",
    )
    @click.option(
        "--state",
        type=click.Path(path_type=Path),
        default=None,
        help="Keep the cluster's state (logs, SQLite) here (default: a temporary folder).",
    )
    @click.option(
        "--no-catch-up",
        is_flag=True,
        help="Every broker lists its child and subscribers in no_catch_up (routing "
        "by matching alone): what catch-up routing saves.",
    )
    @click.option("--json", "as_json", is_flag=True)
    def soak_cmd(
        profiles: str,
        brokers: int,
        epoch: float,
        duration: float,
        kills: tuple[str, ...],
        no_kill: bool,
        outage: float,
        max_delay: float,
        rate: float,
        state: Path | None,
        no_catch_up: bool,
        as_json: bool,
    ) -> None:
        """Publish across key-epoch changes while brokers are killed and restarted: what each
        profile's subscribers lost, and when."""
        import asyncio

        from pubguard.ops.soak import parse_kill, soak

        names = tuple(p.strip() for p in profiles.split(",") if p.strip())
        if no_kill:
            plan: list[tuple[str, float]] = []
        elif kills:
            plan = [parse_kill(k) for k in kills]
        else:
            plan = [
                (b, t)
                for b, t in (("b1", 8.0), ("b2", 18.0), ("b0", 28.0))
                if int(b[1:]) < brokers and t < duration
            ]
        with progress() as bar:
            task = bar.add_task(f"soak: {', '.join(names)}", total=duration)
            r = asyncio.run(
                soak(
                    names,
                    brokers=brokers,
                    epoch=epoch,
                    duration=duration,
                    kills=plan,
                    outage=outage,
                    max_delay=max_delay,
                    rate=rate,
                    state_dir=state,
                    catch_up=not no_catch_up,
                    tick=lambda s: bar.update(task, completed=s),
                )
            )
        if as_json:
            print_json(r.to_json())
            return
        render(r, console, err_console)


def render(r: SoakResult, out: Console, err: Console) -> None:
    """The soak report: a row per subscriber, then each lost range on a line of its own
    (inside the table a narrow terminal wrapped them into a column a word wide)."""
    t = Table(
        title=f"soak: {r.brokers}-broker chain, {r.duration:g} s, epoch {r.epoch:g} s, "
        f"max_delay {r.max_delay:g} s" + ("" if r.catch_up else ", no catch-up routing")
    )
    for col in (
        "profile",
        "subscriber at",
        "sent",
        "received",
        "lost",
        "dup",
        "order",
        "lost ranges",
    ):
        t.add_column(
            col, justify="left" if col in ("profile", "subscriber at", "order") else "right"
        )
    lines: list[str] = []
    for s in r.subscribers:
        lines += [
            f"  {s.profile} at {s.broker}: {s.profile}-{a}..{b}, sent {t0:.2f}-"
            f"{t1:.2f} s: {r.context(t0)}"
            for a, b, t0, t1 in s.lost[:6]
        ]
        if len(s.lost) > 6:
            lines.append(f"  {s.profile} at {s.broker}: ... {len(s.lost) - 6} more")
        lost = "[green]0[/green]" if not s.lost_count else f"[red]{s.lost_count}[/red]"
        t.add_row(
            s.profile,
            s.broker,
            str(s.sent),
            str(s.received),
            lost,
            str(s.duplicates),
            "yes" if s.in_order else "[red]no[/red]",
            str(len(s.lost)),
        )
    out.print(t)
    if lines:
        out.print("lost ranges (event ids, when they were sent, what they follow):")
        for line in lines:
            out.print(line, highlight=False, soft_wrap=True)  # whole lines in a log
    outs = "; ".join(f"{o.broker} down {o.at:.1f}-{o.back:.1f} s" for o in r.outages)
    out.print(
        f"epoch changes at {', '.join(f'{c:.1f}' for c in r.epoch_changes)} s; "
        f"outages: {outs or 'none'}"
    )
    out.print(
        "lossless: "
        + ", ".join(
            f"{p} {'[green]yes[/green]' if r.lossless(p) else '[red]no[/red]'}" for p in r.profiles
        )
    )
    if any(not r.lossless(p) for p in r.profiles if p in ("psguard", "default")):
        err.print(
            "[dim]psguard and default catch a down link up across an epoch change "
            "for at most max_delay after it went down (docs/network.md, Key "
            "epochs)[/dim]"
        )
