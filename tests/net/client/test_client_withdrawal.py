"""An eventguard client's withdrawal proofs come from the MS through the blocking key service
client; ``unsubscribe`` and ``close()`` fetch them in a worker thread
(:mod:`pubguard.net.client.withdrawal`), so an MS that accepts TCP but never answers stalls neither the
event loop nor ``close()`` beyond ``WITHDRAW_TIMEOUT``.

One in-process broker over mutual TLS serving eventguard, a real in-process MS for the
subscriptions, then the client's MS swapped for a :class:`KeyServiceClient` to a real socket on
127.0.0.1 that never replies (the TLS handshake waits for the key service client's timeout).
A ticker coroutine on the same loop counts the ticks made while each withdrawal is in flight:
a blocked loop makes none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import socket
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from pubguard.crypto import SecretBytes
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.errors import TransportError
from pubguard.keys.ms import MetaService
from pubguard.net.client.client import WITHDRAW_TIMEOUT, Client, connect
from pubguard.net.client.withdrawal import blocks_on_io
from pubguard.net.config import BrokerConfig, TlsFiles
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.net.server.server import BrokerServer
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.default.broker import DefaultBroker
from pubguard.schemes.default.client import DefaultAuthority, DefaultClient
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from tests.loopback import PATIENCE, LoopThread, until
from tests.schemes.psguard.test_psguard_net import MASTER, SCHEMA

TICK = 0.02  # seconds between ticks of the watching coroutine
STUCK = 20.0  # seconds a dead key service holds a call that waits for it (a long time-out)


async def _ticks_during(aw: Awaitable[object]) -> tuple[float, int, float, BaseException | None]:
    """Run ``aw`` next to a ticker; (seconds it took, ticks strictly inside, the longest
    stretch without a tick, its error). A loop blocked by a call that waits for a key
    service's time-out shows a stretch as long as that time-out; a loop that runs, however
    loaded the machine, shows stretches far shorter (the tests set the time-outs long, so
    that the two never come near each other)."""
    stamps: list[float] = []

    async def tick() -> None:
        while True:
            stamps.append(time.monotonic())
            await asyncio.sleep(TICK)

    ticker = asyncio.get_running_loop().create_task(tick())
    await asyncio.sleep(0)  # the ticker runs once before the call starts
    t0 = time.monotonic()
    err: BaseException | None = None
    try:
        await aw
    except Exception as exc:
        err = exc
    t1 = time.monotonic()
    ticker.cancel()
    inside = [s for s in stamps if t0 < s < t1]
    gap = max(b - a for a, b in itertools.pairwise([t0, *inside, t1]))
    return t1 - t0, len(inside), gap, err


def _b0(tmp_path: Path) -> tuple[ClusterPki, BrokerConfig]:
    """A CA under ``tmp_path`` and broker b0's config (mutual TLS, state in ``tmp_path/b0``)."""
    pki = ClusterPki(tmp_path / "pki")
    ident = pki.identity("b0", Role.BROKER)
    tls = TlsFiles(ident.ca_path, ident.cert_path, ident.key_path)
    return pki, BrokerConfig("b0", tmp_path / "b0", port=0, tls=tls)


async def _client(port: int, pki: ClusterPki, name: str, scheme: Any) -> Client:
    return await connect(
        f"tls://127.0.0.1:{port}", identity=name, ssl=pki.client_context(name), scheme=scheme
    )


