"""Wire frames: length-prefixed, versioned, msgpack-encoded maps with strict decoding.

Theory of operation
-------------------
A frame on a link (broker-broker or client-broker, always inside TLS) is::

    +----------------+---------+-----------------------------+
    | length: u32 BE | version | msgpack map (length-1 bytes)|
    +----------------+---------+-----------------------------+

``length`` counts the version byte and the body and must be at most :data:`MAX_FRAME_SIZE`;
the version byte must be :data:`WIRE_VERSION`. The body must decode to a map with ``str`` keys
whose leaves are ``None``, ``bool``, ``int`` (64-bit), ``float``, ``str``, ``bytes``, lists and
maps (:func:`check_wire` states the rule; the message codec bounds nesting to 16). Anything else
(a truncated body, trailing bytes, an ext type, a timestamp, a non-str key, too big) raises
:class:`~pubguard.errors.FrameError`: the transport then closes *that* link with the reason
logged and keeps serving the others.

:class:`FrameDecoder` is sans-IO in the h11 style: feed it bytes as they arrive, get complete
decoded maps out; it never blocks and buffers at most one frame. A batch frame (``mb``,
``envelope.py``) is checked strictly and handed out as the ``m`` envelopes of its messages, so
everything above the decoder (and any tap on it) sees one envelope per message.

A broker passes most publications on unchanged, so its decoder (``FrameDecoder(raw=True)``)
also keeps, for each publication whose bytes are exactly what :func:`pack` makes of it, its
packed fields without ``op`` as they arrived (:func:`publication_fields`): the envelope is then
a :class:`RawMessage`, and the broker splices those bytes into its deliveries and forwards
instead of packing the publication again (``net/server/batching.py``). The walk that finds
them is native (``native/src/msgpack.rs``); on the Python backend nothing is kept, and the
broker packs, with the same result byte for byte.
"""

from __future__ import annotations

import struct
import threading
from typing import Any, Final

import msgpack

from pubguard import native
from pubguard.errors import FrameError

__all__ = [
    "HEADER_SIZE",
    "MAX_DEPTH",
    "MAX_FRAME_SIZE",
    "WIRE_VERSION",
    "FrameDecoder",
    "RawMessage",
    "check_wire",
    "coalesce_frames",
    "coalesce_pieces",
    "decode_body",
    "encode_frame",
    "encode_batch_frame",
    "encode_message_frame",
    "encode_run",
    "message_raws",
    "pack",
    "publication_fields",
]

WIRE_VERSION: Final = 1
MAX_FRAME_SIZE: Final = 1 << 20  # 1 MiB: a 16 KB event plus envelope fits with a wide margin
MAX_DEPTH: Final = 16
HEADER_SIZE: Final = 4
_LEN = struct.Struct(">I")
_HEAD = struct.Struct(">IB")  # length and version byte, packed in one call
_INT_MIN: Final = -(1 << 63)
_INT_MAX: Final = (1 << 64) - 1


def _no_ext(code: int, data: bytes) -> Any:
    raise FrameError(f"msgpack ext type {code} is not allowed")


class _Packers(threading.local):
    """One reusable msgpack packer per thread (``packb`` builds a new one per call, which
    costs more than packing a small message)."""

    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True, autoreset=True)


_PACKERS = _Packers()


def encode_frame(msg: dict[str, Any]) -> bytes:
    """Encode one map as a complete frame (header, version, body)."""
    packer = _PACKERS.packer
    try:
        body = packer.pack(msg)
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()  # a failed pack may leave a partial buffer behind
        raise FrameError(f"cannot encode frame: {exc}") from None
    n = len(body) + 1
    if n > MAX_FRAME_SIZE:
        raise FrameError(f"frame of {n} bytes exceeds MAX_FRAME_SIZE={MAX_FRAME_SIZE}")
    return _HEAD.pack(n, WIRE_VERSION) + body


def pack(obj: Any) -> bytes:
    """msgpack bytes of one value (the body encoding of :func:`encode_frame`)."""
    packer = _PACKERS.packer
    try:
        return packer.pack(obj)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        packer.reset()
        raise FrameError(f"cannot encode frame: {exc}") from None


_MSG_HEAD: Final = b"\x83" + pack("t") + pack("m") + pack("s")  # {"t": "m", "s": ..
_MSG_KEY: Final = pack("m")


