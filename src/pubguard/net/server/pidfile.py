"""A broker's ``pid`` file: which process serves a state folder, written by that process.

A broker writes ``<state_dir>/pid`` once it listens (so a second broker of the same folder,
which fails to bind the sticky port, never overwrites it) and removes it when it stops
cleanly; after ``kill -9`` the file stays behind. The file records the process's command
line beside its pid, so whoever reads it (``pubguard cluster down`` / ``status``) can tell
the broker from an unrelated process that was later given the same pid::

    {"pid": 4242, "cmdline": ["/usr/bin/python3", "-m", "pubguard.net.server.main", ...]}

However the broker was started (by ``pubguard cluster up``, or by hand with ``pubguard
broker --config <state>/bX/broker.toml``), the file is the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "PID_FILE",
    "PidRecord",
    "command_line",
    "live_pid",
    "read_pidfile",
    "remove_pidfile",
    "write_pidfile",
]

PID_FILE: Final = "pid"


@dataclass(frozen=True, slots=True)
class PidRecord:
    """What a broker wrote about itself: its pid and its command line."""

    pid: int
    cmdline: tuple[str, ...]


def command_line(pid: int) -> tuple[str, ...] | None:
    """``pid``'s command line, or None when there is no such process (or it is a zombie)."""
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return tuple(a.decode(errors="replace") for a in raw.split(b"\0")[:-1]) or None
    if Path("/proc/self").exists():  # a Linux /proc without this pid: it is gone
        return None
    try:  # elsewhere (macOS): one string, split on spaces (compared the same way)
        out = subprocess.run(
            ["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return None
    return tuple(out.split()) or None


def _own_cmdline() -> tuple[str, ...]:
    return command_line(os.getpid()) or tuple(sys.orig_argv)


def write_pidfile(state_dir: Path) -> PidRecord:
    """Record this process as the broker of ``state_dir`` (atomically)."""
    rec = PidRecord(os.getpid(), _own_cmdline())
    tmp = state_dir / f"{PID_FILE}.tmp"
    tmp.write_text(json.dumps({"pid": rec.pid, "cmdline": list(rec.cmdline)}))
    os.replace(tmp, state_dir / PID_FILE)
    return rec


def read_pidfile(state_dir: Path) -> PidRecord | None:
    """The record in ``state_dir``, or None (no file, or not one a broker wrote)."""
    try:
        data = json.loads((state_dir / PID_FILE).read_text())
        return PidRecord(int(data["pid"]), tuple(str(a) for a in data["cmdline"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_pidfile(state_dir: Path) -> None:
    """Remove ``state_dir``'s pid file if it is this process's (a stopping broker)."""
    rec = read_pidfile(state_dir)
    if rec is not None and rec.pid == os.getpid():
        with contextlib.suppress(OSError):
            (state_dir / PID_FILE).unlink()


def live_pid(state_dir: Path) -> int | None:
    """The pid of the broker serving ``state_dir``, if it runs: the pid file's process, still
    alive and with the command line it recorded (a recycled pid has another one)."""
    rec = read_pidfile(state_dir)
    if rec is None:
        return None
    now = command_line(rec.pid)
    if now is None:
        return None
    same = now == rec.cmdline or " ".join(now) == " ".join(rec.cmdline)
    return rec.pid if same else None
