"""A broker's decoder keeps a publication's packed fields as they arrived when its bytes are
exactly ``pack`` of it (``FrameDecoder(raw=True)``, the native walk ``native/src/msgpack.rs``),
and the broker splices them into its deliveries and forwards instead of packing again.

- The native walk agrees with the references :func:`pubguard.wire.framing.message_raws`
  (``pack(unpackb(raw)) == raw``, string keys) and :func:`publication_fields` on generated
  messages, on non-canonical encodings of each kind, and on mutations of real frames the
  decoder accepts.
- A spliced delivery or forward is the packed one, byte for byte.
- The Python backend keeps no bytes, and the broker packs as before.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.errors import FrameError
from pubguard.net.server.batching import Raws, pack_message
from pubguard.wire import framing
from pubguard.wire.framing import (
    FrameDecoder,
    RawMessage,
    decode_body,
    encode_batch_frame,
    encode_frame,
    encode_message_frame,
    message_raws,
    pack,
    publication_fields,
)
from pubguard.wire.messages import Deliver, decode_publish
from tests.native_backends import requires_native

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([-33, -32, -129, -128, -32769, -32768, -(2**31) - 1, 127, 128, 255, 256]),
    st.sampled_from([65535, 65536, 2**32 - 1, 2**32, -(2**31)]),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.binary(max_size=300),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=18), st.dictionaries(st.text(max_size=6), inner, max_size=18)
    ),
    max_leaves=30,
)
MESSAGES = st.dictionaries(st.text(max_size=8), VALUES, max_size=20)


def _body(frame: bytes) -> bytes:
    """A frame's body after its length and version byte."""
    return frame[framing.HEADER_SIZE + 1 :]


def _publication(i: int, *, meta: bool = True) -> dict[str, Any]:
    d: dict[str, Any] = {
        "op": "publish",
        "event_id": f"e{i:04d}",
        "profile": "default",
        "routing": {"m": "r", "n": bytes(16), "t": i.to_bytes(8, "big")},
        "body": b"\x02" * (60 + i % 7),
    }
    if meta:
        d["meta"] = {"p": "pub", "ts": 1_796_160_203_989 + i, "sig": bytes(64), "mi": i % 64}
    return d


