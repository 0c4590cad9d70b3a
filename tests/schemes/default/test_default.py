"""The default profile end to end over broker cores in the simulator: tokens and ciphertext only
on the wire, content-based authorisation, permits, amortised (Merkle-root) signing with one
verification per batch per broker, and the permit / withdrawal formats."""

from __future__ import annotations

import random

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropError, DropReason, InvalidToken, KeyError_, ValidationError
from pubguard.model import Filter
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes import BrokerScheme, ClientScheme, SchemeRegistry
from pubguard.schemes.default.broker import (
    DEFAULT,
    AuthorityPermit,
    DefaultBroker,
    filter_digest,
    make_scheme,
)
from pubguard.schemes.default.client import DefaultAuthority, DefaultClient
from pubguard.sim.engine import Simulator
from tests.schemes.attack_tools import scan, tap
from tests.schemes.psguard.test_psguard_net import CANARY, MASTER, SCHEMA, ev

NOW = 1_000.0
YOUNG = 'topic = "cardio" && age >= 20 && age <= 30'
POLICY = {"young": [YOUNG], "old": ['topic = "cardio" && age >= 31'], "any": ['topic = "cardio"']}
TREE = [("r", "a"), ("r", "b"), ("a", "a1"), ("b", "b1"), ("b", "b2")]


def authority(**kw) -> DefaultAuthority:
    kw.setdefault("subscribers", POLICY)
    kw.setdefault("publishers", {"hospital": ["cardio"]})
    return DefaultAuthority(MASTER, SCHEMA, **kw)


class World:
    """Publisher at a1; subscribers young/old at b1, any at b2. One scheme per broker."""

    def __init__(self, **opts) -> None:
        self.auth = authority()
        self.schemes: dict[str, DefaultBroker] = {}
        opts.setdefault("max_delay", 60.0)

        def schemes(b: str) -> list[DefaultBroker]:
            s = self.schemes[b] = DefaultBroker(self.auth.public_key, **opts)
            return [s]

        self.sim = Simulator(tree_from_edges(TREE), schemes, wire=True, seed=9)
        self.tap = tap(self.sim)
        self.psk = SigningKey.generate()
        self.pub = self.client("hospital", "a1", self.psk)
        for name, broker in (("young", "b1"), ("old", "b1"), ("any", "b2")):
            self.client(name, broker)
        self.sim.advertise("hospital", 'topic = "cardio"', at=NOW)
        self.sim.subscribe("young", YOUNG, at=NOW)
        self.sim.subscribe("old", POLICY["old"][0], at=NOW)
        self.sim.subscribe("any", POLICY["any"][0], at=NOW)
        self.sim.run()

    def client(self, name: str, broker: str, sk: SigningKey | None = None) -> DefaultClient:
        c = DefaultClient(name, self.auth, signing_key=sk)
        self.sim.add_client(name, broker, c)
        return c

    def got(self, name: str) -> list[int]:
        return sorted(d.event["age"] for d in self.sim.clients[name].deliveries)


@pytest.fixture
def world() -> World:
    return World()


def test_both_faces_conform() -> None:
    a = authority()
    b = make_scheme(a.public_key)
    assert isinstance(b, BrokerScheme) and isinstance(DefaultClient("x", a), ClientScheme)
    assert SchemeRegistry([b]).get(DEFAULT) is b and b.rewrites_outgoing is False
    with pytest.raises(ValidationError):
        DefaultBroker(SigningKey.generate())  # type: ignore[arg-type]


def test_routing_by_content_with_tokens_and_ciphertext_only(world: World) -> None:
    ages = [19, 20, 25, 30, 31, 64]
    for i, a in enumerate(ages):
        world.sim.publish("hospital", ev(a, eid=f"e{a}"), at=NOW + 1 + i)
    world.sim.run()
    assert world.got("young") == [20, 25, 30] and world.got("old") == [31, 64]
    assert world.got("any") == ages
    assert all(d.event["record"] == CANARY for d in world.sim.clients["any"].deliveries)
    assert scan(world.tap, CANARY.encode()) == 0 and scan(world.tap, b"cardio") == 0
    assert not world.sim.drops


