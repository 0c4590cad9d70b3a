"""Brokers started by a program (demo, bench, tests) stop by themselves when that program is
killed, even by SIGKILL; ``pubguard cluster up`` brokers are detached and stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pubguard.net.server.main import PARENT_POLL_S

pytestmark = pytest.mark.slow

DRIVER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from pubguard.ops.cluster import LocalCluster
    from pubguard.net.config import load_cluster_config

    async def main():
        state = Path(sys.argv[1])
        c = LocalCluster(load_cluster_config(None, state_dir=state), in_process=False)
        await c.start()
        print(" ".join(str(p.pid) for p in c.procs.values()), flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def test_brokers_stop_when_their_parent_is_killed(tmp_path: Path) -> None:
    drv = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path / "state")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    pids: list[int] = []
    try:
        assert drv.stdout is not None
        line = drv.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 7 and all(_alive(p) for p in pids)
        drv.send_signal(signal.SIGKILL)
        drv.wait(10)
        deadline = time.monotonic() + 15 * PARENT_POLL_S + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "brokers outlived their parent"
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        if drv.poll() is None:
            drv.kill()
