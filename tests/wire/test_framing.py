"""Frame encoding and strict decoding (sans-IO, no sockets)."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import FrameError
from pubguard.wire import envelope
from pubguard.wire.framing import (
    MAX_FRAME_SIZE,
    WIRE_VERSION,
    FrameDecoder,
    check_wire,
    coalesce_frames,
    coalesce_pieces,
    decode_body,
    encode_frame,
    encode_message_frame,
    pack,
)
from pubguard.wire.messages import decode_message

wire_leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.binary()
wire = st.recursive(
    wire_leaf,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), wire, max_size=6))
def test_roundtrip(msg: dict) -> None:
    frame = encode_frame(msg)
    assert FrameDecoder().feed(frame) == [msg]


@given(st.lists(st.dictionaries(st.text(max_size=4), wire, max_size=3), max_size=5), st.data())
def test_arbitrary_chunking(msgs: list[dict], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(m) for m in msgs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    dec, out, prev = FrameDecoder(), [], 0
    for c in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:c])
        prev = c
    assert out == msgs
    assert dec.buffered == 0


def _raw(body: bytes, version: int = WIRE_VERSION) -> bytes:
    return struct.pack(">I", len(body) + 1) + bytes((version,)) + body


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (_raw(msgpack.packb({"a": 1}), version=9), "version"),
        (_raw(msgpack.packb([1, 2])), "map"),
        (_raw(msgpack.packb({1: 2})), "undecodable"),
        (_raw(msgpack.packb({"a": 1}) + b"\x00"), "undecodable"),
        (_raw(msgpack.packb({"a": msgpack.ExtType(5, b"x")})), "undecodable|ext"),
        (_raw(b"\xc1"), "undecodable"),
        (struct.pack(">I", MAX_FRAME_SIZE + 1) + b"\x01", "exceeds"),
        (struct.pack(">I", 1) + b"\x01", "shorter"),
    ],
)
def test_malformed_frames_raise_frame_error(frame: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        FrameDecoder().feed(frame)


def test_too_deep_is_refused() -> None:
    obj: object = 1
    for _ in range(40):
        obj = [obj]
    with pytest.raises(FrameError, match="deeper"):
        check_wire({"a": obj})
    with pytest.raises(FrameError, match="not allowed"):
        check_wire({"a": {1, 2}})
    # a deep value inside a message is refused by the message codec
    deep = decode_body(
        bytes((WIRE_VERSION,))
        + msgpack.packb(
            {"op": "publish", "event_id": "e", "profile": "plain", "routing": {"a": obj}}
        )
    )
    with pytest.raises(FrameError, match="deeper"):
        decode_message(deep)


def test_timestamps_and_ext_types_are_refused() -> None:
    body = msgpack.packb({"a": msgpack.Timestamp(1, 2)})
    with pytest.raises(FrameError):
        decode_body(bytes((WIRE_VERSION,)) + body)


def test_frames_before_garbage_are_kept_and_decoder_stays_poisoned() -> None:
    dec = FrameDecoder()
    good = encode_frame({"op": "x"})
    assert dec.feed(good + _raw(b"\xc1")) == [{"op": "x"}]
    assert isinstance(dec.error, FrameError)
    with pytest.raises(FrameError):
        dec.feed(good)


def test_oversize_encode_is_refused() -> None:
    with pytest.raises(FrameError, match="MAX_FRAME_SIZE"):
        encode_frame({"b": b"x" * MAX_FRAME_SIZE})
    with pytest.raises(FrameError, match="encode"):
        encode_frame({"s": {1, 2}})  # type: ignore[dict-item]


def test_a_failed_encode_leaves_nothing_behind() -> None:
    # the packer is reused: a message that fails half-way must not leak into the next frame
    with pytest.raises(FrameError):
        encode_frame({"a": 1, "b": [1, 2, {3}]})  # type: ignore[dict-item]
    assert FrameDecoder().feed(encode_frame({"ok": True})) == [{"ok": True}]


def test_encoding_matches_packb_and_decoding_accepts_views() -> None:
    msg = {"t": "m", "s": 7, "m": {"op": "publish", "body": b"\0" * 20, "routing": {"x": 1.5}}}
    frame = encode_frame(msg)
    body = msgpack.packb(msg, use_bin_type=True)
    assert frame == struct.pack(">IB", len(body) + 1, WIRE_VERSION) + body
    assert decode_body(memoryview(frame)[4:]) == decode_body(frame[4:]) == msg
    dec = FrameDecoder()  # frames decoded in place: the buffer still shrinks after each feed
    assert dec.feed(frame[:10]) == [] and dec.buffered == 10
    assert dec.feed(frame[10:] + frame[:3]) == [msg] and dec.buffered == 3
    assert dec.feed(frame[3:]) == [msg] and dec.buffered == 0


@given(st.integers(1, 2**63 - 1), st.dictionaries(st.text(max_size=8), wire, max_size=6))
def test_message_frame_from_packed_bytes_equals_encode_frame(seq: int, msg: dict) -> None:
    # a broker packs a publication once and splices it into every link's frame
    frame = encode_message_frame(seq, pack(msg))
    assert frame == encode_frame(envelope.message(seq, msg))
    assert FrameDecoder().feed(frame) == [envelope.message(seq, msg)]


def test_pack_refuses_what_msgpack_cannot_carry() -> None:
    with pytest.raises(FrameError, match="cannot encode"):
        pack({"x": {1, 2}})


@settings(max_examples=40)
@given(
    st.integers(1, 2**40),
    st.lists(st.dictionaries(st.text(max_size=4), wire, max_size=3), min_size=1, max_size=40),
    st.lists(st.integers(0, 39), max_size=3),
    st.integers(1, 8),
)
def test_coalesced_frames_carry_exactly_the_same_messages(
    first: int, msgs: list[dict], holes: list[int], max_count: int
) -> None:
    # runs of consecutive messages become batch frames; a receiver gets the same (seq, msg)
    # pairs in the same order, whatever the gaps and the batch limit
    items = [
        (first + i, encode_message_frame(first + i, pack(m)))
        for i, m in enumerate(msgs)
        if i not in holes
    ]
    frames = coalesce_frames(items, max_count)
    assert len(frames) <= len(items)
    # a link writes the pieces joined once: the same bytes
    assert b"".join(coalesce_pieces(items, max_count)) == b"".join(frames)
    for f in frames:  # each frame is one message or a batch within the limit
        (n,) = struct.unpack(">I", f[:4])
        env = msgpack.unpackb(f[5:], raw=False)
        assert len(f) == n + 4 and envelope.check_envelope(env) in ("m", "mb")
        assert env["t"] == "m" or 2 <= len(env["m"]) <= max_count
    got = []
    for env in FrameDecoder().feed(b"".join(frames)):  # the decoder unbatches
        assert envelope.check_envelope(env) == "m"
        got += envelope.reliable(env)
    assert got == [(first + i, m) for i, m in enumerate(msgs) if i not in holes]
    # a frame of another layout passes through untouched, between runs
    odd = encode_frame(envelope.ack(3))
    assert coalesce_frames([*items[:1], (0, odd)])[-1] == odd


def test_batch_frames_are_checked_strictly() -> None:
    ok = envelope.batch(5, [{"op": "heartbeat", "seq": 1}] * 2)
    assert envelope.check_envelope(ok) == "mb"
    assert envelope.reliable(ok) == [(5, ok["m"][0]), (6, ok["m"][1])]
    bad = [
        {**ok, "m": []},
        {**ok, "m": {"op": "x"}},
        {**ok, "m": [{"op": "x"}, 3]},
        {**ok, "s": 0},
        {**ok, "s": 2**63 - 1},  # runs past the largest sequence number
        {**ok, "m": [{}] * (envelope.MAX_BATCH + 1)},
        {**ok, "x": 1},
    ]
    for env in bad:
        with pytest.raises(FrameError):
            envelope.check_envelope(env)
        dec = FrameDecoder()  # a bad batch poisons the decoder like any bad frame
        assert dec.feed(encode_frame(ok) + encode_frame(env)) == [
            envelope.message(5, ok["m"][0]),
            envelope.message(6, ok["m"][1]),
        ]
        with pytest.raises(FrameError):
            dec.feed(b"")
