"""``pubguard bench tokens``: randomized-token matching (psguard.txt §4.1) on the Python and
native backends side by side (:mod:`pubguard.native`, :mod:`pubguard.ops.bench.backends`).

Example::

    pubguard bench tokens --tokens 128 --batch 256 --json
"""

from __future__ import annotations

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json

__all__ = ["register"]


def register(cli: click.Group) -> None:
    get_group(cli, "bench", "Benchmarks (paper figures beside ours).").add_command(bench_tokens)


@click.command(
    "tokens",
    help="psguard.txt §4.1 <r, F_T(r)>: one micro-batch of events against a broker's distinct "
    "tokens, Python and native backends side by side.",
)
@click.option("--tokens", type=click.IntRange(1, 100_000), default=128, show_default=True)
@click.option("--batch", type=click.IntRange(1, 100_000), default=256, show_default=True)
@click.option("--tags", type=click.IntRange(1, 64), default=8, show_default=True, help="per event")
@click.option(
    "--matching",
    type=click.IntRange(0, 64),
    default=2,
    show_default=True,
    help="tags per event that the broker's tokens match",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--quick", is_flag=True, help="Few iterations (smoke test; noisy numbers).")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--runs",
    type=click.IntRange(1, 50),
    default=5,
    show_default=True,
    help="Runs (median and range reported; 1 with --quick).",
)
def bench_tokens(
    tokens: int,
    batch: int,
    tags: int,
    matching: int,
    as_json: bool,
    quick: bool,
    seed: int,
    runs: int,
) -> None:
    from pubguard.errors import InputError
    from pubguard.ops.bench.backends import token_backends

    if matching > min(tags, tokens):
        raise InputError(f"--matching {matching} exceeds --tags {tags} or --tokens {tokens}")
    r = token_backends(
        tokens=tokens, batch=batch, tags=tags, matching=matching, quick=quick, seed=seed, runs=runs
    )
    if as_json:
        print_json(r)
        return
    t = Table(title=f"{tokens} tokens x batch {batch} ({tags} tags/event): us per event")
    for col in ("python", "native", "speedup", "native goal", "paper"):
        t.add_column(col, justify="right")
    nat = r["native_us_per_event"]

    def med(x: float, rng: list[float]) -> str:
        return f"{x:.3f}" if len(set(rng)) == 1 else f"{x:.3f} ({rng[0]:.3g}-{rng[1]:.3g})"

    t.add_row(
        med(r["python_us_per_event"], r["python_range_us_per_event"]),
        "-" if nat is None else med(nat, r["native_range_us_per_event"]),
        "-" if r["speedup"] is None else f"{r['speedup']:.1f}x",
        f"<= {r['goal_us_per_event']} ({'met' if r['goal_met'] else 'missed'})",
        "-",
    )
    console.print(t)
    console.print(f"hits {r['hits']}, backends agree: {r['agree']}; active: {r['backend_active']}")
    load = ", ".join(f"{x:.2f}" for x in r["load_average"])
    console.print(f"median of {r['runs']} run(s) (range in brackets); load average: {load}")
    console.print(f"paper: {r['paper']}", soft_wrap=True)