def test_batch_costs_one_verification_per_broker(world: World) -> None:
    events = [ev(20 + i, eid=f"b{i}") for i in range(16)]
    pes = world.pub.protect_events(events, now=NOW + 1, rng=random.Random(2))
    assert len({pe.meta["sig"] for pe in pes}) == 1 and pes[3].meta["mn"] == 16
    before = {b: s.roots.verifications for b, s in world.schemes.items()}
    from pubguard.wire.messages import Publish

    for pe in pes:
        world.sim.send_raw(
            "hospital",
            "a1",
            Publish(pe.event_id, DEFAULT, pe.routing, pe.body, pe.meta).to_wire(),
            at=NOW + 1,
        )
    world.sim.run()
    assert len(world.sim.clients["any"].deliveries) == 16
    done = {b: s.roots.verifications - before[b] for b, s in world.schemes.items()}
    assert done == {"a1": 1, "a": 1, "r": 1, "b": 1, "b1": 1, "b2": 1}


def test_subscriber_authorised_for_20_30_cannot_open_35_when_handed_it(world: World) -> None:
    young = world.sim.clients["young"].scheme
    pe = world.pub.protect_event(ev(35), now=NOW, rng=random.Random(3))
    with pytest.raises(InvalidToken):
        young.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=NOW)
    ok = world.pub.protect_event(ev(22), now=NOW, rng=random.Random(3))
    assert young.open_event(ok.event_id, ok.routing, ok.body, ok.meta, now=NOW)["age"] == 22
    # a broker swapping the body of one publication into another is caught by the subscriber
    with pytest.raises(InvalidToken):
        young.open_event(ok.event_id, ok.routing, pe.body, ok.meta, now=NOW)


def test_authority_policy_and_permits() -> None:
    a = authority()
    with pytest.raises(DropError) as exc:
        DefaultClient("young", a).protect_filter(Filter.parse('topic = "cardio"'), now=NOW)
    assert exc.value.reason is DropReason.UNAUTHORISED
    with pytest.raises(DropError):
        DefaultClient("young", a).protect_event(ev(25), now=NOW)  # not a publisher
    c = DefaultClient("any", a)
    pf = c.protect_filter(Filter.parse('topic = "cardio"'), now=NOW)
    p = AuthorityPermit.decode(pf.meta["pm"])
    p.verify(a.public_key)
    assert p.kind == "subscribe" and p.subject == "any" and p.key == c.verify_key.to_bytes()
    b = DefaultBroker(a.public_key)
    assert p.digest == filter_digest(b.decode_filter(pf.filter))
    assert p.not_before <= NOW < p.not_after and p.epoch == a.epoch_at(NOW)
    with pytest.raises(InvalidToken):
        p.verify(SigningKey.generate().public)
    for bad in (b"", b"\x91\x01", pf.meta["pm"] + b"x", b"\xc1"):
        with pytest.raises(ValidationError):
            AuthorityPermit.decode(bad)
    with pytest.raises(KeyError_):
        c.unsubscribe_meta(Filter.parse('topic = "onco"'), now=NOW)
    sk = SigningKey.generate()
    a.revoke(sk.public)
    with pytest.raises(DropError) as exc:
        DefaultClient("hospital", a, signing_key=sk).protect_event(ev(25), now=NOW)
    assert exc.value.reason is DropReason.REVOKED


def test_unsubscribe_stops_delivery_and_withdrawal_is_signed(world: World) -> None:
    sid = next(iter(world.sim.clients["young"].filters))
    world.sim.publish("hospital", ev(25, eid="before"), at=NOW + 1)
    world.sim.run()
    young = world.sim.clients["young"]
    from pubguard.wire.messages import Unsubscribe

    meta = young.scheme.unsubscribe_meta(Filter.parse(YOUNG), now=NOW + 2)
    world.sim._send_from_client(young, Unsubscribe(sid, DEFAULT, meta), NOW + 2)
    world.sim.run()
    world.sim.publish("hospital", ev(26, eid="after"), at=NOW + 3)
    world.sim.run()
    assert world.got("young") == [25] and world.got("any") == [25, 26]
    assert not world.sim.drops


