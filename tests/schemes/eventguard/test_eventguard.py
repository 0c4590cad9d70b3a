"""The eventguard profile end to end in the simulator: routing by token, confidentiality
(canary), amortised signing, unsubscribe guard, per-epoch rekeying (eventguard.txt §4)."""

from __future__ import annotations

import random

import pytest

from pubguard.crypto import SecretBytes
from pubguard.errors import DropReason, InvalidToken, StateError, ValidationError
from pubguard.keys.ms import MetaService, decode_permit
from pubguard.model import Event, Filter
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes import SchemeRegistry
from pubguard.schemes.eventguard.broker import EventGuardBroker, make_scheme
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.schemes.eventguard.wire import EVENTGUARD
from pubguard.sim.engine import Simulator
from pubguard.wire.messages import Unsubscribe
from tests.schemes.attack_tools import scan, tap

EPOCH = 1000.0
CANARY = "CANARY-7f3a9c-patient-record"
TOPIC = "hospital/oncology"


def make_ms(seed: int = 1) -> MetaService:
    return MetaService(SecretBytes(random.Random(seed).randbytes(32)), epoch_length=EPOCH)


def make_sim(ms: MetaService, *, wire: bool = True, **opts):
    tree = tree_from_edges([("r", "a"), ("r", "b"), ("a", "a1"), ("b", "b1")])
    sim = Simulator(tree, lambda _b: [EventGuardBroker(ms.public_key, **opts)], wire=wire, seed=3)
    return sim, tap(sim)


def clients(sim, ms, **where):
    return {n: sim.add_client(n, b, EventGuardClient(n, ms)) for n, b in where.items()}


def test_registry_and_scheme_surface():
    ms = make_ms()
    s = make_scheme(ms.public_key, max_delay=30.0)
    reg = SchemeRegistry([s])
    assert reg.get(EVENTGUARD) is s and s.window.max_delay == 30.0
    with pytest.raises(ValidationError):
        EventGuardBroker(b"not a key")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        s.decode_filter({"topic": TOPIC})  # a plaintext topic is not an eventguard filter
    c = EventGuardClient("s", ms)
    with pytest.raises(ValidationError):
        c.protect_filter(Filter.parse("age > 3"), now=0)
    with pytest.raises(StateError):  # publishing needs an advertisement first (§4.3)
        c.protect_event(Event({"topic": TOPIC}), now=0)


