"""The PSGuard profile end to end without Spark: for generated workloads of every shape and
both modes, the broker-side match equals the reference matcher, subscribers open exactly their
deliveries, unauthorised filters cannot open, and tampering is detected."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.matching.reference import ReferenceMatcher
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.psguard.authority import Authority
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import (
    MODES,
    Schema,
    broker_match,
    check_record,
    decode_secrets,
    encode_secrets,
)
from pubguard.sim.workloads import generate, load_workload

SHAPES = {
    "psguard": {"subscribers": 6, "events": 80, "topics_per_subscriber": 12},
    "eventguard": {"subscribers": 12, "events": 40, "topics": 16, "publishers": 4},
    "vcaps": {"filters": 120, "subscribers": 6, "events": 60},
}
SK = SigningKey.from_seed(b"p" * 32)
KEYS = {"p0": SK.public}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def workload(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp(request.param)
    generate(request.param, d, seed=7, **SHAPES[request.param])
    return load_workload(d)


@pytest.mark.parametrize("mode", MODES)
def test_match_and_open_equal_reference(workload, mode: str) -> None:  # type: ignore[no-untyped-def]
    kdc = KDC(b"k" * 32)
    schema = Schema(workload.types)
    pub = Publisher(kdc, schema, name="p0", signing_key=SK, mode=mode)
    auth = Authority(kdc, schema)
    filters = workload.filters
    pfs = {fid: auth.protect_filter(f) for fid, f in filters.items()}
    keys = {fid: auth.authorise(f) for fid, f in filters.items()}
    ref = ReferenceMatcher(filters)
    rng = random.Random(3)
    others = sorted(filters)
    total = 0
    for e in workload.events:
        rec = pub.protect(e, now_ms=1_000, rng=rng)
        assert check_record(rec, KEYS, now_ms=1_000) is None
        want = ref.match(e)
        got = {fid for fid, pf in pfs.items() if broker_match(pf, rec)}
        assert got == want  # exact: generated ranges sit on least-count boundaries
        for fid in got:
            assert keys[fid].open_matching(rec) == e
            total += 1
        for fid in rng.sample([f for f in others if f not in got], min(8, len(others) - len(got))):
            with pytest.raises(InvalidToken):
                keys[fid].open(rec)
    assert total > 0


def test_age_range_subscriber_cannot_open_out_of_range_event() -> None:
    """psguard.txt §1: authorised for 20-30 must not read age 35, even when handed it."""
    t = EventType(
        "cancerTrail",
        (
            AttributeSpec("topic", "str", True, kind="topic"),
            AttributeSpec("age", "int", True, 128, 1, kind="numeric"),
            AttributeSpec("patientRecord", "str", False),
        ),
    )
    kdc, schema = KDC(b"k" * 32), Schema([t])
    pub = Publisher(kdc, schema, name="p0", signing_key=SK, mode="randomized")
    auth = Authority(kdc, schema)
    f = Filter.parse('topic = "cancerTrail" && age >= 20 && age <= 30', id="f1")
    k = auth.authorise(f)
    ok = Event(
        {"topic": "cancerTrail", "age": 25, "patientRecord": "CANARY-25"}, id="e1", type=t.name
    )
    no = Event(
        {"topic": "cancerTrail", "age": 35, "patientRecord": "CANARY-35"}, id="e2", type=t.name
    )
    r_ok, r_no = (pub.protect(e, now_ms=0, rng=random.Random(1)) for e in (ok, no))
    assert k.open(r_ok)["patientRecord"] == "CANARY-25"
    assert broker_match(auth.protect_filter(f), r_ok) and not broker_match(
        auth.protect_filter(f), r_no
    )
    with pytest.raises(InvalidToken):
        k.open(r_no)
    for rec in (r_ok, r_no):  # brokers see neither the topic nor the secret
        blob = repr(rec).encode() + rec.hint + rec.payload + encode_secrets(rec.secrets)
        assert b"CANARY" not in blob and b"cancerTrail" not in blob


def test_tampering_and_staleness_are_detected() -> None:
    t = EventType("quote", (AttributeSpec("sym", "str", True), AttributeSpec("px", "int", False)))
    kdc, schema = KDC(b"k" * 32), Schema([t])
    pub = Publisher(kdc, schema, name="p0", signing_key=SK, mode="deterministic")
    rec = pub.protect(Event({"sym": "X", "px": 3}, id="e1", type="quote"), now_ms=10_000)
    assert check_record(rec, KEYS, now_ms=10_000) is None
    forged = dataclasses.replace(rec, payload=rec.payload[:-1] + bytes([rec.payload[-1] ^ 1]))
    assert check_record(forged, KEYS, now_ms=10_000) is DropReason.FORGED
    other = SigningKey.from_seed(b"q" * 32)
    assert check_record(rec, {"p0": other.public}, now_ms=10_000) is DropReason.FORGED
    assert check_record(rec, KEYS, now_ms=10_000 + 10**9) is DropReason.STALE
    k = Authority(kdc, schema).authorise(Filter.parse('sym = "X"', id="f"))
    with pytest.raises(InvalidToken):  # AEAD catches tampering the broker let through
        k.open(forged)
    assert decode_secrets(encode_secrets(rec.secrets)) == rec.secrets


def test_profile_mismatch_is_named(tmp_path: Path) -> None:
    t = EventType("quote", (AttributeSpec("sym", "str", True), AttributeSpec("px", "int", False)))
    auth = Authority(KDC(b"k" * 32), Schema([t]))
    with pytest.raises(ValidationError, match="secret attribute 'px'"):
        auth.protect_filter(Filter.parse("px > 3", id="f"))
    with pytest.raises(ValidationError, match="'sym' substring"):
        auth.protect_filter(Filter.parse('sym substring "a"', id="f"))


@pytest.mark.parametrize("mode", MODES)
def test_scheme_protocol_face(mode: str) -> None:
    from pubguard.schemes.base import BrokerScheme, CheckContext, ClientScheme, LinkInfo, LinkKind
    from pubguard.schemes.psguard.scheme import PSGuardScheme

    t = EventType(
        "cancerTrail",
        (
            AttributeSpec("topic", "str", True, kind="topic"),
            AttributeSpec("age", "int", True, 128, 1, kind="numeric"),
            AttributeSpec("patientRecord", "str", False),
        ),
    )
    kdc, schema = KDC(b"k" * 32), Schema([t])
    pub = PSGuardScheme(schema, kdc=kdc, publisher="p0", signing_key=SK, mode=mode)
    sub = PSGuardScheme(schema, kdc=kdc, mode=mode)
    broker = PSGuardScheme(schema, verify_keys=KEYS, mode=mode)
    assert isinstance(pub, ClientScheme) and isinstance(broker, BrokerScheme)
    pf = sub.protect_filter(Filter.parse('topic = "cancerTrail" && age > 20', id="f1"), now=0)
    e = Event({"topic": "cancerTrail", "age": 25, "patientRecord": "rec"}, id="e1", type=t.name)
    pe = pub.protect_event(e, now=5.0, rng=random.Random(2))
    m = broker.new_matcher()
    m.add("f1", broker.decode_filter(pf.filter))
    assert m.match(broker.decode_event(pe.routing)) == {"f1"}

    class Msg:
        event_id, routing, body, meta = pe.event_id, pe.routing, pe.body, pe.meta

    ctx = CheckContext(now=5.0, link=LinkInfo("l", LinkKind.CLIENT), broker_id="b")
    assert broker.broker_check(Msg(), ctx) is None
    Msg.body = pe.body[:-1] + bytes([pe.body[-1] ^ 1])
    assert broker.broker_check(Msg(), ctx) is DropReason.FORGED
    assert sub.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=5.0) == e