def test_altering_the_batch_size_is_forged(world: World) -> None:
    """Review finding: ``mn`` travelled unsigned (16 -> 15 keeps leaf 5's path shape)."""
    from pubguard.wire.messages import Publish

    pes = world.pub.protect_events(
        [ev(21, eid=f"n{i}") for i in range(16)], now=NOW + 1, rng=random.Random(4)
    )
    drops = len(world.sim.drops)
    for mn in (15, 17):
        meta = {**pes[5].meta, "mn": mn}
        world.sim.send_raw(
            "hospital",
            "a1",
            Publish(pes[5].event_id, DEFAULT, pes[5].routing, pes[5].body, meta).to_wire(),
            at=NOW + 1,
        )
    world.sim.run()
    assert [r.drop.reason for r in world.sim.drops[drops:]] == [DropReason.FORGED] * 2


def test_a_batch_prepared_across_an_epoch_change_carries_each_records_own_permit(
    world: World,
) -> None:
    """The net client prepares each publication as it is published and signs the batch on the
    next loop iteration: records stamped in epoch e and signed in e+1 keep e's permit (the
    brokers check the permit's epoch against the record's; CI found one lost this way)."""
    from pubguard.wire.messages import Publish

    keys = world.auth.keys
    end = keys.origin + (keys.epoch_at(NOW) + 1) * keys.epoch_length
    rng = random.Random(4)
    prepared = [
        world.pub.prepare_event(ev(21 + i, eid=f"x{i}"), now=end - 0.01, rng=rng) for i in range(2)
    ]
    prepared.append(world.pub.prepare_event(ev(23, eid="x2"), now=end + 0.01, rng=rng))
    pes = world.pub.sign_prepared(prepared, now=end + 0.02, rng=rng)
    epochs = [AuthorityPermit.decode(pe.meta["pm"]).epoch for pe in pes]
    e = keys.epoch_at(NOW)
    assert epochs == [r.epoch for r, _ in prepared] == [e, e, e + 1]
    assert pes[0].meta["sig"] == pes[1].meta["sig"] != pes[2].meta["sig"]  # one root per epoch
    drops = len(world.sim.drops)
    for pe in pes:
        world.sim.send_raw(
            "hospital",
            "a1",
            Publish(pe.event_id, DEFAULT, pe.routing, pe.body, pe.meta).to_wire(),
            at=end + 0.03,
        )
    world.sim.run()
    assert world.sim.drops[drops:] == []
    # the epoch-e subscriptions open the epoch-e records (x2 waits for their renewal)
    assert world.got("any") == [21, 22]


def test_permit_lapsed_names_a_subscribe_or_publish_permit_past_its_epoch() -> None:
    """What ``pubguard.net.client.client`` withdraws from its resend queue after an outage: what the
    broker would refuse (and strike the link for). A publish permit lapses with its epoch; a
    client's subscribe permit ``max_delay`` later (its lease: the epoch's publications may
    still arrive, and a broker holds them for a client catching up), as the broker checks."""
    c = DefaultClient("young", authority())
    sub = c.protect_filter(Filter.parse(YOUNG), now=NOW)
    hosp = DefaultClient("hospital", authority())
    adv = hosp.protect_advertisement(Filter.parse('topic = "cardio"'), now=NOW)
    end = AuthorityPermit.decode(sub.meta["pm"]).not_after
    adv_end = AuthorityPermit.decode(adv.meta["pm"]).not_after
    assert end > NOW and adv_end > NOW
    for meta in (sub.meta, adv.meta):
        assert not c.permit_lapsed(meta, now=NOW)
    grace = c.max_delay
    assert grace > 0
    assert not c.permit_lapsed(sub.meta, now=end + grace)
    assert c.permit_lapsed(sub.meta, now=end + grace + 0.001)
    assert not hosp.permit_lapsed(adv.meta, now=adv_end)
    assert hosp.permit_lapsed(adv.meta, now=adv_end + 0.001)
    broker = DefaultBroker(authority().public_key)
    assert broker.window.max_delay == grace  # the client's judgement is the broker's
    p = broker.permit(sub.meta["pm"], end + 0.001)
    assert broker._valid(p, "subscribe", end + grace, grace) is None
    assert broker._valid(p, "subscribe", end + grace + 0.001, grace) is DropReason.UNAUTHORISED
    for bad in ({}, {"pm": "text"}, {"pm": b"\x00junk"}):
        assert not c.permit_lapsed(bad, now=end + 1)  # the broker says why
