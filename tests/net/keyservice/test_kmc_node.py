"""Narada's KMC reached only through the pub/sub network, and secure topic discovery, over
real broker processes (mutual TLS): b0 - b1 - b2 serve narada; the KMC is a client of b2 and
has no socket of its own; the topic discovery node is served by net/keyservice/server.py. Entities
at b0 discover the KMC's topic with valid credentials, request their key through the brokers
and then publish and subscribe with it; entities without valid credentials learn nothing;
a flood moves the KMC to a fresh topic and the old one goes quiet; a repeat offender is
refused (narada-secure-delivery.txt §II-A, §IV-B, §V-A)."""

from __future__ import annotations

import dataclasses
import time
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest

from pubguard.crypto import KemPrivateKey, SigningKey
from pubguard.crypto.x509 import Certificate, CertificateAuthority, Role, server_ssl_context
from pubguard.errors import DropError, DropReason, InvalidToken, TransportError, ValidationError
from pubguard.keys.discovery import (
    KmcEndpoint,
    TopicAdvertisement,
    TopicDiscoveryNode,
    decode_delivery,
    encode_key_request,
)
from pubguard.keys.kmc import Authorize, RegisterTopic, Rights
from pubguard.model import Event
from pubguard.net.config import parse_cluster_config
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.kmc_node import (
    KmcNode,
    discover_kmc_topic,
    fetch_topic_key,
    new_reply_topic,
)
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.narada.client import KmcScheme, NaradaClient
from pubguard.schemes.registry import KeyBundle
from tests.loopback import LoopThread, until
from tests.schemes.narada.test_narada import NOW, build_pki, client, make_sim
from tests.schemes.narada.test_narada import TOPIC as SIM_TOPIC

TOPIC = "trials/oncology"
CLUSTER = """
[topology]
kind = "edges"
edges = [["b0", "b1"], ["b1", "b2"]]
[broker]
profiles = ["plain", "narada"]
"""


@dataclasses.dataclass
class World:
    aloop: LoopThread
    cluster: LocalCluster
    bundle: KeyBundle
    node: KmcNode
    tdn_port: int
    clients: list[Any]

    @property
    def pki(self) -> Any:
        return self.bundle._pki()  # the narada CA, KMC and topic owner (trusted, in memory)

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return self.aloop.run(coro, timeout)

    def tdn(self, tls_name: str) -> KeyServiceClient:
        c = KeyServiceClient(
            "127.0.0.1", self.tdn_port, self.cluster.pki.client_context(tls_name), server_role="tdn"
        )
        self.clients.append(c)
        return c

    def entity(
        self, name: str, *, authorised: bool = True, role: Role = Role.CLIENT
    ) -> NaradaClient:
        """A narada entity (CA certificate), authorised by the topic owner at the KMC."""

        async def make() -> NaradaClient:
            pki = self.pki
            now = time.time()
            cert, key = pki.ca.issue_signing_identity(name, role, now=now)
            if authorised:
                self.authorise(cert)
            return NaradaClient(key, cert, kmc_keys={pki.kmc_cert.subject: pki.kmc_cert.verify_key})

        return self.run(make())  # type: ignore[no-any-return]

    def authorise(self, cert: Certificate) -> None:
        pki, now = self.pki, time.time()
        ocert, okey = pki.owner
        pki.kmc.authorize(
            Authorize.signed(
                okey,
                ocert,
                topic=TOPIC,
                entity=cert.subject,
                rights=Rights.BOTH,
                not_before=now - 60,
                not_after=now + 86400,
                now=now,
            ),
            now=now,
        )

    async def connect(self, broker: str, name: str, scheme: NaradaClient) -> Any:
        return await self.cluster.connect(broker, name, scheme=scheme)


@pytest.fixture(scope="module")
def world(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    state = tmp_path_factory.mktemp("kmcnet")
    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=state)
    bundle = KeyBundle(state / "keys", now=time.time())
    cluster = LocalCluster(cfg, bundle=bundle)
    aloop.run(cluster.start(), timeout=90)
    clients: list[Any] = []
    try:

        async def setup() -> tuple[KmcNode, KeyServiceServer]:
            pki, now = bundle._pki(), time.time()
            ocert, okey = pki.owner
            pki.kmc.register_topic(
                RegisterTopic.signed(
                    okey, ocert, topic=TOPIC, algorithm="AES-256-GCM", key_bits=256, now=now
                ),
                now=now,
            )
            tid = cluster.pki.identity("tdn", Role.TDN)
            tdn = KeyServiceServer(
                KeyServiceCore(tdn=TopicDiscoveryNode(pki.ca.cert)),
                server_ssl_context(tid.cert_path, tid.key_path, tid.ca_path),
            )
            await tdn.start()
            endpoint = KmcEndpoint(
                pki.kmc, now=now, flood_threshold=10, flood_window=120, source_threshold=3, ban=600
            )
            cluster.pki.identity("kmc-1", Role.KMC)  # its TLS identity (role kmc, for the TDN)
            kclient = await cluster.connect("b2", "kmc-1", scheme=KmcNode.scheme_for(endpoint))
            ktdn = KeyServiceClient(
                "127.0.0.1", tdn.port, cluster.pki.client_context("kmc-1"), server_role="tdn"
            )
            clients.append(ktdn)
            node = KmcNode(endpoint, kclient, tdns=[ktdn])
            await node.start()
            await cluster.wait_quiescent()
            return node, tdn

        node, tdn = aloop.run(setup(), timeout=60)
        yield World(aloop, cluster, bundle, node, tdn.port, clients)
        aloop.run(node.client.close())
        aloop.run(tdn.stop())
    finally:
        for c in clients:
            c.close()
        aloop.run(cluster.stop(), timeout=60)


