"""Each attack on the default profile is dropped at the first honest broker with its reason, and
a flooding broker's traffic reaches no honest broker beyond its neighbours. Real Ed25519 /
AES-GCM / AES-PRF tokens, broker cores driven by the simulator (tree of test_default)."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from pubguard.crypto import SigningKey
from pubguard.crypto.x509 import CertificateAuthority, Role
from pubguard.errors import DropReason
from pubguard.model import Filter
from pubguard.schemes.common.replay import ReplayState
from pubguard.schemes.default.broker import DEFAULT, AuthorityPermit, DefaultBroker
from pubguard.schemes.default.client import DefaultClient
from pubguard.store import Database
from pubguard.wire.messages import Publish, Subscribe, Unsubscribe
from tests.schemes.attack_tools import neighbours
from tests.schemes.default.test_default import NOW, YOUNG, World, authority
from tests.schemes.psguard.test_psguard_net import ev

#: every attack on both backends: the Python guard and the native one (pubguard._native)
pytestmark = pytest.mark.usefixtures("backend")


@pytest.fixture
def world() -> World:
    return World()


def inject(w: World, src: str, broker: str, pe: Any, at: float, **meta: Any) -> str:
    wire = Publish(pe.event_id, DEFAULT, pe.routing, pe.body, {**pe.meta, **meta}).to_wire()
    w.sim.send_raw(src, broker, wire, at=at)
    w.sim.run()
    return str(pe.event_id)


def attack(
    w: World, src: str, broker: str, pe: Any, at: float, **meta: Any
) -> list[tuple[str, DropReason]]:
    """Inject ``pe``; return where it was dropped, checking no other broker handled it."""
    h, d = len(w.tap.handled), len(w.sim.drops)
    eid = inject(w, src, broker, pe, at, **meta)
    handled = {b for b, _, m in w.tap.handled[h:] if m.get("event_id") == eid}
    drops = [(x.broker, x.drop.reason) for x in w.sim.drops[d:] if x.drop.message_id == eid]
    assert handled == {b for b, _ in drops}, (handled, drops)
    return drops


def fresh(w: World, age: int = 25, eid: str = "x", at: float = NOW + 1) -> Any:
    return w.pub.protect_event(ev(age, eid=eid), now=at, rng=random.Random(eid))


def test_forged_signature_and_forged_permit(world: World) -> None:
    mallory = DefaultClient("mallory", world.auth, signing_key=SigningKey.generate())
    stolen = fresh(world, eid="stolen")
    forged = dataclasses.replace(stolen, event_id="forged")  # re-signed by nobody
    assert attack(world, "hospital", "a1", forged, NOW + 1) == [("a1", DropReason.FORGED)]
    fake_auth = SigningKey.generate()
    p = AuthorityPermit.decode(stolen.meta["pm"])
    p = dataclasses.replace(p, key=mallory.verify_key.to_bytes(), signature=b"")
    p = dataclasses.replace(p, signature=fake_auth.sign(p.signed_bytes()))
    got = attack(world, "hospital", "a1", fresh(world, eid="fp"), NOW + 1, pm=p.encode())
    assert got == [("a1", DropReason.FORGED)]
    assert world.got("any") == []


def test_tampered_fields_are_forged(world: World) -> None:
    pe = fresh(world, eid="t0")
    flip = {"body": pe.body[:-1] + bytes([pe.body[-1] ^ 1])}
    cases = [
        dataclasses.replace(pe, event_id="t1", **flip),
        dataclasses.replace(pe, event_id="t2", routing={**pe.routing, "t": pe.routing["t"][::-1]}),
        dataclasses.replace(pe, event_id="t3", meta={**pe.meta, "ts": pe.meta["ts"] + 1}),
        dataclasses.replace(pe, event_id="t4", meta={**pe.meta, "q": pe.meta["q"] + 7}),
    ]
    for i, c in enumerate(cases, 1):
        # the event id is signed too: every copy of pe under another id is a tampering
        assert attack(world, "hospital", "a1", c, NOW + 1) == [("a1", DropReason.FORGED)], i
    # the original still passes (under its opaque wire id, a keyed hash of "t0")
    assert inject(world, "hospital", "a1", pe, NOW + 1) == world.pub.wire_id("t0")
    assert world.got("any") == [25]


def test_replay_within_window_is_a_duplicate_after_it_replayed() -> None:
    w = World(max_delay=600.0)  # a timestamp window wider than the core's 120 s de-dup window
    pe = fresh(w, eid="r0")
    inject(w, "hospital", "a1", pe, NOW + 1)
    inject(w, "hospital", "a1", fresh(w, eid="r1", at=NOW + 2), NOW + 2)
    assert attack(w, "hospital", "a1", pe, NOW + 3) == [("a1", DropReason.DUPLICATE)]
    assert attack(w, "hospital", "a1", pe, NOW + 300) == [("a1", DropReason.REPLAYED)]
    assert w.got("any") == [25, 25]


def test_replay_state_survives_a_broker_restart(tmp_path) -> None:
    db = Database(tmp_path / "replay.db")
    a = authority()
    b1 = DefaultBroker(a.public_key, db=db)
    pub = DefaultClient("hospital", a)
    pe = pub.protect_event(ev(25, eid="p"), now=NOW, rng=random.Random(1))
    msg = Publish(pe.event_id, DEFAULT, pe.routing, pe.body, pe.meta)
    from pubguard.broker import Broker
    from pubguard.schemes.base import LinkKind

    core = Broker("a1", [b1])
    core.add_link("c", LinkKind.CLIENT)
    core.handle(msg, "c", NOW)
    assert core.drops == {}
    db.close()
    restarted = Broker(
        "a1", [DefaultBroker(a.public_key, replay=ReplayState(Database(tmp_path / "replay.db")))]
    )
    restarted.add_link("c", LinkKind.CLIENT)
    restarted.handle(msg, "c", NOW + 5)  # the de-dup window died with the process
    assert dict(restarted.drops) == {DropReason.REPLAYED: 1}


def test_stale_publication(world: World) -> None:
    old = fresh(world, eid="old", at=NOW - 120)
    assert attack(world, "hospital", "a1", old, NOW + 1) == [("a1", DropReason.STALE)]


def test_unauthorised_publications_and_subscriptions(world: World) -> None:
    pe = fresh(world, eid="u0")
    no_permit = dataclasses.replace(pe, meta={k: v for k, v in pe.meta.items() if k != "pm"})
    assert attack(world, "hospital", "a1", no_permit, NOW + 1) == [("a1", DropReason.UNAUTHORISED)]
    young = world.sim.clients["young"].scheme
    sub_pm = young.protect_filter(Filter.parse(YOUNG), now=NOW).meta["pm"]
    got = attack(world, "hospital", "a1", fresh(world, eid="u2"), NOW + 1, pm=sub_pm)
    assert got == [("a1", DropReason.UNAUTHORISED)]
    later = NOW + world.auth.keys.epoch_length  # last epoch's permit, this epoch's record
    nxt = world.pub.protect_event(ev(25, eid="u3"), now=later, rng=random.Random(3))
    old_pm = fresh(world, eid="u4").meta["pm"]
    assert attack(world, "hospital", "a1", nxt, later, pm=old_pm) == [
        ("a1", DropReason.UNAUTHORISED)
    ]
    # a subscription without a permit, and one whose permit authorises other tokens
    pf = young.protect_filter(Filter.parse(YOUNG), now=NOW)
    other = young.protect_filter(
        Filter.parse('topic = "cardio" && age >= 21 && age <= 30'), now=NOW
    )
    c = world.sim.clients["young"]
    for sid, meta in (("n1", {}), ("n2", {"pm": other.meta["pm"]})):
        world.sim._send_from_client(c, Subscribe(sid, DEFAULT, pf.filter, meta), NOW + 1)
    world.sim.run()
    reasons = [
        (d.broker, d.drop.reason) for d in world.sim.drops if d.drop.message_id in ("n1", "n2")
    ]
    assert reasons == [("b1", DropReason.UNAUTHORISED)] * 2
    assert [e.reason for e in c.errors] == [DropReason.UNAUTHORISED] * 2


def test_revoked_publisher_key_and_certificate(world: World, tmp_path) -> None:
    for s in world.schemes.values():
        s.revoke(world.psk.public)
    assert attack(world, "hospital", "a1", fresh(world, eid="k"), NOW + 1) == [
        ("a1", DropReason.REVOKED)
    ]
    ca = CertificateAuthority.create("ca", tmp_path, passphrase=b"pw", now=NOW)
    cert, _ = ca.issue_signing_identity("hospital2", Role.CLIENT, now=NOW)
    crl = ca.revoke(cert, now=NOW)
    b = DefaultBroker(world.auth.public_key, ca_cert=ca.cert, crl=crl, now=NOW)
    w2 = DefaultClient("hospital", world.auth, cert_serial=cert.serial)
    pe = w2.protect_event(ev(25, eid="c"), now=NOW, rng=random.Random(1))
    from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind

    ctx = CheckContext(NOW, LinkInfo("c", LinkKind.CLIENT), "a1")
    msg = Publish(pe.event_id, DEFAULT, pe.routing, pe.body, pe.meta)
    assert b.broker_check(msg, ctx) is DropReason.REVOKED


def test_fake_unsubscribe_by_a_broker_is_refused(world: World) -> None:
    (link, fwd, _), *_ = [s for s in world.sim.brokers["b"].subscriptions() if s[0] == "b1"]
    up = [s for s in world.sim.brokers["r"].subscriptions() if s[0] == "b"]
    fake = Unsubscribe(up[0][1], DEFAULT, {"ts": int(NOW * 1000), "q": 0, "sig": bytes(64)})
    world.sim.send_raw("b", "r", fake.to_wire(), at=NOW + 1)
    world.sim.run()
    assert [(d.broker, d.drop.reason) for d in world.sim.drops] == [("r", DropReason.UNAUTHORISED)]
    assert len([s for s in world.sim.brokers["r"].subscriptions() if s[0] == "b"]) == len(up)
    world.sim.publish("hospital", ev(25, eid="still"), at=NOW + 2)
    world.sim.run()
    assert world.got("young") == [25] and link == "b1" and fwd


def test_flooding_broker_reaches_no_honest_broker_beyond_its_neighbours(world: World) -> None:
    """Broker 'a' turns malicious and floods its neighbours with forged, tampered and replayed
    publications (eventguard.txt Fig. 3): r and a1 drop every one, nothing reaches b, b1, b2."""
    genuine = fresh(world, eid="g")
    inject(world, "hospital", "a1", genuine, NOW + 1)
    start = len(world.tap.handled)
    for i in range(200):
        junk = dataclasses.replace(genuine, event_id=f"flood{i}")
        for dst in ("r", "a1"):
            world.sim.send_raw(
                "a",
                dst,
                Publish(junk.event_id, DEFAULT, junk.routing, junk.body, junk.meta).to_wire(),
                at=NOW + 2,
            )
        world.sim.send_raw(
            "a",
            "r",
            Publish(
                genuine.event_id, DEFAULT, genuine.routing, genuine.body, genuine.meta
            ).to_wire(),
            at=NOW + 2,
        )
    world.sim.run()
    seen = {
        b for b, _, m in world.tap.handled[start:] if str(m.get("event_id", "")).startswith("flood")
    }
    assert seen == neighbours(world.sim, "a") == {"r", "a1"}
    reasons = {d.drop.reason for d in world.sim.drops if d.broker in ("r", "a1")}
    assert reasons == {DropReason.FORGED, DropReason.FLOOD, DropReason.DUPLICATE}
    # after the strikes the link is refused without a signature check
    assert world.schemes["r"].roots.verifications <= 40
    assert world.got("any") == [25]
