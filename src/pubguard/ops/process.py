"""Child processes of the ops layer (brokers, the key service): how one is started, found and
ended.

Each child the cluster starts runs in its own process group (``start_new_session=True``), so
ending it ends whatever it started too: SIGTERM to the group, then SIGKILL after
:data:`STOP_TIMEOUT`. A broker started by hand (``pubguard broker --config ...``) may share
its shell's process group; :func:`stop_pids` then signals the process alone. Brokers are found
from the ``pid`` files they write themselves (:mod:`pubguard.net.server.pidfile`), never from
a pid alone: a pid that was recycled is not the broker and is left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

__all__ = ["STOP_TIMEOUT", "alive", "spawn_broker", "stop_pids", "terminate"]

STOP_TIMEOUT: Final = 5.0  # seconds a child gets to exit after SIGTERM


def terminate(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """End ``proc``'s process group (SIGTERM, then SIGKILL after ``timeout``) and reap it."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def spawn_broker(
    config: Path, log: Path, *, parent_pid: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``python -m pubguard.net.server.main --config CONFIG`` in its own session, its
    output appended to ``log`` (``parent_pid``: it stops when that process goes away)."""
    tie = [] if parent_pid is None else ["--parent-pid", str(parent_pid)]
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pubguard.net.server.main", "--config", str(config), *tie],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child of ours counts as gone, and is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    return True


def _signal(pid: int, sig: int) -> None:
    """``sig`` to ``pid``'s group when it leads one (what the cluster starts), else to it."""
    with contextlib.suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def stop_pids(pids: Iterable[int], timeout: float = STOP_TIMEOUT) -> list[int]:
    """SIGTERM each of ``pids``, SIGKILL those still there after ``timeout``; returns the ones
    that could not be stopped (not ours to signal)."""
    todo = [p for p in pids if p != os.getpid()]
    refused = []
    for pid in todo:
        try:
            _signal(pid, signal.SIGTERM)
        except PermissionError:
            refused.append(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in todo if p not in refused):
        time.sleep(0.05)
    for pid in todo:
        if pid not in refused and alive(pid):
            with contextlib.suppress(PermissionError):
                _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in todo if p not in refused):
        time.sleep(0.05)
    return [p for p in todo if alive(p)]