def encode_message_frame(seq: int, packed_msg: bytes) -> bytes:
    """``encode_frame({"t": "m", "s": seq, "m": msg})`` from ``packed_msg = pack(msg)``,
    byte for byte, without packing ``msg`` again: a broker packs a publication once and
    frames it for every link it goes to (a msgpack map is its entries concatenated)."""
    s = pack(seq)
    n = len(_MSG_HEAD) + len(s) + len(_MSG_KEY) + len(packed_msg) + 1
    if n > MAX_FRAME_SIZE:
        raise FrameError(f"frame of {n} bytes exceeds MAX_FRAME_SIZE={MAX_FRAME_SIZE}")
    return b"".join((_HEAD.pack(n, WIRE_VERSION), _MSG_HEAD, s, _MSG_KEY, packed_msg))


_BATCH_HEAD: Final = b"\x83" + pack("t") + pack("mb") + pack("s")  # {"t": "mb", "s": ..


def encode_batch_frame(first: int, packed_msgs: list[bytes]) -> bytes:
    """``encode_frame({"t": "mb", "s": first, "m": msgs})`` from ``pack(msg)`` of each,
    byte for byte (an array is its length header and its items concatenated)."""
    return b"".join(_batch_pieces(first, packed_msgs))


def _batch_pieces(first: int, packed_msgs: list[Any]) -> list[Any]:
    """The pieces :func:`encode_batch_frame` joins: the frame's head, then the messages as
    given (``bytes`` or views of them), so a writer joins many frames' messages once."""
    n_msgs = len(packed_msgs)
    if n_msgs < 16:
        head = bytes((0x90 | n_msgs,))
    elif n_msgs < 1 << 16:
        head = b"\xdc" + n_msgs.to_bytes(2, "big")
    else:
        head = b"\xdd" + n_msgs.to_bytes(4, "big")
    f = pack(first)
    n = len(_BATCH_HEAD) + len(f) + len(_MSG_KEY) + len(head) + sum(map(len, packed_msgs)) + 1
    if n > MAX_FRAME_SIZE:
        raise FrameError(f"frame of {n} bytes exceeds MAX_FRAME_SIZE={MAX_FRAME_SIZE}")
    return [b"".join((_HEAD.pack(n, WIRE_VERSION), _BATCH_HEAD, f, _MSG_KEY, head)), *packed_msgs]


BATCH_BYTES: Final = 256 * 1024  # message bytes coalesced into one batch frame at most


def encode_run(first: int, packed_msgs: list[bytes], max_count: int = 4096) -> list[bytes]:
    """The frames of messages ``first, first + 1, ...`` given packed (``pack(msg)`` each):
    what :func:`coalesce_frames` makes of their message frames, without building those first
    (a client queues packed messages and frames them once per loop iteration)."""
    out: list[bytes] = []
    i, n = 0, len(packed_msgs)
    while i < n:
        j, size = i, 0
        while j < n and j - i < max_count and (j == i or size + len(packed_msgs[j]) <= BATCH_BYTES):
            size += len(packed_msgs[j])
            j += 1
        if j - i == 1:
            out.append(encode_message_frame(first + i, packed_msgs[i]))
        else:
            out.append(encode_batch_frame(first + i, packed_msgs[i:j]))
        i = j
    return out


def coalesce_frames(items: list[tuple[int, bytes]], max_count: int = 4096) -> list[bytes]:
    """Message frames ``(seq, encode_message_frame(seq, m))`` in sequence order as fewer
    frames: each run of consecutive sequence numbers becomes one batch frame (at most
    ``max_count`` messages and about ``BATCH_BYTES``), equal to ``encode_batch_frame``; a
    lone message, or a frame of another layout, is kept as it is."""
    return [p[0] if len(p) == 1 else b"".join(p) for p in _coalesced(items, max_count)]


def coalesce_pieces(items: list[tuple[int, bytes]], max_count: int = 4096) -> list[Any]:
    """``b"".join`` of these is ``b"".join(coalesce_frames(items, max_count))``: the frames'
    pieces, the messages as views of their frames, so a link writes a burst with one copy
    of each message instead of three."""
    return [x for p in _coalesced(items, max_count) for x in p]


def _coalesced(items: list[tuple[int, bytes]], max_count: int) -> list[list[Any]]:
    """:func:`coalesce_frames`' frames, each as the pieces that join to it."""
    if len(items) < 2:
        return [[f] for _, f in items]
    out: list[list[Any]] = []
    run: list[Any] = []  # the current run's packed messages, as views of their frames
    lone = b""  # the current run's frame while it has one message
    first = nxt = 0
    size = 0

    def flush() -> None:
        nonlocal run, size
        if len(run) == 1:
            out.append([lone])
        elif run:
            out.append(_batch_pieces(first, run))
        run, size = [], 0

    base = HEADER_SIZE + 1 + len(_MSG_HEAD)
    for seq, frame in items:
        tail = pack(seq) + _MSG_KEY
        ok = frame[HEADER_SIZE + 1 : base] == _MSG_HEAD and frame[base : base + len(tail)] == tail
        if not ok:
            flush()
            out.append([frame])
            continue
        packed = memoryview(frame)[base + len(tail) :]
        if run and (seq != nxt or len(run) >= max_count or size + len(packed) > BATCH_BYTES):
            flush()
        if not run:
            first, lone = seq, frame
        run.append(packed)
        size += len(packed)
        nxt = seq + 1
    flush()
    return out


