"""Messages validate on construction and round-trip through the strict wire codec."""

from __future__ import annotations

import math
from types import MappingProxyType

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import DropReason, FrameError, ValidationError
from pubguard.wire.messages import (
    MAX_BODY_BYTES,
    MAX_ID_LEN,
    MAX_WIRE_DEPTH,
    Ack,
    Advertise,
    Deliver,
    Error,
    Heartbeat,
    Publish,
    Subscribe,
    Unadvertise,
    Unsubscribe,
    decode_message,
    freeze_wire,
    publish_wire,
)

FILTER = {"constraints": [["a", ">", 1], ["b", "=", "x"]]}
PUB = Publish("e1", "plain", {"a": 1, "b": "x"}, b"payload", {"sig": b"\x00\x01", "ts": 1.5})

SAMPLES = [
    Subscribe("s1", "plain", FILTER),
    Subscribe("s1", "psguard", {"tokens": [b"\x01" * 16]}, {"permit": b"p", "n": [1, 2]}),
    Unsubscribe("s1", "plain"),
    Unsubscribe("s1", "eventguard", {"ust": b"u"}),
    Advertise("a1", "plain", FILTER),
    Unadvertise("a1", "plain", {"uat": b"x"}),
    PUB,
    Publish("e2", "plain", {"a": 2.5}),
    Deliver(PUB, ("s1", "s2")),
    Ack("s1", "subscribe"),
    Error("e1", DropReason.FORGED, "bad signature"),
    Heartbeat(7),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.op)
def test_round_trip_through_msgpack(msg: object) -> None:
    wire = msg.to_wire()  # type: ignore[attr-defined]
    back = decode_message(msgpack.unpackb(msgpack.packb(wire), raw=False))
    assert back == msg
    assert type(msg).from_wire(wire) == msg  # type: ignore[attr-defined]


def test_from_wire_insists_on_its_own_type() -> None:
    with pytest.raises(FrameError, match="expected subscribe"):
        Subscribe.from_wire(PUB.to_wire())  # type: ignore[attr-defined]


def test_messages_are_deeply_immutable() -> None:
    m = Subscribe("s1", "plain", {"constraints": [["a", ">", 1]]}, {"k": [1, {"x": 2}]})
    with pytest.raises(AttributeError):
        m.sub_id = "s2"  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.meta["k"] = 3  # type: ignore[index]
    assert isinstance(m.meta["k"], tuple)
    with pytest.raises(TypeError):
        m.meta["k"][1]["x"] = 3


wire_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
wire_values = st.recursive(
    wire_leaf,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=40)
@given(
    routing=st.dictionaries(st.text(min_size=1, max_size=5), wire_values, max_size=4),
    meta=st.dictionaries(st.text(max_size=5), wire_values, max_size=3),
    body=st.binary(max_size=64),
)
def test_publish_round_trips_any_wire_values(routing: dict, meta: dict, body: bytes) -> None:
    m = Publish("e", "p", routing, body, meta)
    assert decode_message(msgpack.unpackb(msgpack.packb(m.to_wire()), raw=False)) == m


@pytest.mark.parametrize(
    "wire, fragment",
    [
        ([], "mapping"),
        ({"sub_id": "s"}, "string 'op'"),
        ({"op": 3}, "string 'op'"),
        ({"op": "launch"}, "unknown op"),
        ({"op": "subscribe", "sub_id": "s", "profile": "plain"}, "missing filter"),
        ({"op": "subscribe", "sub_id": "s", "profile": "plain", "filter": {}, "x": 1}, "unknown"),
        ({"op": "subscribe", "sub_id": 5, "profile": "plain", "filter": {}}, "sub_id"),
        ({"op": "subscribe", "sub_id": "", "profile": "plain", "filter": {}}, "sub_id"),
        (
            {"op": "subscribe", "sub_id": "s" * (MAX_ID_LEN + 1), "profile": "p", "filter": {}},
            "longer",
        ),
        ({"op": "subscribe", "sub_id": "s", "profile": "p", "filter": []}, "mapping"),
        ({"op": "publish", "event_id": "e", "profile": "p", "routing": {1: 2}}, "keys"),
        ({"op": "publish", "event_id": "e", "profile": "p", "routing": {}, "body": "x"}, "bytes"),
        ({"op": "publish", "event_id": "e", "profile": "p", "routing": {"a": math.nan}}, "NaN"),
        ({"op": "publish", "event_id": "e", "profile": "p", "routing": {"a": 2**70}}, "range"),
        ({"op": "publish", "event_id": "e", "profile": "p", "routing": {"a": {1}}}, "set"),
        ({"op": "deliver", "sub_ids": [], "event": PUB.to_wire()}, "sub_ids"),
        ({"op": "deliver", "sub_ids": ["s"], "event": {"op": "publish"}}, "missing"),
        ({"op": "ack", "ref": "s", "of": "launch"}, "unknown op"),
        ({"op": "error", "ref": "s", "reason": "bored"}, "drop reason"),
        ({"op": "heartbeat", "seq": True}, "integer"),
        ({"op": "heartbeat", "seq": -1}, "range"),
    ],
)
def test_decoding_is_strict(wire: object, fragment: str) -> None:
    with pytest.raises(FrameError, match=fragment):
        decode_message(wire)


