"""The opaque wire id, the keyed secret-attribute labels and the sealed payload's inner codec
(``pubguard.schemes.common.wire_id``), and the records that use them."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.errors import InvalidToken, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.common.wire_id import (
    MAX_APP_ID_BYTES,
    WIRE_ID_HEX,
    WireIds,
    pack_inner,
    secret_labels,
    unpack_inner,
)
from pubguard.schemes.psguard import Authority, Publisher, Schema, decode_secrets, encode_secrets

KEY = SigningKey.from_seed(bytes(range(32)))
ids = st.text(min_size=1, max_size=40).filter(lambda s: 0 < len(s.encode()) <= MAX_APP_ID_BYTES)


@settings(max_examples=50)
@given(app_id=ids, payload=st.binary(max_size=64))
def test_inner_round_trips(app_id: str, payload: bytes) -> None:
    assert unpack_inner(pack_inner(app_id, payload)) == (app_id, payload)


@settings(max_examples=50)
@given(blob=st.binary(max_size=64))
def test_inner_decoder_refuses_or_round_trips(blob: bytes) -> None:
    try:
        app_id, payload = unpack_inner(blob)
    except ValidationError:
        return
    assert pack_inner(app_id, payload) == blob  # whatever it accepts is canonical


@settings(max_examples=50)
@given(app_id=ids)
def test_wire_id_is_opaque_stable_and_per_publisher(app_id: str) -> None:
    w = WireIds.for_key(KEY)(app_id)
    assert len(w) == WIRE_ID_HEX and int(w, 16) >= 0  # fixed length hex: says nothing
    assert WireIds.for_key(KEY)(app_id) == w  # every process holding the key agrees
    assert WireIds.for_key(SigningKey.from_seed(b"\x01" * 32))(app_id) != w
    assert repr(WireIds.for_key(KEY)) == "WireIds(<secret>)"


@settings(max_examples=50)
@given(names=st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=5), w=ids)
def test_labels_are_distinct_per_name_and_event(names: list[str], w: str) -> None:
    k = bytes(32)
    a = secret_labels(k, w, names)
    assert set(a) == set(names) and len(set(a.values())) == len(names)
    assert not set(a.values()) & set(names)
    b = secret_labels(k, w + "x", names)
    assert not set(a.values()) & set(b.values())  # per event: labels do not link events


WARD = EventType(
    "ward",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec("diagnosisCANARY", "str", routable=False),
        AttributeSpec("bedCANARY", "int", routable=False),
    ),
)


@settings(max_examples=25)  # a KDC derivation per example
@given(
    suffix=st.text(max_size=12),
    age=st.integers(0, 127),
    diag=st.text(max_size=20),
    bed=st.none() | st.integers(0, 99),
)
def test_a_record_carries_no_application_id_or_secret_name_and_opens_to_both(
    suffix: str, age: int, diag: str, bed: int | None
) -> None:
    app_id = "MRN-CANARY-" + suffix
    schema = Schema([WARD])
    kdc = KDC(bytes(32))
    pub = Publisher(kdc, schema, name="hosp", signing_key=KEY)
    attrs: dict[str, object] = {"topic": "icu", "age": age, "diagnosisCANARY": diag}
    if bed is not None:
        attrs["bedCANARY"] = bed
    ev = Event(attrs, id=app_id, type="ward", payload=b"p")
    rec = pub.protect(ev, now_ms=0, rng=random.Random(1))
    assert rec.event_id == WireIds.for_key(KEY)(app_id)
    blob = encode_secrets(rec.secrets)
    assert b"CANARY" not in blob and len(decode_secrets(blob)) == len(attrs) - 2
    assert b"MRN-CANARY" not in rec.message()  # signed bytes: everything a broker sees
    fk = Authority(kdc, schema).authorise(Filter.parse('topic = "icu"').with_id("f"))
    opened = fk.open(rec)
    assert opened.id == app_id and dict(opened.attrs) == attrs and opened.payload == b"p"


def test_a_relabelled_or_renamed_secret_does_not_open() -> None:
    schema = Schema([WARD])
    kdc = KDC(bytes(32))
    pub = Publisher(kdc, schema, name="hosp", signing_key=KEY)
    ev = Event({"topic": "icu", "age": 3, "diagnosisCANARY": "x"}, id="e1", type="ward")
    rec = pub.protect(ev, now_ms=0)
    fk = Authority(kdc, schema).authorise(Filter.parse('topic = "icu"').with_id("f"))
    (label, ct) = rec.secrets[0]
    for bad in ((("diagnosisCANARY", ct),), ((label[::-1], ct),), ((label, ct), (label, ct))):
        with pytest.raises(InvalidToken):
            fk.open(replace(rec, secrets=bad))
