"""``LocalCluster.status`` (and ``wait_connected``, ``wait_quiescent`` above it) asks again
when a status does not come in time (a loaded machine; a broker just restarted while its
admin link is still backing off: a security test once failed on the first 5 s status
time-out), gives up at its own deadline with a TransportError, and reports a broker whose
process exited at once."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from pubguard.errors import StateError, TransportError
from pubguard.net.config import chain_toml, load_cluster_config, parse_cluster_config
from pubguard.ops.cluster import LocalCluster
from tests.loopback import LoopThread

ASK = 1.0  # seconds one status ask waits before asking again
STALL = 2 * ASK  # the broker stopped for longer than one ask
LINKED = {
    "b0": {"parent": None, "link_state": {}, "queue": 0},
    "b1": {"parent": "b:b0", "link_state": {"b:b0": {"connected": True}}, "queue": 0},
}


class Scripted(LocalCluster):
    """Answers ``statuses`` from a script: an exception to raise or a status map."""

    def __init__(self, tmp: Path, script: list[Any]) -> None:
        super().__init__(load_cluster_config(None, state_dir=tmp))
        self.script, self.asked = script, 0

    async def statuses(self) -> dict[str, dict[str, Any]]:
        step = self.script[min(self.asked, len(self.script) - 1)]
        self.asked += 1
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[no-any-return]


def test_a_status_time_out_is_asked_again(tmp_path: Path) -> None:
    c = Scripted(tmp_path, [TimeoutError(), TransportError("reconnecting"), LINKED])
    asyncio.run(c.wait_connected(timeout=5))
    assert c.asked == 3


def test_wait_quiescent_asks_again_too(tmp_path: Path) -> None:
    c = Scripted(tmp_path, [TimeoutError(), LINKED])
    asyncio.run(c.wait_quiescent(timeout=5, settle=2))
    assert c.asked == 3  # one time-out, then two calm polls
    with pytest.raises(TransportError, match="status not answered"):
        asyncio.run(Scripted(tmp_path, [TimeoutError()]).wait_quiescent(timeout=0.2))


def test_it_still_gives_up_at_its_deadline(tmp_path: Path) -> None:
    c = Scripted(tmp_path, [TimeoutError()])
    with pytest.raises(TransportError, match="status not answered"):
        asyncio.run(c.wait_connected(timeout=0.2))
    down = {**LINKED, "b1": {"parent": "b:b0", "link_state": {"b:b0": {"connected": False}}}}
    with pytest.raises(TransportError, match=r"not linked to their parents: \['b1'\]"):
        asyncio.run(Scripted(tmp_path, [down]).wait_connected(timeout=0.2))


@pytest.mark.slow
def test_a_slow_status_is_asked_again_and_a_dead_broker_is_reported_at_once(
    aloop: LoopThread, tmp_path: Path
) -> None:
    """Over real processes: a broker that cannot answer for longer than one ask (stopped with
    SIGSTOP for 2 s, past a status time-out of 1 s here, 5 s by default, as a loaded machine
    can stall one) still gets its status read; a broker whose process exited is a StateError
    at once, not a minute of asking."""
    cfg = parse_cluster_config(tomllib.loads(chain_toml(2, ["plain"])), base=tmp_path)
    c = LocalCluster(cfg)
    aloop.run(c.start(), timeout=90)
    try:

        async def stalled() -> dict[str, Any]:
            await c.status("b1")  # the admin link is up
            pid = c.procs["b1"].pid
            os.killpg(pid, signal.SIGSTOP)
            asyncio.get_running_loop().call_later(STALL, os.killpg, pid, signal.SIGCONT)
            t0 = time.monotonic()
            st = await c.status("b1", ask=ASK)
            assert time.monotonic() - t0 > ASK  # the first ask timed out: it was asked again
            return st

        assert aloop.run(stalled(), timeout=120)["broker"] == "b1"
        c.kill("b1")
        with pytest.raises(StateError, match="broker b1 is down"):
            aloop.run(c.status("b1"), timeout=10)
    finally:
        aloop.run(c.stop(), timeout=60)