@requires_native
@given(MESSAGES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example({"a": 1})
@example({"s": "x" * 31, "t": "x" * 32, "u": b"x" * 255, "v": b"x" * 256, "w": [0] * 16})
def test_native_walk_finds_every_message_of_the_packer(m: dict[str, Any]) -> None:
    assert native.NATIVE is not None
    single = _body(encode_message_frame(7, pack(m)))
    assert native.NATIVE.message_raws(single) == [pack(m)] == message_raws(single)
    batch = _body(encode_batch_frame(1, [pack(m), pack({"k": 1}), pack(m)]))
    want = [pack(m), pack({"k": 1}), pack(m)]
    assert native.NATIVE.message_raws(batch) == want == message_raws(batch)
    assert native.NATIVE.publication_fields(batch) == [None] * 3 == publication_fields(batch)
    pub = {"op": "publish", **{k: v for k, v in m.items() if k != "op"}}
    body = _body(encode_batch_frame(1, [pack(pub), pack(m)]))
    fields = pack({k: v for k, v in pub.items() if k != "op"})
    got = native.NATIVE.publication_fields(body)
    assert got == publication_fields(body)
    assert got is not None and got[0] == (fields if len(pub) <= 15 else None)


#: each a message map as bytes that decode to a valid message but are not ``pack`` of it
NOT_CANONICAL = [
    b"\x81\xa1a\xcc\x05",  # 5 as uint 8
    b"\x81\xa1a\xcd\x00\x80",  # 128 as uint 16
    b"\x81\xa1a\xd0\x05",  # a non-negative integer as int 8
    b"\x81\xa1a\xd0\xe0",  # -32 as int 8 (a negative fixint)
    b"\x81\xa1a\xd3" + struct.pack(">q", -(2**31)),  # -2**31 as int 64
    b"\x81\xa1a\xca" + struct.pack(">f", 1.5),  # float 32
    b"\x81\xa1a\xd9\x01x",  # a one-byte string as str 8
    b"\x81\xa1a\xc5\x00\x01x",  # one byte as bin 16
    b"\x81\xa1a\xdc\x00\x01\x01",  # a one-item array as array 16
    b"\x81\xa1a\xde\x00\x01\xa1b\x01",  # a one-entry map as map 16
    b"\xde\x00\x01\xa1a\x01",  # the message map itself as map 16
    b"\x82\xa1a\x01\xa1a\x02",  # a key twice
    b"\x81\xa1a\x82\xa1b\x01\xa1b\x02",  # a key twice in a nested map
    b"\x81\xc4\x01a\x01",  # a bytes key
    b"\x81\xd9\x01a\x01",  # a key as str 8
]


@requires_native
@pytest.mark.parametrize("raw", NOT_CANONICAL, ids=range(len(NOT_CANONICAL)))
def test_a_message_not_as_packed_gets_no_bytes(raw: bytes) -> None:
    assert native.NATIVE is not None
    head = b"\x83" + pack("t") + pack("mb") + pack("s") + pack(1) + pack("m") + b"\x92"
    body = head + raw + pack({"ok": 1})
    decode_body(b"\x01" + body)  # the decoder accepts the frame
    assert native.NATIVE.message_raws(body) == [None, pack({"ok": 1})] == message_raws(body)
    assert native.NATIVE.publication_fields(body) == [None, None] == publication_fields(body)


@requires_native
def test_bodies_the_walk_does_not_take() -> None:
    assert native.NATIVE is not None
    for body in [
        pack({"t": "a", "u": 3}),  # no "m"
        pack({"t": "m", "s": 1, "m": {"a": 1}}) + b"\x00",  # trailing bytes
        pack([1, 2]),  # not a map
        b"",
        b"\x83",  # truncated
        pack({"t": "m", "m": {"a": 1}})[:-1],
        b"\x81\xa1m\xc7\x01\x05x",  # an ext type
    ]:
        assert native.NATIVE.message_raws(body) is None
        assert message_raws(body) is None
        assert native.NATIVE.publication_fields(body) is None


def _mutations(frame: bytes, data: st.DataObject) -> bytes:
    b = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        i = data.draw(st.integers(0, max(0, len(b) - 1)))
        if op == "flip" and b:
            b[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set" and b:
            b[i] = data.draw(st.sampled_from([0xC0, 0xCA, 0xCC, 0xD0, 0xD9, 0xDC, 0xDE, 0x81]))
        elif op == "cut":
            del b[i:]
        else:
            b[i:i] = data.draw(st.binary(min_size=1, max_size=3))
    return bytes(b)


@requires_native
@given(st.data())
@settings(max_examples=400, deadline=None)
def test_native_walk_agrees_on_mutated_frames_the_decoder_accepts(data: st.DataObject) -> None:
    assert native.NATIVE is not None
    msgs = [pack(_publication(i, meta=i % 2 == 0)) for i in range(3)]
    body = _mutations(_body(encode_batch_frame(1, msgs)), data)
    try:
        decode_body(b"\x01" + body)
    except FrameError:
        return  # the walk only ever sees bodies the decoder took
    assert native.NATIVE.message_raws(body) == message_raws(body)
    assert native.NATIVE.publication_fields(body) == publication_fields(body)


@requires_native
@given(st.binary(max_size=64))
@settings(max_examples=300, deadline=None)
def test_native_walk_never_fails_on_random_bytes(body: bytes) -> None:
    assert native.NATIVE is not None
    got = native.NATIVE.message_raws(body)
    assert got is None or all(r is None or r in body for r in got)
    fields = native.NATIVE.publication_fields(body)
    assert (fields is None) == (got is None)


@requires_native
def test_broker_decoder_hands_out_raw_envelopes() -> None:
    msgs = [_publication(i) for i in range(4)]
    frames = encode_batch_frame(1, [pack(m) for m in msgs[:3]]) + encode_message_frame(
        4, pack(msgs[3])
    )
    envs = FrameDecoder(raw=True).feed(frames)
    assert [type(e) for e in envs] == [RawMessage] * 4
    assert [e["s"] for e in envs] == [1, 2, 3, 4]
    assert [e["m"] for e in envs] == msgs
    assert [e.fields for e in envs] == [
        pack({k: v for k, v in m.items() if k != "op"}) for m in msgs
    ]
    # a control envelope stays a plain map, and a client's decoder keeps no bytes
    assert type(FrameDecoder(raw=True).feed(encode_frame({"t": "a", "u": 1}))[0]) is dict
    assert all(type(e) is dict for e in FrameDecoder().feed(frames))


def test_python_backend_keeps_no_bytes() -> None:
    frames = encode_batch_frame(1, [pack(_publication(i)) for i in range(2)])
    with native.use("python"):
        envs = FrameDecoder(raw=True).feed(frames)
    assert all(type(e) is dict for e in envs)


@requires_native
@given(st.lists(st.booleans(), min_size=1, max_size=6), st.data())
@settings(max_examples=60, deadline=None)
def test_spliced_deliveries_and_forwards_are_the_packed_ones(
    metas: list[bool], data: st.DataObject
) -> None:
    """What the broker writes from the bytes a publication arrived as equals what it packs
    from the decoded publication (``pack_message`` with and without ``raws``)."""
    msgs = [_publication(i, meta=m) for i, m in enumerate(metas)]
    op_last = data.draw(st.booleans())
    if op_last:  # "op" not first: nothing to splice, packed instead
        msgs[0] = {k: msgs[0][k] for k in reversed(list(msgs[0]))}
    envs = FrameDecoder(raw=True).feed(encode_batch_frame(1, [pack(m) for m in msgs]))
    raws: Raws = {id(e["m"]): (e["m"], e.fields) for e in envs if e.fields is not None}
    assert len(raws) == len(msgs) - op_last  # "op" not first: no fields kept
    for e in envs:
        pub = decode_publish(e["m"])
        assert pub is not None and pub.wire is e["m"]
        sids = tuple(data.draw(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3)))
        for message in (Deliver.trusted(pub, sids), pub):
            spliced = pack_message(message, {}, raws)
            assert spliced == pack_message(message, {})
            assert msgpack.unpackb(spliced, raw=False) == message.to_wire()
            if not (op_last and e["s"] == 1):  # the wire's field order is kept as it came
                assert spliced == pack(message.to_wire())
