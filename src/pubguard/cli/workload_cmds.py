"""``pubguard workload generate``: seeded workload folders in the papers' shapes.

Example::

    pubguard workload generate --shape psguard --out /tmp/w --seed 1 --subscribers 64

Options that a shape does not use (``--filters`` for ``eventguard``, say) are refused with a
one-line error, as is a non-empty output folder without ``--force``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import click
from rich.table import Table

from pubguard.cli.common import console, get_group, print_json, progress
from pubguard.errors import ConfigError

__all__ = ["register", "workload_generate"]

# the keys of pubguard.sim.workloads.SHAPES, spelled out so that ``--help`` need not import the
# workload generators and numpy (tests/cli/test_cli_startup.py checks that the two agree)
SHAPE_NAMES: Final = ("vcaps", "eventguard", "psguard")

# (option name, parameter key, type, help)
_SIZE_OPTIONS: tuple[tuple[str, str, type, str], ...] = (
    ("--filters", "filters", int, "unique filters (vcaps)"),
    ("--subscribers", "subscribers", int, "number of subscribers"),
    ("--publishers", "publishers", int, "number of publishers (eventguard)"),
    ("--events", "events", int, "number of events"),
    ("--topics", "topics", int, "number of topics (eventguard)"),
    ("--topics-per-kind", "topics_per_kind", int, "topics of each kind (psguard)"),
    ("--topics-per-publisher", "topics_per_publisher", int, "topics per publisher (eventguard)"),
    ("--topics-per-subscriber", "topics_per_subscriber", int, "topics per subscriber"),
    (
        "--max-filters-per-subscriber",
        "max_filters_per_subscriber",
        int,
        "each subscriber takes 1..this many filters (vcaps)",
    ),
    ("--zipf", "zipf_s", float, "Zipf exponent of topic popularity"),
    ("--payload-size", "payload_size", int, "payload bytes per event"),
)
_LARGE = 200_000  # rough count of records above which a progress bar is worth showing


def _defaults_help() -> str:
    from pubguard.sim.workloads import SHAPES

    lines = []
    for shape, params in SHAPES.items():
        vals = ", ".join(f"{k}={v}" for k, v in params.items())
        lines.append(f"{shape}: {vals}")
    return "\b\nDefaults per shape:\n" + "\n".join(lines)


def _size_estimate(shape: str, params: dict[str, Any]) -> int:
    from pubguard.sim.workloads import SHAPES

    p = {**SHAPES[shape], **params}
    if shape == "vcaps":
        subs = p["subscribers"] * min(p["max_filters_per_subscriber"], p["filters"]) // 2
        return int(p["filters"] + subs + p["events"])
    return int(p["subscribers"] * p["topics_per_subscriber"] + p["events"])


def _summary_table(meta: dict[str, Any], out: Path) -> Table:
    t = Table(title=f"workload {meta['shape']} (seed {meta['seed']}) in {out}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for k, v in meta["counts"].items():
        t.add_row(k, f"{v:,}")
    for k, v in meta["params"].items():
        t.add_row(f"param {k}", str(v))
    return t


def workload_generate(
    shape: str, out: Path, seed: int, force: bool, as_json: bool, **sizes: Any
) -> None:
    from pubguard.sim.workloads import SHAPES, generate

    params = {k: v for k, v in sizes.items() if v is not None}
    for opt, key, _, _ in _SIZE_OPTIONS:
        if key in params and key not in SHAPES[shape]:
            raise ConfigError(f"{opt} does not apply to --shape {shape}", key=key)
    if _size_estimate(shape, params) >= _LARGE:
        with progress() as bar:
            tasks: dict[str, Any] = {}

            def report(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = bar.add_task(stage, total=total)
                bar.update(tasks[stage], completed=done, total=total)

            meta = generate(shape, out, seed=seed, force=force, progress=report, **params)
    else:
        meta = generate(shape, out, seed=seed, force=force, **params)
    if as_json:
        print_json({"out": str(out), **{k: meta[k] for k in ("shape", "seed", "params", "counts")}})
    else:
        console.print(_summary_table(meta, out))


class _GenerateCommand(click.Command):
    """``workload generate``, whose full help ends with each shape's defaults: that part is
    built on first use (``generate --help``), so listing the commands imports no generator."""

    _help: str | None
    _help_done: bool = False

    @property  # type: ignore[override]
    def help(self) -> str | None:
        if self._help is None:
            return None
        if not self._help_done:
            self._help += "\n\n" + _defaults_help()
            self._help_done = True
        return self._help

    @help.setter
    def help(self, text: str | None) -> None:
        self._help, self._help_done = text, False


def register(cli: click.Group) -> None:
    group = get_group(cli, "workload", "Generate and inspect workloads.")

    def _generate(**kwargs: Any) -> None:
        workload_generate(**kwargs)

    cmd = _generate
    for opt, key, typ, text in reversed(_SIZE_OPTIONS):
        cmd = click.option(opt, key, type=typ, default=None, help=text)(cmd)
    cmd = click.option("--json", "as_json", is_flag=True, help="print one JSON object")(cmd)
    cmd = click.option("--force", is_flag=True, help="overwrite files in a non-empty --out")(cmd)
    cmd = click.option("--seed", type=int, default=1, show_default=True, help="random seed")(cmd)
    cmd = click.option(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        required=True,
        help="output folder (created; must be empty unless --force)",
    )(cmd)
    cmd = click.option(
        "--shape", type=click.Choice(list(SHAPE_NAMES)), required=True, help="paper shape"
    )(cmd)
    group.command(
        "generate",
        cls=_GenerateCommand,
        help="Generate a seeded workload folder (subscriptions.jsonl, events.jsonl, "
        "workload.json) in the shape a paper measured.",
        # the command list shows this, so listing never builds the full help above
        short_help="Generate a seeded workload folder in the shape a paper measured.",
    )(cmd)
    _register_info(group)


def _register_info(group: click.Group) -> None:
    @group.command("info")
    @click.option(
        "--workload",
        "directory",
        type=click.Path(path_type=Path),
        required=True,
        help="workload folder",
    )
    @click.option("--json", "as_json", is_flag=True, help="print one JSON object")
    def _info(directory: Path, as_json: bool) -> None:
        """Load a workload folder strictly and print its counts."""
        from pubguard.sim.workloads import load_workload

        w = load_workload(directory)
        counts = {
            "types": len(w.types),
            "subscribers": len(w.subscribers),
            "subscriptions": len(w.subscriptions),
            "filters": len(w.filters),
            "events": len(w.events),
        }
        meta = {"shape": w.shape, "seed": w.seed, "params": dict(w.params), "counts": counts}
        if as_json:
            print_json({"workload": str(directory), **meta})
        else:
            console.print(_summary_table(meta, directory))
