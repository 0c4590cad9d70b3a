"""Each attack on the eventguard profile is dropped at the first honest broker with its reason
(eventguard.txt §2.2, §4.2-4.7), and a flooding broker's traffic goes no further than its
neighbours (Fig. 3). Real Ed25519 / AES-GCM, broker cores driven by the simulator."""

from __future__ import annotations

from collections import Counter

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropReason
from pubguard.model import Event, Filter
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes.common.merkle import merkle_root, signed_root
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.schemes.eventguard.wire import (
    EVENTGUARD,
    ROOT_TAG,
    leaf_digest,
    pack_tokens,
    parse_publication,
)
from pubguard.sim.engine import Simulator
from pubguard.wire.messages import Subscribe, Unsubscribe
from tests.schemes.attack_tools import neighbours, tap
from tests.schemes.eventguard.test_eventguard import TOPIC, _publish_wire, make_ms

#: every attack on both backends: the Python guard and the native one (pubguard._native)
pytestmark = pytest.mark.usefixtures("backend")

OTHER = "hospital/cardiology"
F = Filter.parse(f'topic = "{TOPIC}"')


class World:
    """r -> (a, b); a -> a1; b -> b1. Publisher at a1, subscriber at b1, attacker at a1."""

    def __init__(self, **opts) -> None:
        self.ms = make_ms()
        tree = tree_from_edges([("r", "a"), ("r", "b"), ("a", "a1"), ("b", "b1")])
        opts.setdefault("max_delay", 60.0)
        self.sim = Simulator(
            tree, lambda _b: [EventGuardBroker(self.ms.public_key, **opts)], wire=True, seed=5
        )
        self.tap = tap(self.sim)
        self.psk = SigningKey.generate()
        self.pub = self._client("pub", "a1", self.psk)
        self.sub = self._client("sub", "b1")
        self.mallory = self._client("mallory", "a1", SigningKey.generate())
        self.sim.advertise("pub", F, at=0.0)
        self.sim.advertise("mallory", f'topic = "{OTHER}"', at=0.0)
        self.sub_id = self.sim.subscribe("sub", F, at=0.0)
        self.sim.run()
        assert not self.sim.drops

    def _client(self, name, broker, sk=None):
        return self.sim.add_client(name, broker, EventGuardClient(name, self.ms, signing_key=sk))

    def protect(self, t: float, **attrs):
        return self.pub.scheme.protect_event(Event({"topic": TOPIC, **attrs}), now=t)

    def inject(self, src: str, broker: str, wire: dict, at: float) -> list:
        mark = len(self.tap.handled)
        self.sim.send_raw(src, broker, wire, at=at)
        self.sim.run()
        return self.tap.handled[mark:]

    def only_at(self, handled: list, broker: str, reason: DropReason) -> None:
        """The message reached ``broker`` only, and was dropped there with ``reason``."""
        assert {b for b, _, _ in handled} == {broker}
        assert [r.drop.reason for r in self.sim.drops][-1] is reason
        assert self.sim.drops[-1].broker == broker


def test_legitimate_publication_reaches_the_subscriber():
    w = World()
    w.sim.publish("pub", Event({"topic": TOPIC, "x": 1}), at=1.0)
    w.sim.run()
    assert [d.event["x"] for d in w.sub.deliveries] == [1]


def test_forged_signature_is_dropped_at_the_first_broker_with_an_error_to_the_client():
    w = World()
    pe = w.protect(1.0)
    wire = _publish_wire(pe)
    wire["meta"]["sig"] = SigningKey.generate().sign(b"anything")
    w.only_at(w.inject("mallory", "a1", wire, 1.0), "a1", DropReason.FORGED)
    assert w.mallory.errors[-1].reason is DropReason.FORGED
    assert w.sub.deliveries == []


def test_tampered_fields_are_forged():
    w = World()
    for i, tamper in enumerate(("body", "ts", "wk", "event_id", "p")):
        wire = _publish_wire(w.protect(1.0 + i, n=i))
        if tamper == "body":
            wire["body"] = bytes([wire["body"][0] ^ 1]) + wire["body"][1:]
        elif tamper == "ts":
            wire["meta"]["ts"] += 0.5
        elif tamper == "wk":
            wire["meta"]["wk"] = wire["meta"]["wk"][:-1] + bytes([wire["meta"]["wk"][-1] ^ 1])
        elif tamper == "event_id":
            wire["event_id"] = "renamed-" + wire["event_id"]  # a replay under a fresh id
        else:
            wire["meta"]["p"] = "mallory"  # claims another publisher: permit subject differs
        want = DropReason.UNAUTHORISED if tamper == "p" else DropReason.FORGED
        w.only_at(w.inject("mallory", "a1", wire, 1.0 + i), "a1", want)
    assert w.sub.deliveries == []