def test_size_limits() -> None:
    with pytest.raises(ValidationError, match="body larger"):
        Publish("e", "p", {}, b"x" * (MAX_BODY_BYTES + 1))
    deep: object = 1
    for _ in range(MAX_WIRE_DEPTH + 1):
        deep = [deep]
    with pytest.raises(ValidationError, match="nested deeper"):
        freeze_wire(deep)
    with pytest.raises(ValidationError, match="more than"):
        freeze_wire(list(range(70_000)))


def test_direct_construction_raises_validation_error() -> None:
    with pytest.raises(ValidationError):
        Subscribe("s", "plain", "not a mapping")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Deliver("not a publish", ("s",))  # type: ignore[arg-type]


odd_leaf = st.sampled_from([math.nan, math.inf, 2**64, -(2**63) - 1, bytearray(b"x"), {1}, None])
odd_maps = st.dictionaries(
    st.one_of(st.text(max_size=3), st.integers(0, 2)), st.one_of(wire_values, odd_leaf), max_size=4
)


@settings(max_examples=150)
@given(
    routing=odd_maps, meta=st.one_of(st.none(), odd_maps), body=st.sampled_from([b"", b"x", "x"])
)
def test_publish_fast_decode_equals_the_constructor(
    routing: dict, meta: dict | None, body: object
) -> None:
    # decode_message validates a publication once, inline; it must agree with the dataclass
    wire = {"op": "publish", "event_id": "e", "profile": "p", "routing": routing, "body": body}
    if meta is not None:
        wire["meta"] = meta
    try:
        want: object = Publish("e", "p", routing, body, {} if meta is None else meta)  # type: ignore[arg-type]
    except ValidationError as exc:
        with pytest.raises(FrameError, match="bad publish") as info:
            decode_message(wire)
        assert str(exc) in str(info.value)
        return
    got = decode_message(wire)
    assert got == want and got.to_wire() == want.to_wire()  # type: ignore[attr-defined]
    assert type(got.routing) is type(want.routing)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        got.routing["new"] = 1  # type: ignore[attr-defined,index]


@settings(max_examples=150)
@given(
    routing=odd_maps,
    meta=st.one_of(st.none(), odd_maps),
    body=st.sampled_from([b"", b"x", "x", bytearray(b"y")]),
    event_id=st.sampled_from(["e", "", 5, "e" * (MAX_ID_LEN + 1)]),
    frozen=st.booleans(),
)
def test_publish_wire_equals_the_constructor(
    routing: dict, meta: dict | None, body: object, event_id: object, frozen: bool
) -> None:
    # a publisher builds the wire dict without the dataclass; same result, same refusals
    if frozen:  # a scheme may hand over read-only maps
        routing = MappingProxyType(routing)  # type: ignore[assignment]
    try:
        want = Publish(event_id, "p", routing, body, {} if meta is None else meta).to_wire()  # type: ignore[arg-type]
    except ValidationError as exc:
        with pytest.raises(ValidationError) as info:
            publish_wire(event_id, "p", routing, body, meta)  # type: ignore[arg-type]
        assert str(info.value) == str(exc)
        return
    got = publish_wire(event_id, "p", routing, body, meta)  # type: ignore[arg-type]
    assert got == want
    assert decode_message(msgpack.unpackb(msgpack.packb(got), raw=False)).to_wire() == want


