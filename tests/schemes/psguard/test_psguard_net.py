"""The psguard profile on the broker network: wire forms, the two-stage token index (single and
batched AES evaluation) against the plaintext filter, end to end over broker cores in the
simulator (hospital scenario of psguard.txt §1), key-service authorisation and epochs."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.errors import DropError, DropReason, InvalidToken, KeyError_, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.overlay.tree import ary_tree
from pubguard.schemes import BrokerScheme, ClientScheme, LinearMatcher, SchemeRegistry
from pubguard.schemes.psguard.broker import PSGuardBroker, make_scheme
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import PSGuardKeyService
from pubguard.schemes.psguard.match import TokenMatcher
from pubguard.schemes.psguard.record import PROFILE as PSGUARD
from pubguard.schemes.psguard.record import Schema
from pubguard.schemes.psguard.wire import parse_filter, parse_routing, record_from_wire
from pubguard.sim.engine import Simulator
from tests.schemes.attack_tools import scan, tap

PATIENT = EventType(
    "patient",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec("record", "str", routable=False),
    ),
)
SCHEMA = Schema([PATIENT])
MASTER = bytes(range(32))
CANARY = "CANARY-psguard-net-7d3f"
NOW = 1_000.0


def service(**kw) -> PSGuardKeyService:
    return PSGuardKeyService(KDC(MASTER), SCHEMA, **kw)


def ev(age: int, topic: str = "cardio", secret: str = CANARY, eid: str | None = None) -> Event:
    return Event(
        {"topic": topic, "age": age, "record": secret},
        id=eid,
        type="patient",
        payload=secret.encode(),
    )


def rng(seed: int = 1) -> random.Random:
    return random.Random(seed)


@pytest.fixture(scope="module")
def world():
    svc = service(
        subscribers={
            "young": ['topic = "cardio" && age >= 20 && age <= 30'],
            "old": ['topic = "cardio" && age >= 31'],
            "any": ['topic = "cardio"', 'topic = "onco"'],
        }
    )
    psk = SigningKey.generate()
    pub = PSGuardClient("hospital", svc, signing_key=psk)
    return svc, psk, pub


def test_both_faces_conform(world):
    svc, psk, pub = world
    b = make_scheme({"hospital": psk.public})
    assert isinstance(b, BrokerScheme) and isinstance(pub, ClientScheme)
    assert SchemeRegistry([b]).get(PSGUARD) is b
    assert b.rewrites_outgoing is False


def test_round_trip_and_wire_shape(world):
    svc, psk, pub = world
    sub = PSGuardClient("young", svc)
    pf = sub.protect_filter(Filter.parse('topic = "cardio" && age >= 20 && age <= 30'), now=NOW)
    pe = pub.protect_event(ev(25), now=NOW, rng=rng())
    assert set(pe.routing) == {"m", "n", "t"} and set(pe.meta) == {"p", "ts", "e", "h", "s", "sig"}
    b = PSGuardBroker({"hospital": psk.public})
    assert b.broker_match(b.decode_filter(pf.filter), b.decode_event(pe.routing))
    got = sub.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=NOW)
    assert got["record"] == CANARY and got["age"] == 25 and got.payload == CANARY.encode()
    blob = repr(pf.filter).encode() + repr(pe.routing).encode() + repr(pe.meta).encode()
    assert CANARY.encode() not in blob and b"cardio" not in blob


def test_randomized_tokens_are_unlinkable_deterministic_are_not(world):
    svc, psk, pub = world
    a = pub.protect_event(ev(25), now=NOW, rng=rng(1)).routing
    b = pub.protect_event(ev(25), now=NOW, rng=rng(2)).routing
    assert a["n"] != b["n"] and not set(parse_routing(a).tags) & set(parse_routing(b).tags)
    det = PSGuardClient("hospital", svc, signing_key=psk, mode="deterministic")
    c = det.protect_event(ev(25), now=NOW, rng=rng(1)).routing
    d = det.protect_event(ev(25), now=NOW, rng=rng(2)).routing
    assert c["t"] == d["t"] and c["n"] == b""


@pytest.mark.parametrize(
    "routing",
    [
        {},
        {"m": "x", "n": b"", "t": b""},
        {"m": "r", "n": b"short", "t": b""},
        {"m": "d", "n": b"", "t": b"123"},
        {"m": "r", "n": bytes(16), "t": "x"},
        {"m": "d", "n": b"", "t": b"", "extra": 1},
    ],
)
def test_routing_decoding_is_strict(routing):
    with pytest.raises(ValidationError):
        parse_routing(routing)


@pytest.mark.parametrize(
    "wire",
    [
        {},
        {"g": "x"},
        {"g": [[]]},
        {"g": [[[]]]},
        {"g": [[[b"short"]]]},
        {"g": [[["str"]]]},
        {"g": [[[bytes(16)] * 1] * 5000]},
        {"g": [], "x": 1},
    ],
)
def test_filter_decoding_is_strict(wire):
    with pytest.raises(ValidationError):
        parse_filter(wire)


def test_record_from_wire_is_strict(world):
    svc, psk, pub = world
    pe = pub.protect_event(ev(25), now=NOW, rng=rng())
    for bad in (
        {**pe.meta, "p": ""},
        {**pe.meta, "e": -1},
        {**pe.meta, "ts": True},
        {k: v for k, v in pe.meta.items() if k != "sig"},
        {**pe.meta, "s": b"\x00"},
    ):
        with pytest.raises(ValidationError):
            record_from_wire(pe.event_id, pe.routing, pe.body, bad)


FILTERS = st.tuples(st.integers(0, 127), st.integers(0, 127), st.sampled_from(["cardio", "onco"]))


@settings(max_examples=25, deadline=None)
@given(
    fs=st.lists(FILTERS, min_size=1, max_size=6),
    ages=st.lists(
        st.tuples(st.integers(0, 127), st.sampled_from(["cardio", "onco", "derm"])),
        min_size=1,
        max_size=8,
    ),
    mode=st.sampled_from(["randomized", "deterministic"]),
)
def test_token_index_agrees_with_plaintext(fs, ages, mode):
    svc = service()
    sub = PSGuardClient("s", svc)
    pub = PSGuardClient("p", svc, signing_key=SigningKey.from_seed(bytes(32)), mode=mode)
    b = PSGuardBroker()
    m, lin = TokenMatcher(), LinearMatcher(b.broker_match)
    plain = {}
    for i, (lo, hi, topic) in enumerate(fs):
        f = Filter.parse(f'topic = "{topic}" && age >= {min(lo, hi)} && age <= {max(lo, hi)}')
        pf = b.decode_filter(sub.protect_filter(f, now=NOW).filter)
        m.add(i, pf)
        lin.add(i, pf)
        plain[i] = f
    m.remove(len(fs) - 1)  # removal keeps the index consistent
    lin.remove(len(fs) - 1)
    del plain[len(fs) - 1]
    r = rng(7)
    events = [ev(a, t, eid=f"e{j}") for j, (a, t) in enumerate(ages)]
    pes = [b.decode_event(pub.protect_event(e, now=NOW, rng=r).routing) for e in events]
    want = [{k for k, f in plain.items() if f.matches(e)} for e in events]
    assert [m.match(pe) for pe in pes] == want
    assert m.match_batch(pes) == want
    assert [lin.match(pe) for pe in pes] == want


def test_two_stage_evaluates_anchors_first(world):
    svc, psk, pub = world
    sub = PSGuardClient("s", service())
    m = TokenMatcher()
    b = PSGuardBroker()
    for i, lo in enumerate(range(0, 120, 10)):
        f = Filter.parse(f'topic = "onco" && age >= {lo} && age <= {lo + 9}')
        m.add(i, b.decode_filter(sub.protect_filter(f, now=NOW).filter))
    pe = b.decode_event(pub.protect_event(ev(25), now=NOW, rng=rng()).routing)
    assert m.match(pe) == set() and m.evaluations == 1  # one anchor: T(onco); cardio event
    pe2 = b.decode_event(pub.protect_event(ev(25, "onco"), now=NOW, rng=rng()).routing)
    assert m.match(pe2) == {2}


def test_covering_only_for_identical_token_sets(world):
    svc, psk, pub = world
    sub = PSGuardClient("young", svc)
    b = PSGuardBroker()
    f1 = b.decode_filter(
        sub.protect_filter(
            Filter.parse('topic = "cardio" && age >= 20 && age <= 30'), now=NOW
        ).filter
    )
    f2 = b.decode_filter(
        sub.protect_filter(
            Filter.parse('topic = "cardio" && age <= 30 && age >= 20'), now=NOW
        ).filter
    )
    f3 = b.decode_filter(
        sub.protect_filter(
            Filter.parse('topic = "cardio" && age >= 21 && age <= 30'), now=NOW
        ).filter
    )
    assert b.covers(f1, f2) and b.covers(f2, f1)
    assert not b.covers(f1, f3) and not b.covers(f3, f1)


def test_key_service_authorisation(world):
    svc, psk, pub = world
    young = PSGuardClient("young", svc)
    with pytest.raises(DropError) as exc:
        young.protect_filter(Filter.parse('topic = "cardio" && age >= 20'), now=NOW)
    assert exc.value.reason is DropReason.UNAUTHORISED
    with pytest.raises(DropError):
        PSGuardClient("stranger", svc).protect_filter(Filter.parse('topic = "cardio"'), now=NOW)
    scoped = service(publishers={"hospital": ["cardio"]})
    only = PSGuardClient("hospital", scoped, signing_key=psk)
    only.protect_event(ev(25), now=NOW, rng=rng())
    with pytest.raises(DropError):
        only.protect_event(ev(25, "onco"), now=NOW, rng=rng())
    with pytest.raises(DropError):
        PSGuardClient("rogue", scoped, signing_key=psk).protect_event(ev(25), now=NOW)
    with pytest.raises(KeyError_):
        PSGuardClient("nokey", svc).protect_event(ev(25), now=NOW)


def test_authorised_for_20_30_cannot_open_age_35_even_when_handed_it(world):
    svc, psk, pub = world
    young = PSGuardClient("young", svc, publisher_keys={"hospital": psk.public})
    young.protect_filter(Filter.parse('topic = "cardio" && age >= 20 && age <= 30'), now=NOW)
    pe = pub.protect_event(ev(35), now=NOW, rng=rng())
    with pytest.raises(InvalidToken):  # a malicious broker delivers it anyway
        young.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=NOW)
    ok = pub.protect_event(ev(30), now=NOW, rng=rng())
    assert young.open_event(ok.event_id, ok.routing, ok.body, ok.meta, now=NOW)["age"] == 30
    tampered = dict(ok.meta, h=ok.meta["h"][:-1] + bytes([ok.meta["h"][-1] ^ 1]))
    with pytest.raises(InvalidToken):
        young.open_event(ok.event_id, ok.routing, ok.body, tampered, now=NOW)


def test_epoch_change_locks_out_a_withdrawn_filter(world):
    _, psk, _ = world
    svc = service(epoch_length=100.0)
    pub = PSGuardClient("hospital", svc, signing_key=psk)
    stay, leave = PSGuardClient("stay", svc), PSGuardClient("leave", svc)
    f = Filter.parse('topic = "cardio" && age >= 20 && age <= 30')
    stay.protect_filter(f, now=NOW)
    leave.protect_filter(f, now=NOW)
    old = pub.protect_event(ev(25), now=NOW, rng=rng())
    assert leave.open_event(old.event_id, old.routing, old.body, old.meta, now=NOW)
    leave.unsubscribe_meta(f, now=NOW)
    later = NOW + 150.0  # the next epoch
    new = pub.protect_event(ev(25), now=later, rng=rng())
    assert new.meta["e"] == old.meta["e"] + 1
    assert stay.open_event(new.event_id, new.routing, new.body, new.meta, now=later)["age"] == 25
    with pytest.raises(InvalidToken):
        leave.open_event(new.event_id, new.routing, new.body, new.meta, now=later)
    svc.set_subscriber("stay", [])  # revoked at the KDC: no keys for the epoch after
    newer = pub.protect_event(ev(25), now=later + 100, rng=rng())
    with pytest.raises(InvalidToken):
        stay.open_event(newer.event_id, newer.routing, newer.body, newer.meta, now=later + 100)


def test_a_subscriber_renewed_ahead_still_opens_the_previous_epochs_late_events(world):
    """Renewed ahead (net/client/renewal.py), a subscriber holds the next epoch's keys while the
    current one runs; an event of the previous epoch that a restarted broker delivers late
    (its durable outbox) still opens. The chaos soak found it: only two epochs were held,
    the current and the next, so such events were lost as ``invalid token``."""
    _, psk, _ = world
    svc = service(epoch_length=100.0)
    pub = PSGuardClient("hospital", svc, signing_key=psk)
    sub = PSGuardClient("stay", svc, max_delay=50.0)  # a window shorter than an epoch
    f = Filter.parse('topic = "cardio"')
    sub.protect_filter(f, now=NOW)  # epoch 10: [1000, 1100)
    late = pub.protect_event(ev(25, eid="late"), now=NOW + 90, rng=rng())
    sub.protect_filter(f, now=NOW + 100.5)  # epoch 11, renewed ahead at NOW + 80
    sub.protect_filter(f, now=NOW + 200.5)  # epoch 12, renewed ahead at NOW + 180
    opened = sub.open_event(late.event_id, late.routing, late.body, late.meta, now=NOW + 185)
    assert opened.id == "late" and sorted(k[1] for k in sub._held) == [10, 11, 12]
    sub.protect_filter(f, now=NOW + 300.5)  # epoch 13: epoch 10's keys are gone
    with pytest.raises(InvalidToken):
        sub.open_event(late.event_id, late.routing, late.body, late.meta, now=NOW + 285)


def test_keys_are_kept_as_long_as_the_timestamp_window_lets_their_events_arrive(world):
    """With epochs shorter than the brokers' ``max_delay`` an event may arrive several
    epochs late (the soak: 3 s epochs, a 10 s window, a broker restarted). The subscriber
    keeps a filter's keys while events of their epoch can still arrive: two epochs before
    the newest, and as many more as ``max_delay`` spans."""
    _, psk, _ = world
    svc = service(epoch_length=100.0)
    pub = PSGuardClient("hospital", svc, signing_key=psk)
    sub = PSGuardClient("stay", svc, max_delay=250.0)  # events of epoch 10 until 1350
    f = Filter.parse('topic = "cardio"')
    late = pub.protect_event(ev(25, eid="late"), now=NOW + 90, rng=rng())
    for k in range(5):  # epochs 10..14, each renewed ahead
        sub.protect_filter(f, now=NOW + 0.5 + 100 * k)
    assert sorted(k[1] for k in sub._held) == [10, 11, 12, 13, 14]
    opened = sub.open_event(late.event_id, late.routing, late.body, late.meta, now=NOW + 340)
    assert opened.id == "late"
    sub.protect_filter(f, now=NOW + 500.5)  # epoch 15: 10 is more than the window ago
    assert sorted(k[1] for k in sub._held) == [11, 12, 13, 14, 15]
    with pytest.raises(InvalidToken):
        sub.open_event(late.event_id, late.routing, late.body, late.meta, now=NOW + 440)
    with pytest.raises(ValidationError):
        PSGuardClient("x", svc, max_delay=0)


def test_end_to_end_on_a_broker_tree(world):
    svc, psk, _ = world
    sim = Simulator(
        ary_tree(2, 2), lambda _b: [PSGuardBroker({"hospital": psk.public})], wire=True, seed=3
    )
    t = tap(sim)
    leaves = sim.topology.tree.leaves
    keys = {"hospital": psk.public}
    sim.add_client("hospital", leaves[0], PSGuardClient("hospital", svc, signing_key=psk))
    sim.add_client("young", leaves[1], PSGuardClient("young", svc, publisher_keys=keys))
    sim.add_client("old", leaves[2], PSGuardClient("old", svc, publisher_keys=keys))
    sim.add_client("any", leaves[3], PSGuardClient("any", svc, publisher_keys=keys))
    sim.subscribe("young", 'topic = "cardio" && age >= 20 && age <= 30', at=NOW)
    sim.subscribe("old", 'topic = "cardio" && age >= 31', at=NOW)
    sim.subscribe("any", 'topic = "cardio"', at=NOW)
    sim.run()
    ages = [19, 20, 25, 30, 31, 35, 99]
    for i, a in enumerate(ages):
        sim.publish("hospital", ev(a, eid=f"e{a}"), at=NOW + 1 + i)
    sim.run()
    got = {
        n: sorted(d.event["age"] for d in sim.clients[n].deliveries)
        for n in ("young", "old", "any")
    }
    assert got == {"young": [20, 25, 30], "old": [31, 35, 99], "any": ages}
    assert all(d.event["record"] == CANARY for d in sim.clients["any"].deliveries)
    assert scan(t, CANARY.encode()) == 0 and scan(t, b"cardio") == 0
    # forged (a key the brokers do not know under the hospital's name) and stale records
    rogue = PSGuardClient("hospital", svc, signing_key=SigningKey.generate())
    sim.add_client("rogue", leaves[0], rogue)
    sim.publish("rogue", ev(25, eid="forged"), at=NOW + 20)
    sim.publish("hospital", ev(25, eid="stale"), at=NOW + 20 + 301)
    sim.run()
    drops = [(d.broker, d.drop.reason, d.drop.message_id) for d in sim.drops]
    hosp = sim.clients["hospital"].scheme
    # drops name the opaque wire id, a keyed hash of the application's id
    assert (leaves[0], DropReason.FORGED, rogue.wire_id("forged")) in drops
    assert (leaves[0], DropReason.STALE, hosp.wire_id("stale")) not in drops  # fresh
    stale = sim.clients["hospital"].scheme.protect_event(ev(25, eid="old"), now=NOW, rng=rng())
    from pubguard.wire.messages import Publish

    raw = Publish(stale.event_id, PSGUARD, stale.routing, stale.body, stale.meta).to_wire()
    sim.send_raw("hospital", leaves[0], raw, at=NOW + 1000)
    sim.run()
    old = [d.drop.reason for d in sim.drops if d.drop.message_id == hosp.wire_id("old")]
    assert old == [DropReason.STALE]
    forged = rogue.wire_id("forged")
    assert len([d for d in sim.drops if d.drop.message_id == forged]) == 1  # first broker only
