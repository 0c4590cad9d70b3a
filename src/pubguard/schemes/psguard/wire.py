"""The psguard wire forms, shared by the psguard and default profiles: how a record travels as a
publication and a tokenised filter as a subscription, the broker's decoded forms
(:class:`TokenEvent`, :class:`TokenFilter`), and the batch-signature fields
(:data:`ROOT_TAG`, :func:`batch_fields`). Pure codecs: the broker hooks that use them are
:mod:`pubguard.schemes.psguard.routing`, the index :mod:`pubguard.schemes.psguard.match`.

Theory of operation
-------------------
Wire forms (psguard.txt §4.1; a broker sees tokens and ciphertext only)::

    subscribe  filter {g: [[[T ...] group ...] scope ...]}      16-byte tokens, no plaintext
    publish    routing {m: "r" | "d", n: r, t: tok64(F_T(r)) ... packed as int64}
               body    E_K(e)(payload)
               meta    {p: publisher, ts: ms, e: epoch, h: sealed hint, s: sealed secrets,
                        sig: Ed25519 over the record}
    advertise  filter {g: []}                                   (PSGuard has no advertisements)

A filter is a disjunction over *scopes* (one per candidate topic / type) of a conjunction of
*groups* (one per constrained attribute), each a set of tokens: a minimal NAKT cover for a
numeric range, one node for a category or string chain, ``T(w)`` for the topic. An event's
tokens meet each group in at most one token, so "every group met" is the counting match.

Covering is sound and deliberately narrow: tokens are opaque, so a filter covers another only
when their token sets are identical (two subscriptions to the same authorised range).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from pubguard import native
from pubguard.errors import ValidationError
from pubguard.schemes.base import ProtectedEvent
from pubguard.schemes.common.merkle import MAX_BATCH, unpack_path
from pubguard.schemes.psguard.record import (
    ProtectedFilterRows,
    ProtectedRecord,
    decode_secrets,
    encode_secrets,
    signed_message_packed,
)
from pubguard.schemes.psguard.tokens import NONCE_BYTES, TOKEN_BYTES

__all__ = [
    "MAX_EVENT_TAGS",
    "MAX_FILTER_TOKENS",
    "ROOT_TAG",
    "TokenEvent",
    "TokenFilter",
    "batch_fields",
    "filter_to_wire",
    "parse_filter",
    "parse_routing",
    "record_from_wire",
    "record_to_wire",
    "signed_from_wire",
]

MAX_FILTER_TOKENS: Final = 4096  # tokens one subscription may carry (bounded broker memory)
MAX_SCOPES: Final = 256
MAX_EVENT_TAGS: Final = 4096  # tags one publication may carry
_MODE_WIRE: Final = {"randomized": "r", "deterministic": "d"}
_MODE_NAME: Final = {v: k for k, v in _MODE_WIRE.items()}
_RECORD_META: Final = frozenset({"p", "ts", "e", "h", "s", "sig"})
#: what a batch's signature covers, then ``n || root`` (the psguard profile's amortised form)
ROOT_TAG: Final = b"pubguard/psguard/root/v2\x00"


# -- wire forms -------------------------------------------------------------------------------


def _bytes(v: Any, what: str) -> bytes:
    if type(v) is bytes:  # the common case (msgpack bin): no copy
        return v
    if not isinstance(v, bytes | bytearray):
        raise ValidationError(f"psguard {what} must be bytes")
    return bytes(v)


def _int(v: Any, what: str) -> int:
    if type(v) is int and -(2**63) <= v < 2**63:  # the common case; bool is not int here
        return v
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
        raise ValidationError(f"psguard {what} must be a 64-bit integer")
    return v


def pack_tags(tags: Sequence[int]) -> bytes:
    return struct.pack(f">{len(tags)}q", *tags)


def record_to_wire(rec: ProtectedRecord) -> ProtectedEvent:
    """A :class:`ProtectedRecord` as a publication: tokens in ``routing``, the sealed payload in
    ``body``, everything else the signature covers in ``meta``."""
    routing = {"m": _MODE_WIRE[rec.mode], "n": rec.nonce, "t": pack_tags(rec.tokens)}
    meta = {
        "p": rec.publisher,
        "ts": rec.ts,
        "e": rec.epoch,
        "h": rec.hint,
        "s": encode_secrets(rec.secrets),
        "sig": rec.sig,
    }
    return ProtectedEvent(rec.event_id, routing, rec.payload, meta)


def batch_fields(meta: Mapping[str, Any]) -> tuple[int, int, tuple[bytes, ...]]:
    """``(index, size, path)`` of a batch-signed publication (ValidationError if malformed)."""
    index, size, path = meta.get("mi"), meta.get("mn"), meta.get("mp")
    for v in (index, size):
        if type(v) is not int:
            raise ValidationError("psguard Merkle index and size must be integers")
    if not 0 <= index < size <= MAX_BATCH:  # type: ignore[operator]
        raise ValidationError("psguard Merkle index/size out of range")
    return index, size, unpack_path(path)  # type: ignore[return-value]


class TokenEvent(NamedTuple):
    """A publication's routing part as a broker decodes it (an immutable named tuple rather
    than a frozen dataclass: it is built for every publication at every broker, and a tuple
    is built in a fraction of the time)."""

    mode: str
    nonce: bytes
    tags: tuple[int, ...]

    @property
    def tagset(self) -> frozenset[int]:
        """The tags as a set (single-event matching looks them up)."""
        return frozenset(self.tags)

    def as_record(self) -> ProtectedRecord:
        """Routing fields only (for :func:`~pubguard.schemes.psguard.record.broker_match`)."""
        return ProtectedRecord("", "", 0, 0, self.mode, self.nonce, self.tags, b"", (), b"")


_new_token_event = tuple.__new__  # TokenEvent from a (mode, nonce, tags) tuple, no checks


_ROUTING_KEYS: Final = frozenset({"m", "n", "t"})
_FLAT_TYPES: Final = (dict, MappingProxyType)  # the core's wire forms: no ABC check needed
_UNPACK_CACHED: Final = 64  # tag counts whose unpacker is kept


_UNPACK: dict[int, Callable[[bytes], tuple[int, ...]]] = {}  # tag count -> int64 unpacker


def _unpacker(n: int) -> Callable[[bytes], tuple[int, ...]]:
    f = _UNPACK.get(n)
    if f is None:
        f = _UNPACK[n] = struct.Struct(f">{n}q").unpack
    return f


def parse_routing(routing: Mapping[str, Any]) -> TokenEvent:
    """A publication's ``{m, n, t}`` routing part decoded (psguard.txt §3.1: the mode, the
    nonce ``r`` and the tags ``F_T(r)``), ValidationError if malformed. On the native
    backend the common case is decoded in one call (``native/src/guard/routing.rs``), which
    leaves anything it does not accept, and the errors' wording, to this function."""
    fast = native.NATIVE
    if fast is not None and type(routing) in _FLAT_TYPES:
        t = fast.token_routing(routing)
        if t is not None:
            return _new_token_event(TokenEvent, t)  # type: ignore[no-any-return]
    if type(routing) not in _FLAT_TYPES and not isinstance(routing, Mapping):
        raise ValidationError("psguard routing is exactly {m, n, t}")
    if routing.keys() != _ROUTING_KEYS:
        raise ValidationError("psguard routing is exactly {m, n, t}")
    m = routing["m"]
    mode = _MODE_NAME.get(m) if type(m) is str else None
    if mode is None:
        raise ValidationError("psguard routing mode must be 'r' or 'd'")
    nonce = routing["n"]
    if type(nonce) is not bytes:
        nonce = _bytes(nonce, "nonce")
    if len(nonce) != (NONCE_BYTES if mode == "randomized" else 0):
        raise ValidationError("psguard nonce has the wrong length for its mode")
    raw = routing["t"]
    if type(raw) is not bytes:
        raw = _bytes(raw, "tags")
    n, odd = divmod(len(raw), 8)
    if odd or n > MAX_EVENT_TAGS:
        raise ValidationError("psguard tags must be whole int64 values, at most 4096")
    tags = _unpacker(n)(raw) if n <= _UNPACK_CACHED else struct.unpack(f">{n}q", raw)
    return _new_token_event(TokenEvent, (mode, nonce, tags))  # type: ignore[no-any-return]