def check_wire(obj: Any, depth: int = 0) -> None:
    """Raise FrameError unless ``obj`` is made only of the allowed wire types."""
    if depth > MAX_DEPTH:
        raise FrameError(f"frame nested deeper than {MAX_DEPTH}")
    t = type(obj)
    if obj is None or t is bool or t is float or t is str or t is bytes:
        return
    if t is int:
        if not _INT_MIN <= obj <= _INT_MAX:  # pragma: no cover - msgpack cannot produce these
            raise FrameError("integer out of range")
        return
    if t is list:
        for x in obj:
            check_wire(x, depth + 1)
        return
    if t is dict:
        for k, v in obj.items():
            if type(k) is not str:
                raise FrameError("map keys must be strings")
            check_wire(v, depth + 1)
        return
    raise FrameError(f"type {t.__name__} is not allowed on the wire")


def decode_body(frame_body: bytes | memoryview) -> dict[str, Any]:
    """Decode ``version || msgpack`` (the part after the length) into a checked map."""
    if len(frame_body) < 2:
        raise FrameError("empty frame")
    version = frame_body[0]
    if version != WIRE_VERSION:
        raise FrameError(f"unknown wire version {version}")
    if type(frame_body) is not memoryview:
        frame_body = memoryview(frame_body)
    try:
        # unpackb bounds every str / bin / array / map length by the buffer size by default
        # (maps by half of it), so only ext types need refusing here
        obj = msgpack.unpackb(
            frame_body[1:],
            raw=False,
            strict_map_key=True,
            ext_hook=_no_ext,
            max_ext_len=0,
        )
    except FrameError:
        raise
    except Exception as exc:  # msgpack raises many types (ExtraData, FormatError, ValueError...)
        raise FrameError(f"undecodable frame body: {type(exc).__name__}") from None
    if type(obj) is not dict:
        raise FrameError(f"frame body must be a map, got {type(obj).__name__}")
    # With these options msgpack yields only None, bool, int, float, str, bytes, list and
    # str-keyed dict (ext types, timestamps included, exceed max_ext_len=0), so the full
    # ``check_wire`` walk is not repeated here; nesting is bounded by the message codec.
    return obj


class RawMessage(dict):  # type: ignore[type-arg]
    """An ``m`` envelope (``{"t": "m", "s": seq, "m": msg}``) from a decoder that keeps bytes:
    ``fields`` is ``pack`` of the publication ``msg`` without its ``op`` (what a delivery's
    ``event`` carries), sliced from the bytes it arrived as, when those are exactly
    ``pack(msg)`` with ``op`` first (:func:`publication_fields`); else None. Only the decoder
    makes one (the wire carries plain maps), so ``fields`` always comes from ``msg``'s bytes."""

    __slots__ = ("fields",)

    fields: bytes | None


_PUBLISH_OP: Final = pack("op") + pack("publish")


def publication_fields(body: bytes) -> list[bytes | None] | None:
    """For each message of a frame body (:func:`message_raws`), ``pack`` of the publication
    without its ``op`` when its bytes are canonical and ``"op": "publish"`` is their first
    entry, else None; None for a body :func:`message_raws` does not take. The reference of
    the native walk the decoder uses."""
    raws = message_raws(body)
    if raws is None:
        return None
    out: list[bytes | None] = []
    for raw in raws:
        if raw is not None and 0x81 <= raw[0] <= 0x8F and raw[1:].startswith(_PUBLISH_OP):
            out.append(bytes((raw[0] - 1,)) + raw[1 + len(_PUBLISH_OP) :])
        else:
            out.append(None)
    return out


