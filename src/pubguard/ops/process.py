"""Child processes of the ops layer (brokers, the key service): how one is ended.

Each child runs in its own process group (``start_new_session=True``), so ending it ends
whatever it started too: SIGTERM to the group, then SIGKILL after :data:`STOP_TIMEOUT`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Final

__all__ = ["STOP_TIMEOUT", "terminate"]

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
