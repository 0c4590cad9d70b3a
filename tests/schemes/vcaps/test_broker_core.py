"""The v-CAPS profiles on the real broker core (driven by the simulator, every message through
the wire codec): deliveries per subscription equal the reference matcher's, through
subscribe, publish and unsubscribe; bad tokens are dropped with a reason at the first broker;
no filter value crosses a link."""

from __future__ import annotations

from random import Random

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropReason
from pubguard.model.events import Event
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.vcaps import FAST, RV, SRV, VcapsBroker, VcapsClient
from pubguard.sim.engine import Simulator
from pubguard.sim.workloads import vcaps_events, vcaps_filters
from pubguard.wire.messages import Publish, Subscribe
from tests.schemes.attack_tools import scan, tap
from tests.schemes.vcaps.helpers import SEED, publisher

TREE = [("b0", "b1"), ("b0", "b2"), ("b1", "b3"), ("b1", "b4"), ("b2", "b5"), ("b2", "b6")]
LEAVES = ("b3", "b4", "b5", "b6")
CANARY_VALUE = 987_654_321  # a filter value that must never cross a link


def build(profile: str, seed: int = 3) -> tuple[Simulator, dict[str, list[tuple[str, object]]]]:
    pub = publisher(profile, seed=seed)
    vk = {"P": SigningKey.from_seed(SEED).public}
    sim = Simulator(
        tree_from_edges(TREE), lambda b: [VcapsBroker(profile, vk), PlainScheme()], wire=True
    )
    sim.add_client("P", "b0", VcapsClient("P", pub.keys, publisher=pub))
    rng = Random(seed)
    filters = vcaps_filters(30, rng)
    subs: dict[str, list[tuple[str, object]]] = {}
    for i in range(8):
        s = f"s{i}"
        sim.add_client(s, LEAVES[i % 4], VcapsClient(s, pub.keys, registrar=pub))
        for flt in rng.sample(filters, rng.randint(1, 6)):
            subs.setdefault(s, []).append((sim.subscribe(s, flt), flt))
    sim.run()
    return sim, subs


def deliveries(sim: Simulator) -> set[tuple[str, str, str]]:
    return {
        (c, d.event_id, sid)
        for c, cl in sim.clients.items()
        for d in cl.deliveries
        for sid in d.sub_ids
    }


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
def test_deliveries_equal_reference_through_the_core(profile: str) -> None:
    sim, subs = build(profile)
    events = vcaps_events(20, Random(7))
    for e in events:
        sim.publish("P", e)
    gone = subs["s0"].pop()
    sim.unsubscribe("s0", gone[0])
    sim.run()
    later = vcaps_events(20, Random(8), start=100)
    for e in later:
        sim.publish("P", e)
    sim.run()
    want = {
        (s, e.id, sid)
        for s, ss in subs.items()
        for sid, flt in [*ss, *([gone] if s == "s0" else [])]
        for e in events
        if flt.matches(e)  # type: ignore[attr-defined]
    } | {
        (s, e.id, sid)
        for s, ss in subs.items()
        for sid, flt in ss
        for e in later
        if flt.matches(e)  # type: ignore[attr-defined]
    }
    assert want and deliveries(sim) == want
    assert not sim.drops
    for cl in sim.clients.values():  # decrypted: the plaintext event came through
        for d in cl.deliveries:
            assert dict(d.event.attrs) == dict(
                next(e for e in events + later if e.id == d.event_id).attrs
            )


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
def test_bad_tokens_are_dropped_at_the_first_broker(profile: str) -> None:
    sim, _ = build(profile)
    pub = sim.clients["s1"].scheme.registrar
    t = tap(sim)
    good = pub.register(vcaps_filters(31, Random(3))[30], subscriber="s1")
    forged = {**good, "sig": bytes(64)}
    stranger = {**good, "pub": "Q"}
    sim.send_raw("s1", "b4", Subscribe("x1", profile, forged, {}).to_wire())
    sim.send_raw("s1", "b4", Subscribe("x2", profile, stranger, {}).to_wire())
    e = Event({"a0": 1})
    pe = pub.publish(e, now=0.0)
    routing = dict(pe.routing)
    key = next(k for k in routing if k != "pub" and k != "n")
    routing[key] = [*routing[key], bytes(16)]  # one more ID / cipher ID / codeword
    sim.send_raw("P", "b0", Publish("t1", profile, routing, pe.body, pe.meta).to_wire())
    sim.run()
    got = {(d.broker, d.drop.reason, d.drop.message_id) for d in sim.drops}
    assert got == {
        ("b4", DropReason.FORGED, "x1"),
        ("b4", DropReason.UNAUTHORISED, "x2"),
        ("b0", DropReason.FORGED, "t1"),
    }
    assert scan(t, str(CANARY_VALUE).encode()) == 0


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
def test_no_filter_value_crosses_a_link(profile: str) -> None:
    sim, _ = build(profile)
    t = tap(sim)
    from pubguard.model.filters import Filter

    sim.subscribe("s2", Filter.parse(f"a1 = {CANARY_VALUE}"))
    sim.run()
    sim.publish("P", Event({"a1": CANARY_VALUE}, id="canary"))
    sim.run()
    assert "canary" in sim.clients["s2"].received_ids()
    assert scan(t, str(CANARY_VALUE).encode()) == 0
    assert scan(t, CANARY_VALUE.to_bytes(4, "big")) == 0