def _fetch(w: World, client: Any, tls: str, **kw: Any) -> Any:
    return fetch_topic_key(
        client, w.tdn(tls), kmc="kmc-1", topic=TOPIC, ca_cert=w.pki.ca.cert, **kw
    )


@pytest.mark.slow
def test_a_valid_entity_gets_its_key_through_the_network(world: World) -> None:
    w = world
    alice, bob = w.entity("alice"), w.entity("bob")

    async def scenario() -> tuple[Any, Any, Event]:
        ca = await w.connect("b0", "alice", alice)
        cb = await w.connect("b1", "bob", bob)
        da = await _fetch(w, ca, "alice")
        db = await _fetch(w, cb, "bob")
        # the KMC-issued token and key work on the narada brokers
        sub = await cb.subscribe(f'topic = "{TOPIC}"')
        await cb.flush()
        await w.cluster.wait_quiescent()
        await ca.publish(Event({"topic": TOPIC, "dose": 3}, payload=b"CANARY-kmc-net"))
        got = (await sub.next(timeout=20)).event
        assert ca.port == w.cluster.ports["b0"]  # alice only ever dialled her own broker
        for c in (ca, cb):
            await c.close()
        return da, db, got

    da, db, got = w.run(scenario())
    assert da.topic == db.topic == TOPIC and da.token.topic == TOPIC
    assert da.token.cert_fingerprint == alice.cert.fingerprint
    assert got["dose"] == 3 and got.payload == b"CANARY-kmc-net"
    assert w.node.stats["served"] >= 2 and w.node.stats["rotations"] == 0
    # what discovery reveals is a topic and a KMC certificate: no address of any kind
    fields = {f.name for f in dataclasses.fields(TopicAdvertisement)}
    assert fields == {
        "kmc",
        "kmc_cert",
        "topic",
        "roles",
        "subjects",
        "version",
        "issued_at",
        "signature",
    }
    assert w.node.topic.startswith("kmc/") and len(w.node.topic) == 4 + 32


@pytest.mark.slow
def test_the_tdn_reveals_nothing_without_valid_credentials(world: World, tmp_path: Any) -> None:
    w = world
    secret = w.node.topic.removeprefix("kmc/")
    # a certificate from a CA of its own
    rogue_ca = CertificateAuthority.create(
        "rogue", tmp_path / "rogue", passphrase=b"x", now=time.time()
    )
    rc, rk = rogue_ca.issue_signing_identity("eve", Role.CLIENT, now=time.time())
    eve = NaradaClient(rk, rc)
    # a CA certificate whose role the advertisement does not admit (brokers are not entities)
    broker_like = w.entity("nosy", role=Role.BROKER)
    # someone else's credentials presented over one's own TLS identity
    carol = w.entity("carol")

    def ask(scheme: NaradaClient, tls: str) -> Exception:
        with pytest.raises((InvalidToken, DropError)) as e:
            discover_kmc_topic(
                scheme, w.tdn(tls), kmc="kmc-1", ca_cert=w.pki.ca.cert, now=time.time()
            )
        return e.value

    errors = [ask(eve, "eve"), ask(broker_like, "nosy"), ask(carol, "mallet")]
    assert isinstance(errors[0], InvalidToken)
    assert [e.reason for e in errors[1:]] == [DropReason.UNAUTHORISED] * 2  # type: ignore[attr-defined]
    assert not any(secret in str(e) for e in errors)
    # the same request with valid credentials is answered
    adv = discover_kmc_topic(
        carol, w.tdn("carol"), kmc="kmc-1", ca_cert=w.pki.ca.cert, now=time.time()
    )
    assert adv.topic == w.node.topic


@pytest.mark.slow
def test_a_repeat_offender_is_refused(world: World) -> None:
    w = world
    mallory = w.entity("mallory", authorised=False)

    async def scenario() -> None:
        c = await w.connect("b0", "mallory", mallory)
        with pytest.raises(TransportError):  # unauthorised: bogus requests, no answer
            await _fetch(w, c, "mallory", timeout=3.0, attempt_timeout=0.4)
        await w.cluster.wait_quiescent()
        assert w.node.endpoint.banned("mallory", time.time())
        w.authorise(mallory.cert)  # even once authorised, the banned source is refused
        with pytest.raises(TransportError):
            await _fetch(w, c, "mallory", timeout=2.0, attempt_timeout=0.5)
        await c.close()

    w.run(scenario())
    assert w.node.stats["refused:flood"] >= 1 and w.node.stats["rotations"] == 0


