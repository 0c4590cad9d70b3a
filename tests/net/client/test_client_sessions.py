"""Client sessions against one in-process broker over mutual TLS: an identity taken over by a
second client, the profiles a broker serves, the broker's verdict on what was sent, and
reconnections as a fresh session."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from pubguard.errors import (
    DropReason,
    ProfileNotServedError,
    RefusedError,
    ReplacedError,
    StateError,
)
from pubguard.model import Event
from pubguard.net.client.client import connect
from pubguard.net.server.server import BrokerServer
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.base import ProtectedEvent
from tests.loopback import LoopThread, broker_config


def test_a_replaced_client_stops_with_a_typed_error(
    aloop: LoopThread, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pki = ClusterPki(tmp_path / "pki")
    caplog.set_level(logging.WARNING, logger="pubguard.net.server.server")

    async def scenario() -> None:
        server = BrokerServer(broker_config(tmp_path, pki))
        port = await server.start()
        url, ctx = f"tls://127.0.0.1:{port}", pki.client_context("dup")
        first = await connect(url, identity="dup/x", ssl=ctx)
        second = None
        try:
            sub = await first.subscribe("x >= 0")
            await first.flush()
            second = await connect(url, identity="dup/x", ssl=ctx)
            with pytest.raises(ReplacedError) as ei:
                await sub.next(timeout=10)
            assert ei.value.identity == "dup/x"
            assert "broker b0" in str(ei.value)
            with pytest.raises(ReplacedError):
                await first.publish(Event({"x": 1}))
            with pytest.raises(ReplacedError):
                await first.flush()
            await asyncio.sleep(0.3)  # (a reconnecting client would be back by now)
            assert first.reconnects == 0 and not first.is_connected
            assert server.stats["replaced.other_session"] == 1
            assert second.is_connected
            s2 = await second.subscribe("x >= 0")
            await second.flush()
            await second.publish(Event({"x": 2}, id="e2"))
            assert (await s2.next(timeout=10)).event.id == "e2"
        finally:
            await first.close()
            if second is not None:
                await second.close()
            await server.close()

    aloop.run(scenario())
    warned = [r for r in caplog.records if "replaced by a new connection" in r.getMessage()]
    assert len(warned) == 1 and "'dup/x'" in warned[0].getMessage()


def test_profiles_the_broker_does_not_serve_are_refused_locally(
    aloop: LoopThread, tmp_path: Path
) -> None:
    pki = ClusterPki(tmp_path / "pki")

    async def scenario() -> None:
        server = BrokerServer(broker_config(tmp_path, pki))
        port = await server.start()
        c = await connect(f"tls://127.0.0.1:{port}", identity="p", ssl=pki.client_context("p"))
        try:
            assert c.served == ("plain",)
            before = server.core.counters["in.publish"]
            with pytest.raises(ProfileNotServedError) as ei:
                await c.publish(Event({"x": 1}), profile="default")
            assert ei.value.served == ("plain",) and ei.value.profile == "default"
            assert str(ei.value) == (
                "broker b0 does not serve profile 'default' (it serves: plain); nothing was sent"
            )
            assert isinstance(ei.value, StateError)
            with pytest.raises(ProfileNotServedError):
                await c.publish_protected(ProtectedEvent("e", {"x": 1}), profile="psguard")
            await c.confirm()
            assert c._link.chan.tx_next == 1  # not one message was sent
            assert server.core.counters["in.publish"] == before
        finally:
            await c.close()
            await server.close()

    aloop.run(scenario())


def test_confirm_raises_the_brokers_refusal(aloop: LoopThread, tmp_path: Path) -> None:
    pki = ClusterPki(tmp_path / "pki")

    async def scenario() -> None:
        server = BrokerServer(broker_config(tmp_path, pki))
        port = await server.start()
        c = await connect(f"tls://127.0.0.1:{port}", identity="r", ssl=pki.client_context("r"))
        try:
            await c.publish(Event({"x": 1}, id="fine"))
            await c.confirm()  # accepted: no error
            # a list is a wire value but no event attribute: the broker drops it as malformed
            await c.publish_protected(ProtectedEvent("bad", {"x": [1, 2]}))
            with pytest.raises(RefusedError) as ei:
                await c.confirm()
            assert ei.value.reason is DropReason.MALFORMED and ei.value.ref == "bad"
            assert str(ei.value).startswith("broker b0 refused bad: malformed")
            await c.confirm()  # each refusal is reported once
        finally:
            await c.close()
            await server.close()

    aloop.run(scenario())


def test_a_reconnection_as_a_fresh_session_is_reported(aloop: LoopThread, tmp_path: Path) -> None:
    pki = ClusterPki(tmp_path / "pki")
    seen: list[bool] = []

    async def scenario() -> None:
        cfg = broker_config(tmp_path, pki)
        server = BrokerServer(cfg)
        port = await server.start()
        c = await connect(
            f"tls://127.0.0.1:{port}",
            identity="f",
            ssl=pki.client_context("f"),
            on_reconnect=seen.append,
        )
        try:
            await c.subscribe("x >= 0")
            await c.flush()
            await server.close()
            server = BrokerServer(broker_config(tmp_path, pki, port))
            await server.start()
            for _ in range(400):
                if seen:
                    break
                await asyncio.sleep(0.025)
            assert seen == [False]  # the broker forgot this non-durable session
            assert c.fresh_sessions == 1 and c.reconnects == 1
        finally:
            await c.close()
            await server.close()

    aloop.run(scenario())