def test_dead_ms_stalls_neither_the_loop_nor_close(aloop: LoopThread, tmp_path: Path) -> None:
    pki, cfg = _b0(tmp_path)
    ms = MetaService(SecretBytes(random.Random(7).randbytes(32)))
    hole = socket.create_server(("127.0.0.1", 0), backlog=8)  # listens; never accepts nor answers
    hole_port = hole.getsockname()[1]

    def dead_ms(timeout: float) -> KeyServiceClient:
        return KeyServiceClient(
            "127.0.0.1",
            hole_port,
            pki.client_context("leaver"),
            timeout=timeout,
            ms_key=ms.public_key,
        )

    async def scenario() -> tuple[tuple[float, int, BaseException | None], ...]:
        server = BrokerServer(cfg)
        server.core.schemes.register(EventGuardBroker(ms.public_key))
        port = await server.start()
        try:
            scheme = EventGuardClient("leaver", ms)
            c = await _client(port, pki, "leaver", scheme)
            s1 = await c.subscribe('topic = "w1"')
            await c.subscribe('topic = "w2"')
            await c.flush()
            assert not blocks_on_io(scheme)  # an in-process MS: the hooks stay on the loop
            # unsubscribe: the usb permit request waits for the key service client's timeout
            scheme.ms = dead_ms(timeout=2.0)  # type: ignore[assignment]
            unsub = await _ticks_during(c.unsubscribe(s1))
            # close: the withdrawal of w2 would wait far longer than close() allows itself
            scheme.ms = dead_ms(timeout=WITHDRAW_TIMEOUT + STUCK)  # type: ignore[assignment]
            closing = await _ticks_during(c.close())
            return unsub, closing
        finally:
            hole.close()  # resets the pending handshake: the abandoned worker thread ends
            await server.close()

    try:
        (u_took, u_ticks, u_gap, u_err), (c_took, c_ticks, c_gap, c_err) = aloop.run(
            scenario(), timeout=120
        )
    finally:
        hole.close()
    assert isinstance(u_err, TransportError)  # the MS never answered: a typed error ...
    # ... after its timeout, the loop ticking meanwhile (on the loop: one 2 s stretch)
    assert u_took >= 1.9 and u_ticks >= 3 and u_gap < 1.0
    # close() cut the withdrawal short (the MS call alone would take WITHDRAW_TIMEOUT + STUCK)
    assert c_err is None and c_took < WITHDRAW_TIMEOUT + STUCK / 2
    assert c_ticks >= 3 and c_gap < WITHDRAW_TIMEOUT  # and the loop kept running throughout


@pytest.mark.parametrize("ms_kind", ["local", "remote"])
def test_blocks_on_io_only_for_a_remote_ms(tmp_path: Path, ms_kind: str) -> None:
    ms = MetaService(SecretBytes(bytes(32)))
    scheme = EventGuardClient("x", ms)
    if ms_kind == "remote":
        ctx = ClusterPki(tmp_path / "pki").client_context("x")
        scheme.ms = KeyServiceClient("127.0.0.1", 1, ctx, ms_key=ms.public_key)  # type: ignore[assignment]
    assert blocks_on_io(scheme) is (ms_kind == "remote")


def _restart(cfg: BrokerConfig, port: int) -> BrokerConfig:
    """``cfg`` on ``port`` with a new state directory: a broker that lost its state, so its
    clients find a fresh session."""
    return dataclasses.replace(cfg, port=port, state_dir=cfg.state_dir / f"run-{port}")


def test_a_fresh_session_re_subscribes_off_the_loop_and_retries_a_dead_ms(
    aloop: LoopThread, tmp_path: Path
) -> None:
    """The broker restarts (a fresh session): the eventguard client's re-subscription asks the
    MS for a permit again. With a remote MS that never answers, that call runs in a worker
    thread (the loop keeps ticking: no gap near the MS timeout) and the reconnection is retried;
    once the MS answers again the client re-subscribes."""
    pki, cfg = _b0(tmp_path)
    ms = MetaService(SecretBytes(random.Random(8).randbytes(32)))
    hole = socket.create_server(("127.0.0.1", 0), backlog=8)

    def serve(port: int) -> BrokerServer:
        s = BrokerServer(_restart(cfg, port))
        s.core.schemes.register(EventGuardBroker(ms.public_key))
        return s

    async def scenario() -> tuple[float, int, int, int]:
        server = serve(0)
        port = await server.start()
        scheme = EventGuardClient("again", ms)
        c = await _client(port, pki, "again", scheme)
        try:
            await c.subscribe('topic = "w1"')
            await c.flush()
            scheme.ms = KeyServiceClient(
                "127.0.0.1",
                hole.getsockname()[1],  # type: ignore[assignment]
                pki.client_context("again"),
                timeout=2.0,
                ms_key=ms.public_key,
            )
            await server.close()
            server = serve(port)
            await server.start()
            stamps: list[float] = []
            t_end = time.monotonic() + 5.0  # two attempts at least
            while time.monotonic() < t_end:  # the reconnection attempts wait on the dead MS
                stamps.append(time.monotonic())
                await asyncio.sleep(TICK)
            gap = max(b - a for a, b in itertools.pairwise(stamps))
            stalled_reconnects = c.reconnects
            scheme.ms = ms  # the MS is back
            await until(lambda: c.reconnects, "reconnected once the MS is back")
            await c.flush()
            return gap, stalled_reconnects, c.reconnects, server.status()["subscriptions"]
        finally:
            await c.close()
            await server.close()

    try:
        gap, stalled, reconnects, subs = aloop.run(scenario(), timeout=120)
    finally:
        hole.close()
    assert gap < 1.0  # the 2 s MS timeouts never held the loop (each would be a 2 s stretch)
    assert stalled == 0 and reconnects == 1  # retried until the MS answered, then re-subscribed
    assert subs == 1