@pytest.mark.slow
def test_a_flood_moves_the_kmc_to_a_fresh_topic_and_the_old_one_goes_quiet(world: World) -> None:
    w = world
    old = w.node.topic
    attackers = [w.entity(f"flood{i}", authorised=False) for i in range(4)]
    dave = w.entity("dave")

    async def flood(clients: list[Any], topic: str, n: int) -> None:
        for c in clients:
            for _ in range(n):
                await c.publish(Event({"topic": topic}, payload=b"\x93bogus"))
            await c.flush()

    async def scenario() -> tuple[int, int, Any]:
        cs = [await w.connect("b0", a.cert.name, a) for a in attackers]
        await flood(cs, old, 2)  # 8 bogus requests (+ the offender's) from sources under the ban
        await until(lambda: w.node.stats["rotations"], "the KMC moved to a fresh topic")
        await w.cluster.wait_quiescent()
        heard_before = w.node.heard[old]
        await flood(cs, old, 2)  # the old topic: nobody listens any more
        await w.cluster.wait_quiescent()
        heard_after = w.node.heard[old]
        # an honest entity re-discovers the fresh topic and is served there
        cd = await w.connect("b1", "dave", dave)
        d = await _fetch(w, cd, "dave")
        for c in (*cs, cd):
            await c.close()
        return heard_before, heard_after, d

    before, after, d = w.run(scenario())
    assert w.node.stats["rotations"] == 1 and w.node.topic != old
    assert before == after  # the old topic went quiet at the KMC
    assert d.topic == TOPIC and w.node.heard[w.node.topic] >= 1


# -- the broker scheme's rules for KMC service topics, in the simulator (fast) -----------------


def test_service_topics_admit_key_requests_and_only_kmc_signed_replies(tmp_path_factory):
    pki = build_pki(tmp_path_factory)
    sim, _, _ = make_sim(pki)
    ep = KmcEndpoint(pki.kmc, now=NOW)
    kmc = sim.add_client("kmc-1", "b1", KmcNode.scheme_for(ep))
    alice = sim.add_client("alice", "a1", client(pki, "alice", topics=()))  # no token yet
    sim.add_client("eve", "a1", client(pki, "mallory", topics=()))  # mallory's cert
    sim.add_client("fake", "a", KmcScheme(pki.kmc_cert.subject, SigningKey.generate().sign))
    reply = new_reply_topic()
    sim.subscribe("kmc-1", f'topic = "{ep.topic}"', at=NOW)
    sim.subscribe("alice", f'topic = "{reply}"', at=NOW)
    sim.run()
    assert not sim.drops
    # a key request travels without a token; the KMC learns the source the edge checked
    kem = KemPrivateKey.generate()
    req = alice.scheme.key_request(SIM_TOPIC, kem, now=NOW + 1)
    sim.publish(
        "alice", Event({"topic": ep.topic}, payload=encode_key_request(req, reply)), at=NOW + 1
    )
    sim.run()
    (d,) = kmc.deliveries
    assert d.event["src"] == "alice"
    res = ep.handle(d.event["topic"], d.event.payload, d.event["src"], now=NOW + 1)
    assert res.reply is not None and res.reply[0] == reply
    sim.publish("kmc-1", Event({"topic": reply}, payload=res.reply[1]), at=NOW + 2)
    sim.run()
    (r,) = alice.deliveries
    alice.scheme.install(decode_delivery(r.event.payload), kem)
    assert alice.scheme.token(SIM_TOPIC).topic == SIM_TOPIC and not sim.drops

    def dropped(reason: DropReason, broker: str) -> None:
        assert sim.drops[-1].drop.reason is reason and sim.drops[-1].broker == broker

    # a request claiming another source is refused where it enters the network
    sim.publish("eve", Event({"topic": ep.topic}, payload=b"x"), at=NOW + 3)
    sim.run()
    dropped(DropReason.UNAUTHORISED, "a1")
    # a reply not signed by the KMC is forged; the requester receives nothing more
    sim.publish("fake", Event({"topic": reply}, payload=b"fake key"), at=NOW + 4)
    sim.run()
    dropped(DropReason.FORGED, "a")
    assert len(alice.deliveries) == 1
    # nobody but the KMC listens on its topic
    sim.subscribe("fake", f'topic = "{ep.topic}"', at=NOW + 5)
    sim.run()
    dropped(DropReason.FORGED, "a")
    with pytest.raises(ValidationError):  # an entity cannot advertise or subscribe there either
        alice.scheme.protect_event(Event({"topic": ep.topic}), now=NOW)
    n = len(sim.drops)
    sim.publish("alice", Event({"topic": ep.topic}, payload=b"after"), at=NOW + 6)
    sim.run()
    assert len(sim.drops) == n and len(kmc.deliveries) == 2  # still listening, still served
