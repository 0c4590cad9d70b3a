"""Each attack on the narada profile is dropped at the first honest broker with its reason, and
a directly connected client gets an Error (narada-secure-delivery.txt §IV-H, §V)."""

from __future__ import annotations

import pytest

from pubguard import native
from pubguard.crypto import SigningKey
from pubguard.errors import DropReason, RevokedError
from pubguard.model import Event, Filter
from pubguard.schemes.narada.broker import NARADA, NaradaBroker, signed_digest
from pubguard.wire.messages import Subscribe, Unsubscribe
from tests.schemes.narada.test_narada import NOW, OTHER, TOPIC, build_pki, client, make_sim

#: every attack on both backends: the Python guard and the native one (pubguard._native)
pytestmark = pytest.mark.usefixtures("backend")

F = Filter.parse(f'topic = "{TOPIC}"')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return build_pki(tmp_path_factory)


class World:
    """r -> (a, b); a -> a1; b -> b1. alice publishes at a1, bob subscribes at b1, mallory
    (subscribe rights on TOPIC, publish rights on OTHER) sits at a1."""

    def __init__(self, pki, **kw) -> None:
        self.pki = pki
        self.sim, self.tap, self.scheme = make_sim(pki, **kw)
        # the guard of the backend under test (native.use around the construction)
        assert (self.scheme._fast is not None) is (native.NATIVE is not None)
        self.alice = self.sim.add_client("alice", "a1", client(pki, "alice"))
        self.bob = self.sim.add_client("bob", "b1", client(pki, "bob"))
        self.mallory = self.sim.add_client("mallory", "a1", client(pki, "mallory", (TOPIC, OTHER)))
        self.sub_id = self.sim.subscribe("bob", F, at=NOW)
        self.sim.run()
        assert not self.sim.drops

    def protect(self, t: float, who: str = "alice", **attrs):
        c = getattr(self, who).scheme
        return c.protect_event(Event({"topic": TOPIC, **attrs}), now=t)

    def inject(self, src: str, broker: str, wire: dict, at: float) -> list:
        mark = len(self.tap.handled)
        self.sim.send_raw(src, broker, wire, at=at)
        self.sim.run()
        return self.tap.handled[mark:]

    def only_at(self, handled: list, broker: str, reason: DropReason) -> None:
        assert {b for b, _, _ in handled} == {broker}
        assert self.sim.drops[-1].drop.reason is reason and self.sim.drops[-1].broker == broker


def wire_of(pe) -> dict:
    return {
        "op": "publish",
        "event_id": pe.event_id,
        "profile": NARADA,
        "routing": pe.routing,
        "body": pe.body,
        "meta": dict(pe.meta),
    }


def test_legitimate_publication_is_delivered(pki):
    w = World(pki)
    w.inject("alice", "a1", wire_of(w.protect(NOW + 1, x=1)), NOW + 1)
    assert [d.event["x"] for d in w.bob.deliveries] == [1]


def test_forged_publication_is_dropped_with_an_error_to_the_client(pki):
    w = World(pki)
    wire = wire_of(w.protect(NOW + 1))
    wire["meta"]["sig"] = SigningKey.generate().sign(b"x")
    w.only_at(w.inject("mallory", "a1", wire, NOW + 1), "a1", DropReason.FORGED)
    assert w.mallory.errors[-1].reason is DropReason.FORGED and w.bob.deliveries == []


@pytest.mark.parametrize("field", ["body", "kv", "event_id", "token", "cert"])
def test_tampered_publication_is_forged(pki, field):
    w = World(pki)
    wire = wire_of(w.protect(NOW + 1))
    m = wire["meta"]
    if field == "body":
        wire["body"] = wire["body"][:-1] + bytes([wire["body"][-1] ^ 1])
    elif field == "kv":
        m["kv"] += 1
    elif field == "event_id":
        wire["event_id"] = "replayed-under-a-new-id"
    elif field == "token":  # flip a byte of the token's topic-independent part: KMC sig fails
        m["tok"] = m["tok"][:-70] + bytes([m["tok"][-70] ^ 1]) + m["tok"][-69:]
    else:  # another entity's certificate with alice's token
        m["cert"] = w.pki.entities["bob"][0].to_der()
    w.only_at(w.inject("mallory", "a1", wire, NOW + 1), "a1", DropReason.FORGED)


def test_replayed_publication_is_refused(pki):
    w = World(pki)
    carol = w.sim.add_client("carol", "b1", client(pki, "carol"))
    first = w.protect(NOW + 1, n=1)
    w.inject("alice", "a1", wire_of(first), NOW + 1)
    # the same copy again at a1: the core's dedup window catches it before the guard
    w.only_at(w.inject("mallory", "a1", wire_of(first), NOW + 2), "a1", DropReason.DUPLICATE)
    # a captured message b1 never saw, older than one it did see from the same entity (§V-B)
    older = w.protect(NOW + 4.5, n=3)  # captured and held back
    newer = w.protect(NOW + 5, n=4)
    w.inject("alice", "a1", wire_of(newer), NOW + 5)
    w.only_at(w.inject("carol", "b1", wire_of(older), NOW + 6), "b1", DropReason.REPLAYED)
    assert carol.errors[-1].reason is DropReason.REPLAYED
    assert [d.event["n"] for d in w.bob.deliveries] == [1, 4]


def test_stale_publication_is_dropped(pki):
    w = World(pki, max_delay=30.0)
    held = w.protect(NOW + 1)
    w.only_at(w.inject("mallory", "a1", wire_of(held), NOW + 100), "a1", DropReason.STALE)


