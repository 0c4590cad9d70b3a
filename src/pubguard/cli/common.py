"""Helpers shared by command modules: sub-groups, JSON output, rich tables and progress."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = [
    "StepProgress",
    "check_writable",
    "console",
    "err_console",
    "get_group",
    "print_json",
    "progress",
]

console = Console()
err_console = Console(stderr=True)


def get_group(root: click.Group, name: str, help: str) -> click.Group:
    """Return the sub-group ``name`` of ``root``, creating it on first use (e.g. ``bench``)."""
    existing = root.commands.get(name)
    if isinstance(existing, click.Group):
        return existing

    @root.group(name=name, help=help)
    def _group() -> None:
        pass

    return _group


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=None, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def progress(transient: bool = True) -> Progress:
    """A rich progress bar on stderr (so JSON on stdout stays clean); off when stderr is not a
    terminal (a log file or a pipe gets no bar and no stray blank line)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=transient,
        disable=not err_console.is_terminal,
    )


def check_writable(path: Path, option: str) -> None:
    """Refuse, before a long run, an output file (a figure) that could not be written at its
    end: its folder is created as the command would, and a scratch file is made and removed
    there. One-line :class:`~pubguard.errors.ConfigError` naming ``option`` otherwise."""
    from pubguard.errors import ConfigError

    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder, not a file", path=str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{option} {path}: cannot write there ({exc.strerror or exc})", path=str(path)
        ) from None


class StepProgress:
    """A long run's progress on stderr, one step at a time (``bench network``'s rate searches).

    On a terminal: one rich line redrawn in place (a bar over the run's ``done / total`` units,
    the current step, the time elapsed), gone when the run ends. Elsewhere (a log file, a
    pipe, a CI log): one plain line per step, ``[  12s, 3/8 searches done] text``, so the log
    shows how far the run got."""

    def __init__(self, what: str, *, unit: str = "done", live: bool | None = None) -> None:
        self.live = err_console.is_terminal if live is None else live
        self.unit = unit
        self.done: int = 0
        self.total: int | None = None
        self._t0 = time.monotonic()
        self._bar: Progress | None = None
        self._task: Any = None
        if self.live:
            self._bar = Progress(
                TextColumn("{task.description}", markup=False),
                BarColumn(bar_width=20),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console,
                transient=True,
            )
            self._task = self._bar.add_task(what, total=None)

    def __enter__(self) -> StepProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def step(self, text: str) -> None:
        """The run moved on to ``text``."""
        if self._bar is not None:
            self._bar.update(self._task, description=text)
            return
        count = f", {self.done}/{self.total} {self.unit}" if self.total else ""
        err_console.print(
            f"[{time.monotonic() - self._t0:4.0f}s{count}] {text}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )

    def units(self, done: int, total: int) -> None:
        """``done`` of ``total`` units (searches) finished."""
        self.done, self.total = done, total
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
        elif done and done == total:  # the step lines show the count before each step
            err_console.print(
                f"[{time.monotonic() - self._t0:4.0f}s, {done}/{total} {self.unit}]",
                markup=False,
                highlight=False,
            )