def test_routes_by_token_and_hides_content_and_topic():
    ms = make_ms()
    sim, t = make_sim(ms)
    cs = clients(sim, ms, pub="a1", s1="b1", s2="a", other="b")
    sim.advertise("pub", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("s1", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("s2", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("other", 'topic = "hospital/cardiology"', at=0.0)
    sim.run()
    ev = Event({"topic": TOPIC, "age": 34, "record": CANARY}, payload=CANARY.encode())
    eid = sim.publish("pub", ev, at=1.0)
    sim.run()
    for name in ("s1", "s2"):
        (d,) = cs[name].deliveries
        assert d.event_id == eid and d.event["record"] == CANARY and d.event["age"] == 34
        assert d.event["topic"] == TOPIC and d.event.payload == CANARY.encode()
    assert cs["other"].deliveries == []
    assert not sim.drops
    # no broker-visible message carries the canary or the topic name: tokens and ciphertext only
    assert t.handled and scan(t, CANARY.encode()) == 0 and scan(t, TOPIC.encode()) == 0


def test_amortised_signing_one_verification_per_batch_per_broker():
    ms = make_ms()
    sim, _ = make_sim(ms)
    cs = clients(sim, ms, pub="a1", s1="b1")
    sim.advertise("pub", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("s1", f'topic = "{TOPIC}"', at=0.0)
    sim.run()
    pub = cs["pub"].scheme
    batch = pub.protect_events([Event({"topic": TOPIC, "i": i}) for i in range(16)], now=1.0)
    assert len({pe.meta["sig"] for pe in batch}) == 1 and batch[5].meta["mn"] == 16
    for pe in batch:
        sim.send_raw("pub", "a1", _publish_wire(pe), at=1.0)
    sim.run()
    assert sorted(d.event["i"] for d in cs["s1"].deliveries) == list(range(16))
    # the path a1 -> a -> r -> b -> b1: each broker checked the root signature exactly once
    for b in ("a1", "a", "r", "b", "b1"):
        scheme = sim.brokers[b].schemes.get(EVENTGUARD)
        assert scheme.roots.verifications == 1, b
    # a batch member with another member's path is forged
    bad = dict(_publish_wire(batch[0]))
    bad["meta"] = {**bad["meta"], "mp": batch[1].meta["mp"], "mi": 1}
    bad["event_id"] = "other-id"
    sim.send_raw("pub", "a1", bad, at=2.0)
    sim.run()
    assert [r.drop.reason for r in sim.drops] == [DropReason.FORGED]


def _publish_wire(pe, profile: str = EVENTGUARD) -> dict:
    w = {"op": "publish", "event_id": pe.event_id, "profile": profile, "routing": pe.routing}
    w["body"], w["meta"] = pe.body, dict(pe.meta)
    return w


def test_unsubscribe_with_ms_permit_removes_the_subscription_everywhere():
    ms = make_ms()
    sim, _ = make_sim(ms)
    cs = clients(sim, ms, pub="a1", s1="b1")
    f = Filter.parse(f'topic = "{TOPIC}"')
    sim.advertise("pub", f, at=0.0)
    sid = sim.subscribe("s1", f, at=0.0)
    sim.run()
    meta = cs["s1"].scheme.unsubscribe_meta(f, now=1.0)
    sim.send_raw("s1", "b1", Unsubscribe(sid, EVENTGUARD, meta).to_wire(), at=1.0)
    sim.run()
    assert not sim.drops and cs["s1"].acks[-1].of == "unsubscribe"
    for b in sim.brokers.values():
        assert b.status()["subscriptions"] == 0
    sim.publish("pub", Event({"topic": TOPIC}), at=2.0)
    sim.run()
    assert cs["s1"].deliveries == []
    with pytest.raises(StateError):
        cs["s1"].scheme.unsubscribe_meta(f, now=3.0)


def test_epoch_change_locks_out_an_unsubscribed_subscriber():
    ms = make_ms()
    sim, t = make_sim(ms)
    cs = clients(sim, ms, pub="a1", stay="b1", leave="b")
    f = Filter.parse(f'topic = "{TOPIC}"')
    sim.advertise("pub", f, at=0.0)
    sim.subscribe("stay", f, at=0.0)
    sid = sim.subscribe("leave", f, at=0.0)
    sim.run()
    sim.publish("pub", Event({"topic": TOPIC, "n": 0}), at=10.0)
    sim.run()
    meta = cs["leave"].scheme.unsubscribe_meta(f, now=20.0)
    sim.send_raw("leave", "b", Unsubscribe(sid, EVENTGUARD, meta).to_wire(), at=20.0)
    sim.run()
    # the leaver can still read this epoch's traffic (§4.8: "till the end of epoch T") ...
    sim.publish("pub", Event({"topic": TOPIC, "n": 1}), at=30.0)
    sim.run()
    old = [w for _, _, w in t.handled if w.get("op") == "publish"][-1]
    leaver = cs["leave"].scheme
    assert (
        leaver.open_event(old["event_id"], old["routing"], old["body"], old["meta"], now=31.0)["n"]
        == 1
    )
    # ... but after the epoch change only renewed holders get K(w, e+1)
    cs["stay"].scheme.renew(now=EPOCH + 1)
    cs["pub"].scheme.renew(now=EPOCH + 1)
    sim.publish("pub", Event({"topic": TOPIC, "n": 2, "secret": CANARY}), at=EPOCH + 2)
    sim.run()
    assert [d.event["n"] for d in cs["stay"].deliveries] == [0, 1, 2]
    assert [d.event["n"] for d in cs["leave"].deliveries] == [0]
    new = [w for _, _, w in t.handled if w.get("op") == "publish"][-1]
    assert new["meta"]["e"] == 1
    with pytest.raises(InvalidToken):  # even handed the ciphertext by a malicious broker
        leaver.open_event(new["event_id"], new["routing"], new["body"], new["meta"], now=EPOCH + 3)


def test_publishing_with_an_expired_epoch_permit_renews_it():
    ms = make_ms()
    sim, _ = make_sim(ms)
    cs = clients(sim, ms, pub="a1", s="b1")
    sim.advertise("pub", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("s", f'topic = "{TOPIC}"', at=0.0)
    sim.run()
    cs["s"].scheme.renew(now=EPOCH + 1)
    sim.publish("pub", Event({"topic": TOPIC}), at=EPOCH + 5)  # publisher renews by itself
    sim.run()
    assert len(cs["s"].deliveries) == 1 and not sim.drops


def test_the_batch_size_is_signed():
    """Review finding: ``mn`` travelled unsigned. 16 -> 15 keeps leaf 5's path shape, so it
    used to recompute the same root; now each leaf commits to index and size: FORGED."""
    ms = make_ms()
    sim, _ = make_sim(ms)
    cs = clients(sim, ms, pub="a1", s1="b1")
    sim.advertise("pub", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("s1", f'topic = "{TOPIC}"', at=0.0)
    sim.run()
    batch = cs["pub"].scheme.protect_events(
        [Event({"topic": TOPIC, "i": i}) for i in range(16)], now=1.0
    )
    for mn in (15, 17):
        bad = _publish_wire(batch[5])
        bad["meta"] = {**bad["meta"], "mn": mn}
        sim.send_raw("pub", "a1", bad, at=1.0)
    sim.send_raw("pub", "a1", _publish_wire(batch[5]), at=1.0)  # the genuine one still passes
    sim.run()
    assert [r.drop.reason for r in sim.drops] == [DropReason.FORGED] * 2
    assert [d.event["i"] for d in cs["s1"].deliveries] == [5]


def test_permit_lapsed_names_a_subscribe_or_advertise_permit_past_its_epoch():
    """What ``pubguard.net.client.client`` withdraws from its resend queue after an outage: the
    broker would refuse it (``_usable``: no grace for a client) and strike the link."""
    ms = make_ms()
    c = EventGuardClient("s", ms)
    now = ms.epoch_end(ms.epoch_at(10.0)) - 1.0
    sub = c.protect_filter(Filter.parse(f'topic = "{TOPIC}"'), now=now)
    adv = c.protect_advertisement(Filter.parse(f'topic = "{TOPIC}"'), now=now)
    for meta in (sub.meta, adv.meta):
        end = decode_permit(meta["permit"]).expires_at
        assert not c.permit_lapsed(meta, now=end)
        assert c.permit_lapsed(meta, now=end + 0.001)
        broker = EventGuardBroker(ms.public_key)
        assert broker._usable(decode_permit(meta["permit"]), end + 0.001) is DropReason.UNAUTHORISED
    for bad in ({}, {"permit": "text"}, {"permit": b"\x00junk"}):
        assert not c.permit_lapsed(bad, now=now)  # the broker says why


def test_open_due_names_only_the_first_event_of_a_new_epoch():
    """``open_due`` is asked for every delivery with a remote MS: once every topic holds an
    epoch's key it answers that epoch's deliveries without parsing them, and the next
    epoch's first event is still due (its grant is renewed, §4.8)."""
    ms = make_ms()
    pub, sub = EventGuardClient("p", ms), EventGuardClient("s", ms)
    now = ms.epoch_end(ms.epoch_at(10.0)) - 1.0
    f = Filter.parse(f'topic = "{TOPIC}"')
    pub.protect_advertisement(f, now=now)
    sub.protect_filter(f, now=now)
    pe = pub.protect_event(Event({"topic": TOPIC, "x": 1}), now=now)
    assert not sub.open_due(pe.routing, pe.meta, now=now)
    assert sub._keyed_epoch == pe.meta["e"]  # the next ones skip the parse
    later = now + EPOCH
    nxt = pub.protect_event(Event({"topic": TOPIC, "x": 2}), now=later)
    assert nxt.meta["e"] == pe.meta["e"] + 1
    assert sub.open_due(nxt.routing, nxt.meta, now=later)
    assert sub.open_event(nxt.event_id, nxt.routing, nxt.body, nxt.meta, now=later)["x"] == 2
    assert not sub.open_due(nxt.routing, nxt.meta, now=later)  # renewed: nothing due