def signed_from_wire(
    event_id: str,
    te: TokenEvent,
    routing: Mapping[str, Any],
    body: bytes,
    meta: Mapping[str, Any],
) -> tuple[str, int, int, bytes, bytes]:
    """``(publisher, ts, epoch, signed message, signature)`` of a publication whose routing part
    decoded to ``te``, with :func:`record_from_wire`'s checks (ValidationError on the same
    deviations) but without building the record: ``record_from_wire(...).message()`` from the
    packed tags as they arrived (a broker's guard path)."""
    if type(meta) in _FLAT_TYPES:  # the common shape, checked inline (a broker's hot path)
        g = meta.get
        pub, ts, epoch, hint, sec, sig = g("p"), g("ts"), g("e"), g("h"), g("s"), g("sig")
        toks = routing.get("t")
        if (
            type(pub) is str
            and pub
            and type(ts) is int
            and type(epoch) is int
            and -(2**63) <= ts < 2**63
            and 0 <= epoch < 2**63
            and type(hint) is bytes
            and type(sec) is bytes
            and not sec
            and type(sig) is bytes
            and type(body) is bytes
            and type(toks) is bytes
        ):
            msg = signed_message_packed(
                event_id, pub, ts, epoch, te.mode, te.nonce, toks, hint, sec, body
            )
            return pub, ts, epoch, msg, sig
    pub, epoch = _meta_head(meta)
    ts = _int(meta["ts"], "timestamp")
    sec = _bytes(meta["s"], "secrets")
    if sec:  # canonical form, as the record re-encodes its decoded secrets
        sec = encode_secrets(decode_secrets(sec))
    msg = signed_message_packed(
        event_id,
        pub,
        ts,
        epoch,
        te.mode,
        te.nonce,
        _bytes(routing["t"], "tags"),
        _bytes(meta["h"], "hint"),
        sec,
        _bytes(body, "body"),
    )
    return pub, ts, epoch, msg, _bytes(meta["sig"], "signature")