def test_a_subscription_the_authority_refuses_on_a_fresh_session_ends_alone(
    aloop: LoopThread, tmp_path: Path
) -> None:
    """default profile: the subscriber's rights are withdrawn, then the broker restarts. The
    re-subscription is refused by the authority: that subscription ends (its iteration
    stops), the link comes back and the subscriber's other subscription is restored."""
    pki, cfg = _b0(tmp_path)
    auth = DefaultAuthority(
        MASTER,
        SCHEMA,
        subscribers={"sub": ['topic = "cardio"', 'topic = "onco"']},
        publishers={"hospital": ["cardio", "onco"]},
    )

    def serve(port: int) -> BrokerServer:
        s = BrokerServer(_restart(cfg, port))
        s.core.schemes.register(DefaultBroker(auth.public_key))
        return s

    async def scenario() -> tuple[bool, int, int]:
        server = serve(0)
        port = await server.start()
        c = await _client(port, pki, "sub", DefaultClient("sub", auth))
        try:
            cardio = await c.subscribe('topic = "cardio"')
            await c.subscribe('topic = "onco"')
            await c.flush()
            auth.keys.set_subscriber("sub", ['topic = "onco"'])  # cardio withdrawn
            await server.close()
            server = serve(port)
            await server.start()
            while c.reconnects == 0:
                await asyncio.sleep(0.02)
            await c.flush()
            try:
                await cardio.next(timeout=PATIENCE)
                ended = False
            except StopAsyncIteration:
                ended = True
            return ended, c.reconnects, server.status()["subscriptions"]
        finally:
            await c.close()
            await server.close()

    ended, reconnects, subs = aloop.run(scenario(), timeout=60)
    assert ended and reconnects == 1 and subs == 1


def test_a_publishers_grant_renewal_on_a_new_epoch_does_not_hold_the_loop(
    aloop: LoopThread, tmp_path: Path
) -> None:
    """An eventguard publisher's first publication of a new epoch renews its grant with the
    MS (§4.8). With a remote MS that call runs in a worker thread: the loop keeps ticking
    while it waits (here on an MS that never answers, until its 0.6 s timeout), and the
    publication fails with a typed error."""
    pki, cfg = _b0(tmp_path)
    ms = MetaService(
        SecretBytes(random.Random(9).randbytes(32)), epoch_length=1.0, origin=time.time()
    )
    hole = socket.create_server(("127.0.0.1", 0), backlog=8)

    async def scenario() -> tuple[float, int, BaseException | None]:
        server = BrokerServer(cfg)
        server.core.schemes.register(EventGuardBroker(ms.public_key))
        port = await server.start()
        scheme = EventGuardClient("pub", ms)
        c = await _client(port, pki, "pub", scheme)
        try:
            await c.advertise('topic = "w"')
            await c.publish({"topic": "w", "x": 1})  # this epoch's grant: no MS call
            await c.flush()
            scheme.ms = KeyServiceClient(
                "127.0.0.1",
                hole.getsockname()[1],  # type: ignore[assignment]
                pki.client_context("pub"),
                timeout=2.0,
                ms_key=ms.public_key,
            )
            await asyncio.sleep(ms.epoch_end(ms.epoch_at(time.time())) - time.time() + 0.05)
            return await _ticks_during(c.publish({"topic": "w", "x": 2}))
        finally:
            scheme.ms = ms  # type: ignore[assignment]
            await c.close()
            await server.close()

    try:
        took, ticks, gap, err = aloop.run(scenario(), timeout=120)
    finally:
        hole.close()
    assert isinstance(err, TransportError)  # the MS never answered: a typed error ...
    # ... after its 2 s time-out, the loop ticking meanwhile (on the loop: one 2 s stretch)
    assert took >= 1.9 and ticks >= 3 and gap < 1.0