def test_unauthorised_actions_are_refused(pki):
    w = World(pki)
    # mallory may only subscribe to TOPIC: publishing with that token is refused
    wire = wire_of(w.protect(NOW + 1, who="mallory"))
    w.only_at(w.inject("mallory", "a1", wire, NOW + 1), "a1", DropReason.UNAUTHORISED)
    assert w.mallory.errors[-1].reason is DropReason.UNAUTHORISED
    # mallory's genuine publish token for OTHER, used on TOPIC
    pe = w.mallory.scheme.protect_event(Event({"topic": OTHER}), now=NOW + 2)
    pe_wire = wire_of(pe)
    pe_wire["routing"] = {"topic": TOPIC}
    w.only_at(w.inject("mallory", "a1", pe_wire, NOW + 2), "a1", DropReason.UNAUTHORISED)
    # no token at all (§IV-H3)
    bare = wire_of(w.protect(NOW + 3))
    del bare["meta"]["tok"]
    w.only_at(w.inject("mallory", "a1", bare, NOW + 3), "a1", DropReason.UNAUTHORISED)
    # alice (publish rights only) tries to subscribe
    pf = w.alice.scheme.protect_filter(F, now=NOW + 4)
    sub = Subscribe("alice-s", NARADA, pf.filter, pf.meta).to_wire()
    w.only_at(w.inject("alice", "a1", sub, NOW + 4), "a1", DropReason.UNAUTHORISED)
    assert w.bob.deliveries == []


def test_tokens_of_untrusted_kmcs_are_refused(pki, tmp_path_factory):
    w = World(pki)
    # another CA's KMC with another name: unknown to these brokers
    rogue = client(build_pki(tmp_path_factory, kmc_name="kmc-rogue"), "alice")
    wire = wire_of(rogue.protect_event(Event({"topic": TOPIC}), now=NOW + 1))
    w.only_at(w.inject("alice", "a1", wire, NOW + 1), "a1", DropReason.UNAUTHORISED)
    # one that impersonates the trusted KMC's name: its signature does not verify
    rogue = client(build_pki(tmp_path_factory), "alice")
    wire = wire_of(rogue.protect_event(Event({"topic": TOPIC}), now=NOW + 2))
    w.only_at(w.inject("alice", "a1", wire, NOW + 2), "a1", DropReason.FORGED)


def test_revoked_publisher_and_revoked_kmc(pki, tmp_path_factory):
    fresh = build_pki(tmp_path_factory)  # revocation changes the CA: keep it out of `pki`
    w = World(fresh)
    w.inject("alice", "a1", wire_of(w.protect(NOW + 1, n=1)), NOW + 1)
    assert len(w.bob.deliveries) == 1
    crl = fresh.ca.revoke(fresh.entities["alice"][0], now=NOW + 2)
    w.scheme.update_crl(crl, now=NOW + 2)  # every broker of the simulation shares it
    w.only_at(
        w.inject("alice", "a1", wire_of(w.protect(NOW + 3)), NOW + 3), "a1", DropReason.REVOKED
    )
    assert w.alice.errors[-1].reason is DropReason.REVOKED
    # a KMC whose certificate is revoked: its tokens are refused even when cached
    dave = w.sim.add_client("dave", "a1", client(fresh, "dave"))
    w.inject(
        "dave",
        "a1",
        wire_of(dave.scheme.protect_event(Event({"topic": TOPIC}), now=NOW + 4)),
        NOW + 4,
    )
    assert len(w.bob.deliveries) == 2
    w.scheme.update_crl(fresh.ca.revoke(fresh.kmc_cert, now=NOW + 5), now=NOW + 5)
    wire = wire_of(dave.scheme.protect_event(Event({"topic": TOPIC}), now=NOW + 6))
    w.only_at(w.inject("dave", "a1", wire, NOW + 6), "a1", DropReason.REVOKED)
    with pytest.raises(RevokedError):  # a revoked KMC cannot be (re)installed
        NaradaBroker(
            ca_cert=fresh.ca.cert,
            kmc_certs=[fresh.kmc_cert],
            now=NOW + 7,
            crl=fresh.ca.crl(now=NOW + 7),
        )


def test_fake_unsubscribe_is_refused(pki):
    w = World(pki)
    mallory_sig = w.mallory.scheme.unsubscribe_meta(F, now=NOW + 1)  # signed by mallory
    for i, meta in enumerate([{}, mallory_sig]):
        wire = Unsubscribe(w.sub_id, NARADA, meta).to_wire()
        w.only_at(w.inject("bob", "b1", wire, NOW + 1 + i), "b1", DropReason.UNAUTHORISED)
    w.inject("alice", "a1", wire_of(w.protect(NOW + 3, x=3)), NOW + 3)
    assert [d.event["x"] for d in w.bob.deliveries] == [3]
    # the genuine one works
    genuine = w.bob.scheme.unsubscribe_meta(F, now=NOW + 4)
    w.inject("bob", "b1", Unsubscribe(w.sub_id, NARADA, genuine).to_wire(), NOW + 4)
    assert all(b.status()["subscriptions"] == 0 for b in w.sim.brokers.values())


def test_subscription_signed_by_someone_else_is_forged(pki):
    w = World(pki)
    pf = w.bob.scheme.protect_filter(F, now=NOW + 1)
    meta = dict(pf.meta)
    tok = meta["tok"]
    d = signed_digest(
        "subscribe", "", TOPIC, meta["ts"], meta["seq"], until=pf.filter["until"], token=tok
    )
    meta["sig"] = w.pki.entities["mallory"][1].sign(d)  # bob's token, mallory's signature
    wire = Subscribe("stolen", NARADA, pf.filter, meta).to_wire()
    w.only_at(w.inject("mallory", "a1", wire, NOW + 1), "a1", DropReason.FORGED)
