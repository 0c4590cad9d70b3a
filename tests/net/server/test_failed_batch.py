"""Crash-only batches (net/server/batching.py): a batch whose transaction fails leaves the
links' ``rx_seq`` and the core's state in memory ahead of SQLite, so the broker stops instead
of carrying on; a restart on the same state resumes from the last commit and the peers resend
what was never acknowledged. The fault is real: SQLite refusing to grow the file
(``PRAGMA max_page_count``, "database or disk is full")."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from pubguard.errors import StateError
from pubguard.model import Event
from pubguard.net.client.client import connect
from pubguard.net.server.server import BrokerServer
from pubguard.ops.pki import ClusterPki
from tests.loopback import LoopThread, broker_config

EVENTS = 40


def test_a_failed_commit_stops_the_broker_and_a_restart_loses_nothing(
    aloop: LoopThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = ClusterPki(tmp_path / "pki")
    caplog.set_level(logging.CRITICAL, logger="pubguard.net.server")
    got: list[str] = []

    async def scenario() -> None:
        server = BrokerServer(broker_config(tmp_path, pki))
        port = await server.start()
        url = f"tls://127.0.0.1:{port}"
        sub = await connect(url, identity="s", ssl=pki.client_context("s"), durable=True)
        pub = await connect(url, identity="p", ssl=pki.client_context("p"), durable=True)
        try:
            s = await sub.subscribe("x >= 0")
            await sub.flush()
            await pub.publish(Event({"x": 0}, id="e0"))
            got.append((await s.next(timeout=10)).event.id)
            assert server.store is not None
            db = server.store.db
            db.execute(f"PRAGMA max_page_count = {db.pragma('page_count')}")  # disk full
            for i in range(1, EVENTS):
                await pub.publish(Event({"x": i, "pad": "y" * 400}, id=f"e{i}"))
            for _ in range(400):
                if server.failure is not None:
                    break
                await asyncio.sleep(0.025)
            assert server.failure is not None, "the broker kept serving after a failed commit"
            with pytest.raises(StateError, match="failed batch"):
                await server.serve_forever()
            await server.close()
            server = BrokerServer(broker_config(tmp_path, pki, port))  # same state, room again
            await server.start()
            while len(got) < EVENTS:
                got.append((await s.next(timeout=20)).event.id)
            await asyncio.sleep(0.3)  # nothing more may come: no duplicate
            with pytest.raises(asyncio.TimeoutError):
                await s.next(timeout=0.2)
        finally:
            await pub.close()
            await sub.close()
            await server.close()

    aloop.run(scenario())
    assert sorted(got, key=lambda e: int(e[1:])) == [f"e{i}" for i in range(EVENTS)]
    assert len(set(got)) == EVENTS
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert any("a batch failed" in m and "full" in m for m in lines), lines
