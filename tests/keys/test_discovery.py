"""Narada secure topic discovery (§II-A, §IV-B) and the KMC reached only through the pub/sub
network, moving to a fresh topic under a flood and refusing repeat offenders (§V-A)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pubguard.crypto import KemPrivateKey, SecretBytes, SigningKey
from pubguard.crypto.x509 import CertificateAuthority, Role
from pubguard.errors import DropError, DropReason, InvalidToken, RevokedError
from pubguard.keys.discovery import (
    DiscoveryRequest,
    KmcEndpoint,
    TopicAdvertisement,
    TopicDiscoveryNode,
    decode_delivery,
    decode_key_request,
    encode_key_request,
    new_service_topic,
    open_discovery_reply,
)
from pubguard.keys.kmc import KMC, Authorize, KeyRequest, RegisterTopic, Rights, open_delivery
from pubguard.model import Event
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes import PlainScheme
from pubguard.schemes.narada.broker import NaradaBroker
from pubguard.schemes.narada.client import NaradaClient
from pubguard.sim.engine import Simulator
from pubguard.store import Database

NOW = 1_735_689_600.0
TOPIC = "/secure/orders"


@dataclasses.dataclass
class World:
    ca: CertificateAuthority
    kmc: KMC
    kmc_key: SigningKey
    ids: dict


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    ca = CertificateAuthority.create("ca", tmp_path_factory.mktemp("ca"), passphrase=b"pw", now=NOW)
    kcert, kkey = ca.issue_signing_identity("kmc-1", Role.KMC, now=NOW)
    kmc = KMC(
        Database(":memory:"),
        signing_key=kkey,
        cert=kcert,
        ca_cert=ca.cert,
        storage_key=SecretBytes(random.Random(2).randbytes(32)),
    )
    ids = {
        n: ca.issue_signing_identity(n, r, now=NOW)
        for n, r in (
            ("owner", Role.CLIENT),
            ("alice", Role.CLIENT),
            ("bob", Role.CLIENT),
            ("broker-x", Role.BROKER),
            ("revoked", Role.CLIENT),
        )
    }
    ocert, okey = ids["owner"]
    kmc.register_topic(
        RegisterTopic.signed(
            okey, ocert, topic=TOPIC, algorithm="AES-256-GCM", key_bits=256, now=NOW
        ),
        now=NOW,
    )
    for n, r in (("alice", Rights.PUBLISH), ("bob", Rights.SUBSCRIBE)):
        kmc.authorize(
            Authorize.signed(
                okey,
                ocert,
                topic=TOPIC,
                entity=ids[n][0].subject,
                rights=r,
                not_before=NOW - 60,
                not_after=NOW + 86400,
                now=NOW,
            ),
            now=NOW,
        )
    return World(ca, kmc, kkey, ids)


def endpoint(w: World, **kw) -> KmcEndpoint:
    return KmcEndpoint(w.kmc, w.kmc_key, now=NOW, rng=random.Random(5), **kw)


def discover(w: World, tdn: TopicDiscoveryNode, who: str, now: float = NOW) -> list:
    cert, key = w.ids[who]
    kem = KemPrivateKey.generate()
    req = DiscoveryRequest.signed(key, cert, kem, kmc=w.kmc.name, now=now)
    return open_discovery_reply(tdn.discover(req, now=now), kem, req)


def test_service_topics_are_fresh_128_bit_values():
    rng = random.Random(1)
    topics = {new_service_topic(rng) for _ in range(100)}
    assert len(topics) == 100 and all(len(t) == len("kmc/") + 32 for t in topics)


def test_tdn_reveals_the_topic_only_to_valid_credentials(world, tmp_path):
    ep = endpoint(world)
    tdns = [TopicDiscoveryNode(world.ca.cert, world.ca.crl(now=NOW)) for _ in range(2)]
    for t in tdns:
        t.advertise(ep.advertisement, now=NOW)
    (adv,) = discover(world, tdns[1], "alice")  # any replica answers
    assert adv.topic == ep.topic and adv.kmc == world.kmc.name
    adv.verify(world.ca.cert, None, now=NOW)  # provenance: the KMC signed it
    # a broker certificate is valid but the restriction admits clients only
    with pytest.raises(DropError) as exc:
        discover(world, tdns[0], "broker-x")
    assert exc.value.reason is DropReason.UNAUTHORISED
    # a certificate from another CA
    other = CertificateAuthority.create("ca2", tmp_path / "other-ca", passphrase=b"p", now=NOW)
    cert, key = other.issue_signing_identity("alice", Role.CLIENT, now=NOW)
    kem = KemPrivateKey.generate()
    with pytest.raises(InvalidToken):
        tdns[0].discover(DiscoveryRequest.signed(key, cert, kem, kmc="", now=NOW), now=NOW)
    # a stale request, and a tampered one
    cert, key = world.ids["alice"]
    with pytest.raises(InvalidToken):
        tdns[0].discover(DiscoveryRequest.signed(key, cert, kem, kmc="", now=NOW - 1000), now=NOW)
    req = DiscoveryRequest.signed(key, cert, kem, kmc="", now=NOW)
    with pytest.raises(InvalidToken):
        tdns[0].discover(dataclasses.replace(req, kmc="kmc-x"), now=NOW)
    # an eavesdropper replaying alice's request gets a reply only alice's KEM key opens
    blob = tdns[0].discover(req, now=NOW)
    with pytest.raises(InvalidToken):
        open_discovery_reply(blob, KemPrivateKey.generate(), req)


def test_tdn_refuses_revoked_requesters_and_forged_or_old_advertisements(world, tmp_path):
    ca = CertificateAuthority.create("ca3", tmp_path / "ca3", passphrase=b"p", now=NOW)
    cert, key = ca.issue_signing_identity("eve", Role.CLIENT, now=NOW)
    kcert, kkey = ca.issue_signing_identity("kmc-3", Role.KMC, now=NOW)
    kmc = KMC(
        Database(":memory:"),
        signing_key=kkey,
        cert=kcert,
        ca_cert=ca.cert,
        storage_key=SecretBytes(b"k" * 32),
    )
    ep = KmcEndpoint(kmc, kkey, now=NOW)
    tdn = TopicDiscoveryNode(ca.cert, ca.crl(now=NOW))
    tdn.advertise(ep.advertisement, now=NOW)
    with pytest.raises(DropError):  # the same version again
        tdn.advertise(ep.advertisement, now=NOW)
    forged = dataclasses.replace(ep.advertisement, topic="kmc/" + "0" * 32, version=9)
    with pytest.raises(InvalidToken):
        tdn.advertise(forged, now=NOW)
    assert TopicAdvertisement.from_bytes(ep.advertisement.to_bytes()) == ep.advertisement
    with pytest.raises(InvalidToken):
        TopicAdvertisement.from_bytes(b"\x93\x01\x02\x03")
    tdn.update_crl(ca.revoke(cert, now=NOW + 1), now=NOW + 1)
    kem = KemPrivateKey.generate()
    with pytest.raises(RevokedError):
        tdn.discover(DiscoveryRequest.signed(key, cert, kem, kmc="", now=NOW + 2), now=NOW + 2)


def _request(w: World, who: str, topic: str = TOPIC) -> tuple[bytes, KemPrivateKey]:
    cert, key = w.ids[who]
    kem = KemPrivateKey.generate()
    req = KeyRequest.signed(key, cert, topic=topic, kem_public=kem.public, now=NOW)
    return encode_key_request(req, f"reply/{who}"), kem


def test_endpoint_serves_valid_requests_and_refuses_repeat_offenders(world):
    ep = endpoint(world, source_threshold=3, flood_threshold=1000)
    blob, kem = _request(world, "alice")
    res = ep.handle(ep.topic, blob, "link-alice", now=NOW)
    assert res.refused is None and res.reply[0] == "reply/alice"
    key = open_delivery(decode_delivery(res.reply[1]), kem)
    assert len(key) == 32
    # bogus: junk, an unauthorised entity, a wrong topic
    for payload in (b"junk", _request(world, "broker-x")[0], _request(world, "alice", "/x")[0]):
        assert ep.handle(ep.topic, payload, "link-eve", now=NOW + 1).reply is None
    assert ep.banned("link-eve", NOW + 2)
    assert ep.handle(ep.topic, blob, "link-eve", now=NOW + 2).refused is DropReason.FLOOD
    assert ep.handle(ep.topic, blob, "link-alice", now=NOW + 2).reply is not None
    assert not ep.banned("link-eve", NOW + 1000)
    with pytest.raises(InvalidToken):
        decode_key_request(encode_key_request(KeyRequest(b"", 0, "t", b"", b""), "nope"))


def test_flood_moves_the_kmc_to_a_fresh_topic(world):
    ep = endpoint(world, flood_threshold=10, flood_window=5.0, source_threshold=1000)
    old = ep.topic
    rotated = None
    for i in range(10):
        res = ep.handle(old, b"bogus-%d" % i, f"src{i % 4}", now=NOW + i * 0.1)
        rotated = rotated or res.rotated
    assert rotated is not None and rotated.topic == ep.topic != old and rotated.version == 2
    blob, _ = _request(world, "bob")
    assert ep.handle(old, blob, "link-bob", now=NOW + 2).refused is DropReason.STALE
    assert ep.handle(ep.topic, blob, "link-bob", now=NOW + 2).reply is not None


def test_entity_gets_its_key_through_the_network_and_survives_a_flood(world):
    """The KMC is a client of broker k; entities know only its topic (from a TDN). Requests and
    replies travel as plain-profile events; the secure topic itself uses the narada profile."""
    tree = tree_from_edges([("r", "k"), ("r", "e"), ("r", "m")])
    crl = world.ca.crl(now=NOW)

    def schemes(_b):
        return [
            PlainScheme(),
            NaradaBroker(ca_cert=world.ca.cert, kmc_certs=[world.kmc.cert], now=NOW, crl=crl),
        ]

    sim = Simulator(tree, schemes, wire=True, seed=2)
    ep = endpoint(world, flood_threshold=20, source_threshold=1000)
    tdn = TopicDiscoveryNode(world.ca.cert, crl)
    tdn.advertise(ep.advertisement, now=NOW)
    kmc_c = sim.add_client("kmc", "k")
    kmc_sub = sim.subscribe("kmc", f'topic = "{ep.topic}"', at=NOW)
    processed = 0

    def pump(t: float) -> None:
        nonlocal processed, kmc_sub
        sim.run()
        while processed < len(kmc_c.deliveries):
            d = kmc_c.deliveries[processed]
            processed += 1
            res = ep.handle(d.event["topic"], d.event.payload, d.event["from"], now=t)
            if res.reply:
                sim.publish("kmc", Event({"topic": res.reply[0]}, payload=res.reply[1]), at=t)
            if res.rotated:
                sim.unsubscribe("kmc", kmc_sub, at=t)
                kmc_sub = sim.subscribe("kmc", f'topic = "{res.rotated.topic}"', at=t)
                tdn.advertise(res.rotated, now=t)
            sim.run()

    def obtain(name: str, at: float) -> NaradaClient:
        (adv,) = discover(world, tdn, name, now=at)
        sim.add_client(f"{name}-ctl", "e")  # the entity's control client (plain profile)
        blob, kem = _request(world, name)
        sim.subscribe(f"{name}-ctl", f'topic = "reply/{name}"', at=at)
        sim.publish(f"{name}-ctl", Event({"topic": adv.topic, "from": name}, payload=blob), at=at)
        pump(at)
        ctl = sim.clients[f"{name}-ctl"]
        cert, key = world.ids[name]
        c = NaradaClient(key, cert, kmc_keys={world.kmc.name: world.kmc.cert.verify_key})
        c.install(decode_delivery(ctl.deliveries[-1].event.payload), kem)
        return c

    alice = obtain("alice", NOW + 1)
    # a flood of bogus requests from several attackers who learnt the topic ("from" stands for
    # the source identity a real driver would get from the transport)
    old = ep.topic
    sim.add_client("mallory", "m")
    for i in range(25):
        sim.publish(
            "mallory", Event({"topic": old, "from": f"m{i % 5}"}, payload=b"x" * 40), at=NOW + 2
        )
    pump(NOW + 2)
    assert ep.topic != old and ep.version == 2
    before = processed
    sim.publish("mallory", Event({"topic": old, "from": "m0"}, payload=b"x"), at=NOW + 3)
    pump(NOW + 3)
    assert processed == before  # the KMC no longer listens on the old topic
    bob = obtain("bob", NOW + 4)  # bob re-discovers and gets served on the new topic
    # and the keys work on the secure topic, under the narada profile
    pub = sim.add_client("alice", "e", alice)
    sub = sim.add_client("bob", "m", bob)
    sim.subscribe("bob", f'topic = "{TOPIC}"', at=NOW + 5)
    sim.run()
    sim.publish("alice", Event({"topic": TOPIC, "qty": 3}), at=NOW + 6)
    sim.run()
    assert [d.event["qty"] for d in sub.deliveries] == [3] and not pub.errors
