"""Helpers shared by command modules: sub-groups, JSON output, rich tables and progress."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["check_writable", "console", "err_console", "get_group", "print_json", "progress"]

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