def _meta_head(meta: Any) -> tuple[str, int]:
    """A record's ``meta`` has every field and names its publisher and epoch (ValidationError
    otherwise)."""
    if (type(meta) not in _FLAT_TYPES and not isinstance(meta, Mapping)) or not (
        meta.keys() >= _RECORD_META
    ):
        raise ValidationError("psguard meta needs p, ts, e, h, s, sig")
    pub = meta["p"]
    if not isinstance(pub, str) or not pub:
        raise ValidationError("psguard publisher must be a non-empty string")
    epoch = _int(meta["e"], "epoch")
    if epoch < 0:
        raise ValidationError("psguard epoch must be >= 0")
    return pub, epoch


def record_from_wire(
    event_id: str,
    routing: Mapping[str, Any],
    body: bytes,
    meta: Mapping[str, Any],
    *,
    te: TokenEvent | None = None,
) -> ProtectedRecord:
    """The signed record back from a publication (strict: ValidationError on any deviation).
    ``te``: ``parse_routing(routing)`` when the caller already has it (a broker decoded the
    routing part just before its guards run)."""
    if te is None:
        te = parse_routing(routing)
    pub, epoch = _meta_head(meta)
    sec = _bytes(meta["s"], "secrets")
    return ProtectedRecord(
        event_id,
        pub,
        _int(meta["ts"], "timestamp"),
        epoch,
        te.mode,
        te.nonce,
        te.tags,
        _bytes(meta["h"], "hint"),
        decode_secrets(sec) if sec else (),
        _bytes(body, "body"),
        _bytes(meta["sig"], "signature"),
    )


@dataclass(frozen=True, slots=True)
class TokenFilter:
    """A subscription as a broker holds it: per scope, a conjunction of token groups."""

    scopes: tuple[tuple[frozenset[bytes], ...], ...]

    @property
    def canonical(self) -> frozenset[frozenset[frozenset[bytes]]]:
        return frozenset(frozenset(s) for s in self.scopes)

    def as_rows(self) -> ProtectedFilterRows:
        return ProtectedFilterRows(
            "", tuple(tuple(tuple(sorted(g)) for g in s) for s in self.scopes)
        )


def filter_to_wire(rows: ProtectedFilterRows) -> dict[str, Any]:
    return {"g": [[list(g) for g in scope] for scope in rows.groups]}


def parse_filter(wire: Mapping[str, Any]) -> TokenFilter:
    if not isinstance(wire, Mapping) or set(wire) != {"g"}:
        raise ValidationError("psguard filter is exactly {g}")
    scopes = wire["g"]
    if not isinstance(scopes, list | tuple) or len(scopes) > MAX_SCOPES:
        raise ValidationError("psguard filter scopes must be a list")
    out: list[tuple[frozenset[bytes], ...]] = []
    n = 0
    for s in scopes:
        if not isinstance(s, list | tuple) or not s:
            raise ValidationError("a psguard scope is a non-empty list of token groups")
        groups = []
        for g in s:
            if not isinstance(g, list | tuple) or not g:
                raise ValidationError("a psguard token group is a non-empty list of tokens")
            toks = frozenset(_bytes(t, "token") for t in g)
            if any(len(t) != TOKEN_BYTES for t in toks):
                raise ValidationError(f"psguard tokens are {TOKEN_BYTES} bytes")
            n += len(toks)
            groups.append(toks)
        out.append(tuple(groups))
    if n > MAX_FILTER_TOKENS:
        raise ValidationError(f"psguard filter carries more than {MAX_FILTER_TOKENS} tokens")
    return TokenFilter(tuple(out))