def message_raws(body: bytes) -> list[bytes | None] | None:
    """The bytes of each message in a frame body (the msgpack map after the version byte):
    one for an ``m`` envelope, one per message of an ``mb`` batch, in order; an entry is None
    unless ``pack(unpackb(raw)) == raw`` with string map keys only. None when the body holds
    no ``m``. The reference of the native walk (``native/src/msgpack.rs``), which the decoder
    uses; this one is for tests and costs a pack per message."""
    u = msgpack.Unpacker(raw=False, strict_map_key=False, ext_hook=_no_ext, max_ext_len=0)
    u.feed(body)
    spans: list[tuple[int, int]] | None = None
    try:
        msgpack.unpackb(body, raw=False, strict_map_key=False, ext_hook=_no_ext, max_ext_len=0)
        for _ in range(u.read_map_header()):
            key = u.unpack()
            if key != "m" or type(key) is not str:
                u.skip()
                continue
            spans = []
            first = body[u.tell()] if u.tell() < len(body) else None
            count = None
            if first is not None and (0x90 <= first <= 0x9F or first in (0xDC, 0xDD)):
                count = u.read_array_header()
            for _ in range(1 if count is None else count):
                a = u.tell()
                u.skip()
                spans.append((a, u.tell()))
        if u.tell() != len(body):
            return None
    except Exception:  # noqa: BLE001 - any msgpack error: not a body the walk takes
        return None
    if spans is None:
        return None
    return [_canonical(body[a:b]) for a, b in spans]


def _canonical(raw: bytes) -> bytes | None:
    try:
        obj = msgpack.unpackb(raw, raw=False, strict_map_key=False, ext_hook=_no_ext)
    except Exception:  # noqa: BLE001
        return None
    if type(obj) is not dict or not _str_keys(obj):
        return None
    return raw if pack(obj) == raw else None


def _str_keys(obj: Any) -> bool:
    if type(obj) is dict:
        return all(type(k) is str and _str_keys(v) for k, v in obj.items())
    if type(obj) is list:
        return all(_str_keys(x) for x in obj)
    return True


def _unbatch(env: dict[str, Any], fields: list[bytes | None] | None = None) -> list[dict[str, Any]]:
    """A batch frame's messages as ``m`` envelopes (envelope.py), after a strict check;
    :class:`RawMessage` envelopes when ``fields`` (:func:`publication_fields`) matches them."""
    from pubguard.wire import envelope  # envelopes sit above frames; imported on first batch

    envelope.check_envelope(env)
    items = envelope.reliable(env)
    if fields is None or len(fields) != len(items):
        return [envelope.message(s, m) for s, m in items]
    out: list[dict[str, Any]] = []
    for (s, m), f in zip(items, fields, strict=True):
        e = RawMessage(t="m", s=s, m=m)
        e.fields = f
        out.append(e)
    return out


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` returns every complete frame now available.

    After a :class:`FrameError` the decoder is poisoned (the link must be closed): a stream
    that lost its framing cannot be resynchronised safely. Frames completed before the bad one
    in the same chunk are still returned; the error is then kept in :attr:`error` and raised by
    the next ``feed``.
    """

    __slots__ = ("_buf", "_fields", "error", "max_frame_size")

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE, *, raw: bool = False) -> None:
        """``raw``: hand messages out as :class:`RawMessage` envelopes with the bytes of the
        publications (a broker's decoder; native backend only, see the module docstring)."""
        self._buf = bytearray()
        self.error: FrameError | None = None
        self.max_frame_size = max_frame_size
        fast = native.NATIVE
        self._fields: Any = fast.publication_fields if raw and fast is not None else None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if self.error is not None:
            raise self.error
        buf = self._buf
        buf += data
        fields = self._fields
        out: list[dict[str, Any]] = []
        pos = 0
        size = len(buf)
        view = memoryview(buf)  # frames are decoded in place, without copying them out
        try:
            while size - pos >= HEADER_SIZE:
                (n,) = _LEN.unpack_from(buf, pos)
                if n > self.max_frame_size:
                    raise FrameError(f"frame of {n} bytes exceeds limit {self.max_frame_size}")
                if n < 2:
                    raise FrameError("frame shorter than version byte and body")
                end = pos + HEADER_SIZE + n
                if size < end:
                    break
                obj = decode_body(view[pos + HEADER_SIZE : end])
                t = obj.get("t")
                if fields is not None and (t == "mb" or t == "m"):
                    got = fields(bytes(view[pos + HEADER_SIZE + 1 : end]))
                    if t == "mb":
                        out += _unbatch(obj, got)
                    elif got is not None and len(got) == 1 and len(obj) == 3:
                        e = RawMessage(obj)
                        e.fields = got[0]
                        out.append(e)
                    else:
                        out.append(obj)
                elif t == "mb":
                    out += _unbatch(obj)
                else:
                    out.append(obj)
                pos = end
        except FrameError as exc:
            view.release()
            self.error = exc
            self._buf = bytearray()
            if not out:
                raise
            return out
        view.release()  # the buffer cannot be resized while a view of it is exported
        if pos:
            del buf[:pos]
        return out
