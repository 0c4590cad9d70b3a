"""``LocalCluster.wait_connected`` (and ``wait_quiescent``) asks again when a status does not come in time (a broker
just restarted while its admin link is still backing off: a security test once failed on
the first 5 s status time-out, well inside the 30 s it waits), and gives up at its own
deadline with a TransportError."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pubguard.errors import TransportError
from pubguard.net.config import load_cluster_config
from pubguard.ops.cluster import LocalCluster

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