def test_replayed_publication_is_a_duplicate_at_the_first_broker():
    w = World()
    pe = w.protect(1.0)
    w.inject("pub", "a1", _publish_wire(pe), 1.0)
    assert len(w.sub.deliveries) == 1
    # a captured copy re-injected by a malicious broker neighbour (a1's parent a) and by a client
    w.only_at(w.inject("a", "a1", _publish_wire(pe), 5.0), "a1", DropReason.DUPLICATE)
    w.only_at(w.inject("mallory", "a1", _publish_wire(pe), 6.0), "a1", DropReason.DUPLICATE)
    assert len(w.sub.deliveries) == 1


def test_stale_publication_is_dropped():
    w = World()
    pe = w.protect(1.0)  # signed at t=1, held back and injected at t=100 > max_delay
    w.only_at(w.inject("mallory", "a1", _publish_wire(pe), 100.0), "a1", DropReason.STALE)
    future = w.protect(500.0)  # timestamps too far in the future are stale as well
    w.only_at(w.inject("pub", "a1", _publish_wire(future), 101.0), "a1", DropReason.STALE)


def _resign(w: World, wire: dict, sk: SigningKey) -> dict:
    m = wire["meta"]
    f = parse_publication(wire["routing"], m)
    leaf = leaf_digest(
        wire["event_id"], EVENTGUARD, m["p"], m["e"], m["ts"], f.tokens, f.wrapped, wire["body"]
    )
    m["sig"] = sk.sign(signed_root(ROOT_TAG, merkle_root([leaf]), 1))
    return wire


def test_unauthorised_publisher_is_refused():
    w = World()
    # mallory holds a genuine advertisement permit, but for OTHER, and signs correctly
    wire = _publish_wire(w.mallory.scheme.protect_event(Event({"topic": OTHER}), now=1.0))
    wire["routing"] = {"tokens": pack_tokens([w.ms.topic_token(TOPIC)])}
    _resign(w, wire, w.mallory.scheme._sk)
    w.only_at(w.inject("mallory", "a1", wire, 1.0), "a1", DropReason.UNAUTHORISED)
    # pub's own permit, but signed with mallory's key (pk(P) in the permit differs)
    wire = _resign(w, _publish_wire(w.protect(2.0)), w.mallory.scheme._sk)
    w.only_at(w.inject("mallory", "a1", wire, 2.0), "a1", DropReason.FORGED)
    # a permit from a rogue MS
    rogue = EventGuardClient("pub", make_ms(seed=99), signing_key=w.psk)
    rogue.protect_advertisement(F, now=3.0)
    wire = _publish_wire(rogue.protect_event(Event({"topic": TOPIC}), now=3.0))
    w.only_at(w.inject("mallory", "a1", wire, 3.0), "a1", DropReason.FORGED)
    assert w.sub.deliveries == []


def test_revoked_publisher_is_refused():
    w = World()
    for b in w.sim.brokers.values():
        b.schemes.get(EVENTGUARD).revoke(w.psk.public)
    w.only_at(w.inject("pub", "a1", _publish_wire(w.protect(1.0)), 1.0), "a1", DropReason.REVOKED)
    assert w.pub.errors[-1].reason is DropReason.REVOKED


def test_unauthorised_subscriber_is_refused():
    w = World()
    eve = w._client("eve", "b1")
    # a genuine permit for OTHER used to subscribe to TOPIC's token
    pf = eve.scheme.protect_filter(Filter.parse(f'topic = "{OTHER}"'), now=1.0)
    wire = Subscribe("e1", EVENTGUARD, {"token": w.ms.topic_token(TOPIC)}, pf.meta).to_wire()
    w.only_at(w.inject("eve", "b1", wire, 1.0), "b1", DropReason.UNAUTHORISED)
    # a permit from a rogue MS
    pf = EventGuardClient("eve", make_ms(seed=98)).protect_filter(F, now=2.0)
    wire = Subscribe("e2", EVENTGUARD, pf.filter, pf.meta).to_wire()
    w.only_at(w.inject("eve", "b1", wire, 2.0), "b1", DropReason.FORGED)
    # no permit at all
    wire = Subscribe("e3", EVENTGUARD, pf.filter, {}).to_wire()
    w.only_at(w.inject("eve", "b1", wire, 3.0), "b1", DropReason.UNAUTHORISED)
    # the subscriber's own permit, captured and replayed under another subscription: a flood
    sub_msg = next(m for b, _, m in w.tap.handled if b == "b1" and m["op"] == "subscribe")
    wire = {**sub_msg, "sub_id": "stolen"}
    w.only_at(w.inject("eve", "b1", wire, 4.0), "b1", DropReason.DUPLICATE)
    assert w.sim.brokers["b1"].status()["subscriptions"] == 1