def test_a_subscribers_grant_renewal_on_a_new_epoch_does_not_hold_the_loop(
    aloop: LoopThread, tmp_path: Path
) -> None:
    """An eventguard subscriber's first event of a new epoch renews its grant with the MS
    (§4.8). With a remote MS the event is opened in a worker thread, the deliveries behind it
    wait in order, and the loop keeps running: here the key service is served by this very
    loop, so a renewal made on the loop could never be answered (it timed out and the new
    epoch's events were lost)."""
    pki, cfg = _b0(tmp_path)
    ms = MetaService(
        SecretBytes(random.Random(11).randbytes(32)), epoch_length=1.5, origin=time.time()
    )
    ident = pki.identity("ms", Role.MS)
    ks = KeyServiceServer(
        KeyServiceCore(ms), server_ssl_context(ident.cert_path, ident.key_path, ident.ca_path)
    )

    async def scenario() -> tuple[list[int], float, int, int, int]:
        server = BrokerServer(cfg)
        server.core.schemes.register(EventGuardBroker(ms.public_key))
        port, ks_port = await server.start(), await ks.start()
        scheme = EventGuardClient("sub", ms)
        pub = await _client(port, pki, "pub", EventGuardClient("pub", ms))
        sub = await _client(port, pki, "sub", scheme)
        try:
            await pub.advertise('topic = "w"')
            s = await sub.subscribe('topic = "w"')
            await sub.flush()  # the broker holds the subscription
            await pub.publish({"topic": "w", "x": 0})  # this epoch's key: no MS call
            got = [(await s.next(timeout=PATIENCE)).event["x"]]
            scheme.ms = KeyServiceClient(
                "127.0.0.1",
                ks_port,
                pki.client_context("sub"),  # type: ignore[assignment]
                timeout=STUCK,
                ms_key=ms.public_key,
            )
            await asyncio.sleep(ms.epoch_end(ms.epoch_at(time.time())) - time.time() + 0.02)

            async def the_next_epoch() -> None:
                for x in range(1, 6):
                    await pub.publish({"topic": "w", "x": x})
                got.extend([(await s.next(timeout=PATIENCE)).event["x"] for _ in range(5)])

            took, ticks, _, err = await _ticks_during(the_next_epoch())
            assert err is None, err
            return got, took, ticks, ks.core.stats["ok:renew_subscription"], sub.delivers
        finally:
            scheme.ms = ms  # type: ignore[assignment]
            await sub.close()
            await pub.close()
            await server.close()
            await ks.stop()

    got, took, _, served, delivers = aloop.run(scenario(), timeout=120)
    assert got == [0, 1, 2, 3, 4, 5] and delivers == 6  # in order, none lost
    # the loop answered the key service meanwhile: on the loop, the renewal waited out the
    # key service client's STUCK s timeout and failed
    assert took < STUCK
    assert served >= 1  # the new epoch's key came from the key service


def test_deliveries_held_behind_a_renewal_stay_unacknowledged_until_handed_over(
    aloop: LoopThread, tmp_path: Path
) -> None:
    """A durable subscriber closes while the first event of a new epoch waits on an MS that
    never answers: that delivery and the two queued behind it were never handed over, so
    they are not acknowledged and the broker keeps them for the session (``parked``)."""
    pki, cfg = _b0(tmp_path)
    ms = MetaService(
        SecretBytes(random.Random(12).randbytes(32)), epoch_length=1.5, origin=time.time()
    )
    hole = socket.create_server(("127.0.0.1", 0), backlog=8)

    async def scenario() -> tuple[int, int, int]:
        server = BrokerServer(cfg)
        server.core.schemes.register(EventGuardBroker(ms.public_key))
        port = await server.start()
        scheme = EventGuardClient("sub", ms)
        pub = await _client(port, pki, "pub", EventGuardClient("pub", ms))
        sub = await connect(
            f"tls://127.0.0.1:{port}",
            identity="sub",
            durable=True,
            ssl=pki.client_context("sub"),
            scheme=scheme,
        )
        try:
            await pub.advertise('topic = "w"')
            s = await sub.subscribe('topic = "w"')
            await sub.flush()
            await pub.publish({"topic": "w", "x": 0})
            await s.next(timeout=PATIENCE)
            scheme.ms = KeyServiceClient(
                "127.0.0.1",
                hole.getsockname()[1],  # type: ignore[assignment]
                pki.client_context("sub"),
                timeout=2 * PATIENCE,  # never answers while the test looks
                ms_key=ms.public_key,
            )
            await asyncio.sleep(ms.epoch_end(ms.epoch_at(time.time())) - time.time() + 0.02)
            for x in range(1, 4):
                await pub.publish({"topic": "w", "x": x})
            await pub.flush()
            await until(lambda: sub.delivers >= 4, "the new epoch's three delivered")
            held = len(sub._held or ())
            await sub.close()  # the renewal still waits on the MS
            # the broker parks what the closed session never acknowledged
            parked = await until(lambda: server.status()["parked"], "deliveries parked")
            return sub.delivers, held, parked
        finally:
            scheme.ms = ms  # type: ignore[assignment]
            await pub.close()
            await server.close()

    try:
        delivers, held, parked = aloop.run(scenario(), timeout=3 * PATIENCE)
    finally:
        hole.close()
    assert delivers == 4 and held == 3  # the first of the new epoch and the two behind it
    assert parked == 3  # not acknowledged: the durable session gets them again
