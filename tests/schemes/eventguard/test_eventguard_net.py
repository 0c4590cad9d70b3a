"""eventguard over the real network: an in-process TLS cluster of 7 broker servers
(sockets on 127.0.0.1, port 0). A canary published by an authorised publisher reaches the
authorised subscriber and appears in no broker's database file; a forged publication is
refused by the first broker, which answers the client with an Error."""

from __future__ import annotations

import asyncio

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropReason
from pubguard.model import Event
from pubguard.net.config import load_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from tests.loopback import until
from tests.schemes.eventguard.test_eventguard import TOPIC, make_ms

CANARY = b"CANARY-over-tls-91c2"
pytestmark = pytest.mark.slow


async def _scenario(state) -> tuple[list, list, list[bytes]]:
    ms = make_ms()
    cluster = LocalCluster(load_cluster_config(None, state_dir=state), in_process=True)
    await cluster.start()
    try:
        for server in cluster.servers.values():
            server.core.schemes.register(EventGuardBroker(ms.public_key))
        leaves = [b for b in cluster.config.brokers if not cluster.config.children_of(b)]
        pub = await cluster.connect(leaves[0], "pub", scheme=EventGuardClient("pub", ms))
        sub = await cluster.connect(leaves[-1], "sub", scheme=EventGuardClient("sub", ms))
        await pub.advertise(f'topic = "{TOPIC}"')
        s = await sub.subscribe(f'topic = "{TOPIC}"')
        await sub.flush()
        await pub.flush()
        await cluster.wait_quiescent()
        await pub.publish(Event({"topic": TOPIC, "secret": CANARY.decode()}, payload=CANARY))
        got = await s.next(timeout=20)
        # a forgery: the same client scheme, but a signature by a key the MS never bound
        forger = EventGuardClient("pub", ms, signing_key=SigningKey.generate())
        forger._ads = pub.scheme._ads  # the genuine permit, the wrong key
        evil = await cluster.connect(leaves[0], "evil", scheme=forger)
        await evil.publish(Event({"topic": TOPIC, "secret": "forged"}))
        await until(lambda: evil.errors, "the forgery refused")
        status = await cluster.status(leaves[0])
        for c in (pub, sub, evil):
            await c.close()
    finally:
        await cluster.stop()
    dbs = [
        p.read_bytes()
        for p in state.rglob("*")
        if p.is_file() and p.suffix in (".db", ".db-wal", ".log", ".toml")
    ]
    return [got], list(evil.errors), [status, *dbs]


def test_eventguard_over_a_tls_cluster(tmp_path):
    (got,), errors, (status, *files) = asyncio.run(_scenario(tmp_path / "cluster"))
    assert got.event["secret"] == CANARY.decode() and got.event.payload == CANARY
    assert [e.reason for e in errors] == [DropReason.FORGED]
    assert status["drops"] == {"forged": 1}
    assert files and not any(CANARY in f for f in files)
    assert not any(TOPIC.encode() in f for f in files)  # tokens only, even at rest
