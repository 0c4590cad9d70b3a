"""The broker's fast path computes what the record path computes:
``signed_from_wire`` gives ``record_from_wire(...).message()`` and refuses the same malformed
publications, for single-signed and batch-signed records with and without secrets."""

from __future__ import annotations

import random

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Event, EventType
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import PSGuardKeyService
from pubguard.schemes.psguard.record import Schema
from pubguard.schemes.psguard.wire import parse_routing, record_from_wire, signed_from_wire

PATIENT = EventType(
    "patient",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec("record", "str", routable=False),
        AttributeSpec("ward", "str", routable=False),
    ),
)


@pytest.fixture(scope="module")
def pes():
    svc = PSGuardKeyService(KDC(bytes(range(32))), Schema([PATIENT]))
    pub = PSGuardClient("h", svc, signing_key=SigningKey.from_seed(bytes(range(1, 33))))
    evs = [
        Event(
            {"topic": "t", "age": i, "record": "r" * i, "ward": "w"},
            id=f"e{i}",
            type="patient",
            payload=b"p" * i,
        )
        for i in range(6)
    ]
    rng = random.Random(1)
    return [pub.protect_event(evs[0], now=1.0, rng=rng)] + pub.protect_events(
        evs[1:], now=1.0, rng=rng
    )


def test_signed_bytes_equal_the_records(pes) -> None:
    for pe in pes:
        te = parse_routing(pe.routing)
        pub, ts, epoch, msg, sig = signed_from_wire(pe.event_id, te, pe.routing, pe.body, pe.meta)
        rec = record_from_wire(pe.event_id, pe.routing, pe.body, pe.meta)
        assert (pub, ts, epoch, msg, sig) == (
            rec.publisher,
            rec.ts,
            rec.epoch,
            rec.message(),
            rec.sig,
        )


BAD = {
    "publisher": {"p": ""},
    "epoch": {"e": -1},
    "ts": {"ts": "x"},
    "secrets": {"s": b"\x00\x00\x00\x09ab"},
    "hint": {"h": "text"},
    "sig": {"sig": 5},
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_the_same_malformed_publications_are_refused(pes, what) -> None:
    pe = pes[2]
    meta = {**pe.meta, **BAD[what]}
    with pytest.raises(ValidationError):
        record_from_wire(pe.event_id, pe.routing, pe.body, meta)
    with pytest.raises(ValidationError):
        signed_from_wire(pe.event_id, parse_routing(pe.routing), pe.routing, pe.body, meta)
    short = {k: v for k, v in pe.meta.items() if k != "h"}
    with pytest.raises(ValidationError):
        signed_from_wire(pe.event_id, parse_routing(pe.routing), pe.routing, pe.body, short)
