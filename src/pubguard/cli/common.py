"""Helpers shared by command modules: sub-groups, JSON output, rich tables and progress."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["console", "err_console", "get_group", "print_json", "progress"]

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
    """A rich progress bar on stderr (so JSON on stdout stays clean)."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=transient,
    )
