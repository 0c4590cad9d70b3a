"""kill -9 of an inner broker loses no subscription and no acknowledged event; hostile peers."""

from __future__ import annotations

import asyncio
import ssl
import struct
import time
from pathlib import Path

import pytest

from pubguard.crypto.x509 import CertificateAuthority, client_ssl_context, issue_tls_identity
from pubguard.errors import TransportError
from pubguard.model import Event
from pubguard.ops.cluster import LocalCluster
from pubguard.wire import envelope
from pubguard.wire.framing import FrameDecoder, encode_frame
from tests.loopback import PATIENCE, LoopThread, until

pytestmark = pytest.mark.slow


def test_kill_9_inner_broker_loses_nothing(aloop: LoopThread, cluster7: LocalCluster) -> None:
    # b1 is inner: parent b0, children b3 and b4
    async def scenario() -> None:
        subs, clients = {}, []
        for broker in ("b1", "b3", "b4", "b5"):
            c = await cluster7.connect(broker, f"k-{broker}", durable=True)
            clients.append(c)
            subs[broker] = await c.subscribe("k >= 0", sub_id=f"k-{broker}")
            await c.flush()
        p3 = await cluster7.connect("b3", "k-pub3")
        p5 = await cluster7.connect("b5", "k-pub5")
        clients += [p3, p5]
        try:
            await cluster7.wait_quiescent()
            before = (await cluster7.status("b1"))["subscriptions"]
            sent = []
            for i in range(50):
                sent.append(await (p3 if i % 2 else p5).publish(Event({"k": i}, id=f"k{i}")))
            await p3.flush()
            await p5.flush()
            cluster7.kill("b1")  # no flush, no goodbye: whatever b1 acknowledged must survive
            for i in range(50, 100):  # while b1 is down: acknowledged by b3 / b5, queued upstream
                sent.append(await (p3 if i % 2 else p5).publish(Event({"k": i}, id=f"k{i}")))
            await p3.flush()
            await p5.flush()
            late = await clients[1].subscribe("late >= 0", sub_id="k-late")  # at b3, b1 down
            await cluster7.restart("b1")
            await cluster7.wait_connected()
            for c in clients:  # every client link is back
                while not c.is_connected:
                    await asyncio.sleep(0.02)

            async def held() -> bool:  # b3 re-sends the late subscription once linked again
                return (await cluster7.status("b1"))["subscriptions"] >= before + 1

            await until(held, "the late subscription held at b1")  # and nothing lost
            for i in range(100, 110):
                sent.append(await p5.publish(Event({"k": i, "late": 1}, id=f"k{i}")))
            await p5.flush()
            await cluster7.wait_quiescent()
            for broker, sub in subs.items():
                got = []
                while len(got) < len(sent):  # each must come: a lost one fails at PATIENCE
                    got.append((await sub.next(timeout=PATIENCE)).event.id)
                assert sorted(got) == sorted(sent), broker  # each event exactly once
                assert sub.pending == 0
            late_ids = [(await late.next(timeout=PATIENCE)).event.id for _ in range(10)]
            assert late_ids == [f"k{i}" for i in range(100, 110)]
        finally:
            for c in clients:
                await c.close()

    aloop.run(scenario(), timeout=300)


def test_garbage_frames_close_only_that_link(aloop: LoopThread, cluster7: LocalCluster) -> None:
    async def scenario() -> None:
        good_sub = await cluster7.connect("b0", "g-sub")
        good_pub = await cluster7.connect("b0", "g-pub")
        try:
            sub = await good_sub.subscribe("g = 1")
            await good_sub.flush()
            ctx = cluster7.pki.client_context("g-evil")
            for garbage in (
                struct.pack(">I", 9) + b"\x01" + b"\xc1" * 8,  # undecodable body
                struct.pack(">I", 1 << 30),  # oversize length
                encode_frame({"t": "m", "s": 1, "m": "nope"}),  # bad envelope
            ):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", cluster7.ports["b0"], ssl=ctx
                )
                writer.write(
                    encode_frame(envelope.hello("g-evil", "client", "x", durable=False, rx=0))
                )
                writer.write(garbage)
                dec, frames = FrameDecoder(), []
                while True:  # until the broker closes the link (bounded: it must)
                    data = await asyncio.wait_for(reader.read(65536), PATIENCE)
                    if not data:
                        break
                    frames += dec.feed(data)
                writer.close()
                assert frames[0]["t"] == "hello" and frames[-1]["t"] == "bye"
            await good_pub.publish(Event({"g": 1}, id="g1"))
            assert (await sub.next(timeout=PATIENCE)).event.id == "g1"  # others still served
            st = await cluster7.status("b0")
            assert st["transport"]["closed.FrameError"] >= 3
        finally:
            await good_sub.close()
            await good_pub.close()

    aloop.run(scenario(), timeout=3 * PATIENCE)
    log = (cluster7.broker_dir("b0") / "broker.log").read_text()
    assert "closing link c:g-evil" in log and "FrameError" not in log.split("closing")[0][-1:]


def test_certificate_from_another_ca_is_refused(
    aloop: LoopThread, cluster7: LocalCluster, tmp_path: Path
) -> None:
    rogue = CertificateAuthority.create("rogue", tmp_path / "ca", passphrase=b"pw", now=time.time())
    out = {}
    for role in ("client", "broker"):
        ident = issue_tls_identity(rogue, f"rogue-{role}", role, tmp_path / role, now=time.time())
        ctx = client_ssl_context(
            ident.cert_path, ident.key_path, cluster7.pki.identity("cli").ca_path
        )
        out[role] = ctx

    async def scenario() -> None:
        for role, ctx in out.items():
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", cluster7.ports["b1"], ssl=ctx
                )
                writer.write(
                    encode_frame(envelope.hello(f"rogue-{role}", role, "x", durable=False, rx=0))
                )
                # the refusal must come; the bound only ends a wait for one that never does
                data = await asyncio.wait_for(reader.read(65536), PATIENCE)
                writer.close()
                refused = data == b""
            except (ssl.SSLError, ConnectionError, TransportError):
                refused = True
            assert refused, role
        st = await cluster7.status("b1")  # still serving
        assert not any(k.startswith("c:rogue") or k.startswith("b:rogue") for k in st["links"])

    aloop.run(scenario(), timeout=3 * PATIENCE)