@settings(max_examples=100)
@given(
    sub_ids=st.one_of(
        st.lists(st.sampled_from(["s1", "", "s" * (MAX_ID_LEN + 1), 3, None]), max_size=4),
        st.sampled_from([(), ("s1",), "s1", None]),
    )
)
def test_deliver_fast_decode_equals_the_constructor(sub_ids: object) -> None:
    wire = {"op": "deliver", "sub_ids": sub_ids, "event": PUB.to_wire()}
    try:
        want = Deliver(PUB, sub_ids)  # type: ignore[arg-type]
    except ValidationError as exc:
        with pytest.raises(FrameError, match="bad deliver") as info:
            decode_message(wire)
        assert str(exc) in str(info.value)
        return
    got = decode_message(wire)
    assert got == want and got.to_wire() == want.to_wire()
    assert type(got.sub_ids) is tuple  # type: ignore[attr-defined]


def test_decode_publish_is_decode_message_for_the_common_shape() -> None:
    from pubguard.wire.messages import decode_publish

    wire = {
        "op": "publish",
        "event_id": "e1",
        "profile": "plain",
        "routing": {"a": 1},
        "body": b"x",
        "meta": {"ts": 1.5},
    }
    fast = decode_publish(wire)
    assert fast is not None and fast == decode_message(wire) and fast.wire is wire
    # anything else is left to decode_message (which words the errors)
    assert decode_publish({**wire, "extra": 1}) is None
    assert decode_publish({**wire, "routing": {"a": [1]}}) is None
    assert decode_publish({**wire, "op": "subscribe"}) is None
    assert decode_publish({k: v for k, v in wire.items() if k != "routing"}) is None
    assert decode_publish({**wire, "event_id": ""}) is None


_val = (
    st.none()
    | st.integers(-3, 3)
    | st.text(max_size=3)
    | st.binary(max_size=3)
    | st.lists(st.integers(0, 2), max_size=2)
)


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(["event_id", "profile", "routing", "body", "meta", "x"]),
        _val | st.dictionaries(st.text(max_size=2), _val, max_size=2),
        max_size=6,
    ),
    st.lists(st.text(max_size=3) | st.integers(0, 1), max_size=3) | _val,
    st.booleans(),
)
def test_decode_fast_paths_agree_with_decode_message(ev, sub_ids, extra) -> None:
    from pubguard.wire.messages import decode_deliver, decode_publish

    for wire, fast in (
        ({"op": "deliver", "sub_ids": sub_ids, "event": ev}, decode_deliver),
        ({"op": "publish", **ev}, decode_publish),
    ):
        if extra:
            wire["y"] = 1
        got = fast(wire)
        if got is not None:  # the fast path never accepts what the general decoder refuses
            assert got == decode_message(wire)


def test_decode_deliver_is_decode_message_for_the_common_shape() -> None:
    from pubguard.wire.messages import decode_deliver

    ev = {"event_id": "e1", "profile": "plain", "routing": {"a": 1}, "body": b"x"}
    wire = {"op": "deliver", "sub_ids": ["s1", "s2"], "event": ev}
    fast = decode_deliver(wire)
    assert fast is not None and fast == decode_message(wire)
    assert decode_deliver({**wire, "sub_ids": []}) is None
    assert decode_deliver({**wire, "sub_ids": [""]}) is None
    assert decode_deliver({**wire, "event": {**ev, "x": 1}}) is None
    assert decode_deliver({**wire, "event": {**ev, "routing": {"a": [1]}}}) is None


def test_a_bad_wire_value_is_named_by_its_path_and_the_range_given() -> None:
    rng = r"\(wire integers are -2\*\*63 \.\. 2\*\*64-1\)"
    with pytest.raises(ValidationError, match=rf"^routing\.price: integer out of range {rng}$"):
        Publish("e", "plain", {"topic": "t", "price": 2**64})
    with pytest.raises(ValidationError, match=rf"^routing\.price: integer out of range {rng}$"):
        publish_wire("e", "plain", {"topic": "t", "price": -(2**63) - 1}, b"")
    with pytest.raises(ValidationError, match=r"^meta\.a\.b\[2\]: integer out of range"):
        Publish("e", "plain", {}, b"", {"a": {"b": [1, 2, 2**70]}})
    with pytest.raises(ValidationError, match=r"^filter\.x: NaN is not a wire value$"):
        freeze_wire({"x": math.nan}, what="filter")
