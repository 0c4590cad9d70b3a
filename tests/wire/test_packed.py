"""The broker's packed forwarding (net/server/batching.py ``pack_message``): a publication is packed once
and spliced into its forwards and deliveries; the bytes decode to exactly ``to_wire()``."""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.net.server.batching import pack_message
from pubguard.wire.framing import coalesce_frames, encode_message_frame, encode_run, pack
from pubguard.wire.messages import Deliver, Publish, Subscribe, decode_message, publish_wire

ids = st.text(min_size=1, max_size=12)
scalar = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8)
flat = st.dictionaries(st.text(max_size=6), scalar | st.binary(max_size=8), max_size=5)
nested = st.dictionaries(st.text(max_size=6), st.lists(scalar, max_size=3), max_size=3)


def _unpack(b: bytes) -> object:
    return msgpack.unpackb(b, raw=False)


@given(
    ids,
    ids,
    flat | nested,
    st.binary(max_size=64),
    flat | nested,
    st.lists(ids, min_size=1, max_size=4),
    st.booleans(),
)
def test_packed_equals_to_wire(eid, prof, routing, body, meta, sids, received) -> None:
    pub = Publish(eid, prof, routing, body, meta)
    if received:  # as a broker holds it: decoded from the publisher's wire dict
        pub = decode_message(publish_wire(eid, prof, routing, body, meta))  # type: ignore[assignment]
        assert isinstance(pub, Publish)
    dl = Deliver(pub, tuple(sids))
    cache: dict[int, bytes] = {}
    # the publication's fields are packed once, shared by both messages
    assert _unpack(pack_message(pub, cache)) == pub.to_wire()
    assert _unpack(pack_message(dl, cache)) == dl.to_wire()
    assert len(cache) == 1
    assert decode_message(_unpack(pack_message(dl, {}))) == dl


def test_a_received_wire_with_empty_fields_decodes_the_same() -> None:
    wire = {
        "event_id": "e1",
        "profile": "plain",
        "routing": {"a": 1},
        "body": b"",
        "meta": {},
        "op": "publish",
    }
    pub = decode_message(wire)
    assert isinstance(pub, Publish) and pub.wire is wire
    assert decode_message(_unpack(pack_message(pub, {}))) == pub
    dl = Deliver(pub, ("s1", "s2"))
    assert decode_message(_unpack(pack_message(dl, {}))) == dl


def test_other_messages_are_packed_whole() -> None:
    sub = Subscribe("s1", "plain", {"topic": "x"})
    assert _unpack(pack_message(sub, {})) == sub.to_wire()


@settings(max_examples=60)
@given(
    st.integers(1, 2**40),
    st.lists(st.binary(min_size=1, max_size=40_000), max_size=30),
    st.integers(1, 8),
)
def test_encode_run_equals_coalescing_message_frames(first, bodies, max_count) -> None:
    packed = [pack({"b": b}) for b in bodies]
    frames = [(first + i, encode_message_frame(first + i, p)) for i, p in enumerate(packed)]
    assert encode_run(first, packed, max_count) == coalesce_frames(frames, max_count)
