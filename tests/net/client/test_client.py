"""The client library against one in-process broker over mutual TLS (fast, no processes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pubguard.crypto.x509 import Role
from pubguard.errors import SlowConsumerError, TransportError, ValidationError
from pubguard.model import Event
from pubguard.net.client.client import Delivery, connect
from pubguard.net.config import BrokerConfig, TlsFiles
from pubguard.net.server.server import BrokerServer
from pubguard.ops.pki import ClusterPki
from tests.loopback import PATIENCE, LoopThread


def _config(tmp: Path, pki: ClusterPki, port: int = 0) -> BrokerConfig:
    i = pki.identity("b0", Role.BROKER)
    return BrokerConfig(
        "b0", tmp / "b0", port=port, tls=TlsFiles(i.ca_path, i.cert_path, i.key_path)
    )


def test_pubsub_api_backpressure_slow_consumer_and_resubscription(
    aloop: LoopThread, tmp_path: Path
) -> None:
    pki = ClusterPki(tmp_path / "pki")

    async def scenario() -> None:
        server = BrokerServer(_config(tmp_path, pki))
        port = await server.start()
        url = f"tls://127.0.0.1:{port}"
        seen: list[Delivery] = []
        async with await connect(url, identity="sub", ssl=pki.client_context("sub")) as sub_c:
            pub_c = await connect(url, identity="pub", ssl=pki.client_context("pub"), window=8)
            try:
                it = await sub_c.subscribe("x > 1")
                cb = await sub_c.subscribe("x > 5", handler=seen.append)
                slow = await sub_c.subscribe("x >= 0", max_pending=3)
                await sub_c.flush()
                high = 0
                for i in range(200):
                    await pub_c.publish(Event({"x": i % 10}, id=f"e{i}"))
                    high = max(high, len(pub_c._unacked))
                assert high <= 8  # the publisher is held to its window (credit)
                await pub_c.flush()
                got = [(await it.next(timeout=PATIENCE)).event.id for _ in range(160)]
                assert got == [f"e{i}" for i in range(200) if i % 10 > 1]
                while len(seen) < 80:
                    await asyncio.sleep(0.01)
                assert [d.sub_id for d in seen] == [cb.id] * 80
                with pytest.raises(SlowConsumerError) as ei:
                    await slow.next(timeout=PATIENCE)
                assert ei.value.capacity == 3 and slow.dropped == 197
                assert (await slow.next(timeout=PATIENCE)).event.id == "e0"  # then it goes on

                await cb.unsubscribe()
                await slow.unsubscribe()
                await sub_c.flush()
                # the broker restarts on the same port: the client reconnects and re-subscribes
                await server.close()
                server = BrokerServer(_config(tmp_path, pki, port=port))
                await server.start()
                while sub_c.reconnects == 0 or pub_c.reconnects == 0:
                    await asyncio.sleep(0.02)
                await sub_c.flush()
                await pub_c.publish(Event({"x": 7}, id="after"))
                await pub_c.flush()
                assert (await it.next(timeout=PATIENCE)).event.id == "after"
                assert server.status()["subscriptions"] == 1
            finally:
                await pub_c.close()
                await server.close()
        with pytest.raises(StopAsyncIteration):
            await it.next(timeout=1)  # closing the client ends its subscriptions

    aloop.run(scenario(), timeout=3 * PATIENCE)


def test_connect_errors(aloop: LoopThread, tmp_path: Path) -> None:
    pki = ClusterPki(tmp_path / "pki")

    async def scenario() -> None:
        with pytest.raises(ValidationError):
            await connect("http://x", identity="a", ssl=None)
        with pytest.raises(ValidationError):
            await connect("tls://127.0.0.1:1", identity="a", ssl=None)
        with pytest.raises(TransportError):
            await connect("tls://127.0.0.1:1", identity="a", ssl=pki.client_context("a"))

    aloop.run(scenario())