def test_fake_unsubscribe_is_refused_and_the_subscription_survives():
    w = World()
    other = w._client("other", "b1")
    other_sid = w.sim.subscribe("other", F, at=1.0)
    w.sim.run()
    valid_for_other = other.scheme.unsubscribe_meta(F, now=2.0)
    rogue_meta = EventGuardClient("sub", make_ms(seed=97))
    rogue_meta.protect_filter(F, now=2.0)
    attempts = [
        ({}, DropReason.UNAUTHORISED),  # no usb permit
        (valid_for_other, DropReason.UNAUTHORISED),  # a genuine usb(w) for another sbId
        (rogue_meta.unsubscribe_meta(F, now=2.0), DropReason.FORGED),  # not the MS's signature
    ]
    for i, (meta, reason) in enumerate(attempts):
        wire = Unsubscribe(w.sub_id, EVENTGUARD, meta).to_wire()
        w.only_at(w.inject("sub", "b1", wire, 2.0 + i), "b1", reason)
    # a malicious broker (b1's parent b) cannot cancel b1's subscriptions either: ids are per link
    fwd_id = next(m["sub_id"] for b, _, m in w.tap.handled if b == "b" and m["op"] == "subscribe")
    w.inject("b", "b1", Unsubscribe(fwd_id, EVENTGUARD, {}).to_wire(), 6.0)
    w.sim.publish("pub", Event({"topic": TOPIC, "x": 7}), at=7.0)
    w.sim.run()
    assert [d.event["x"] for d in w.sub.deliveries] == [7]
    assert w.sim.brokers["b1"].status()["subscriptions"] == 2
    # the genuine unsubscribe of "other" still works, once
    wire = Unsubscribe(other_sid, EVENTGUARD, valid_for_other).to_wire()
    w.inject("other", "b1", wire, 8.0)
    assert w.sim.brokers["b1"].status()["subscriptions"] == 1


def test_flooding_broker_is_contained_by_its_neighbours():
    """Fig. 3: malicious B1 floods all its neighbours; nothing passes them."""
    ms = make_ms()
    edges = [
        ("G1", "B1"),
        ("G1", "G2"),
        ("B1", "G3"),
        ("B1", "G4"),
        ("G2", "X1"),
        ("G3", "X2"),
        ("G4", "X3"),
    ]
    sim = Simulator(
        tree_from_edges(edges),
        lambda _b: [EventGuardBroker(ms.public_key, max_delay=60.0, strikes=10)],
        wire=True,
        seed=9,
    )
    t = tap(sim)
    sim.add_client("pub", "X1", EventGuardClient("pub", ms))
    subs = {
        n: sim.add_client(n, b, EventGuardClient(n, ms))
        for n, b in (("s2", "X2"), ("s3", "X3"), ("s0", "G2"))
    }
    sim.advertise("pub", F, at=0.0)
    for n in subs:
        sim.subscribe(n, F, at=0.0)
    sim.run()
    sim.publish("pub", Event({"topic": TOPIC, "n": 0}), at=1.0)
    sim.run()
    assert all(len(c.deliveries) == 1 for c in subs.values())
    legit = next(m for b, _, m in t.handled if b == "B1" and m["op"] == "publish")
    nbrs = neighbours(sim, "B1")
    assert nbrs == {"G1", "G3", "G4"}
    mark, drops_mark = len(t.handled), len(sim.drops)
    sent_before = {b: br.counters["sent"] for b, br in sim.brokers.items()}
    flood = 0
    for k in range(40):
        for g in sorted(nbrs):
            variants = [dict(legit)]  # verbatim duplicates
            forged = {**legit, "event_id": f"flood-{k}-{g}"}  # fresh ids, signature no longer fits
            variants.append(forged)
            junk = {**legit, "event_id": f"junk-{k}-{g}", "meta": {**legit["meta"], "ts": 9.0}}
            variants.append(junk)
            for v in variants:
                sim.send_raw("B1", g, v, at=2.0 + k * 0.01)
                flood += 1
    sim.run()
    after = t.handled[mark:]
    assert {b for b, _, _ in after} == nbrs  # no message reached a non-neighbour
    assert all(src == "B1" for _, src, _ in after)
    new_drops = sim.drops[drops_mark:]
    assert len(new_drops) == flood and {r.broker for r in new_drops} == nbrs
    reasons = Counter(r.drop.reason for r in new_drops)
    assert set(reasons) <= {DropReason.DUPLICATE, DropReason.FORGED, DropReason.FLOOD}
    assert reasons[DropReason.FLOOD] > 0  # B1 struck out: later messages cost no signature check
    # the neighbours sent nothing because of the flood, and honest traffic still flows
    assert all(sim.brokers[b].counters["sent"] == sent_before[b] for b in sim.brokers)
    sim.publish("pub", Event({"topic": TOPIC, "n": 1}), at=3.0)
    sim.run()
    assert len(subs["s0"].deliveries) == 2  # via G1 -> G2, not through B1
