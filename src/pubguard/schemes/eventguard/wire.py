"""EventGuard wire forms: the publication's fields and the digest its publisher signs
(eventguard.txt §4.4, §4.7), the AEAD associated data of its body and wrapped keys, topic
tokens ``T(w)`` (§4.1), and the strict parsers a broker runs on every publication (with the inlined
leaf encoding of its hot path). The wire table is in the broker face's docstring
(:mod:`pubguard.schemes.eventguard.broker`).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from pubguard import native
from pubguard.crypto import H, aad_for, sha256_fast
from pubguard.errors import ValidationError
from pubguard.schemes.common.guards import (
    pack_fields,
)
from pubguard.schemes.common.merkle import (
    MAX_BATCH,
    PACKED_PATH_LENGTHS,
    check_packed_path,
    unpack_path,
)

__all__ = [
    "EVENTGUARD",
    "LEAF_TAG",
    "MAX_TOPICS",
    "ROOT_TAG",
    "TOKEN_BYTES",
    "PublicationFields",
    "PublicationMeta",
    "body_aad",
    "key_aad",
    "leaf_digest",
    "leaf_digest_fast",
    "pack_items",
    "pack_tokens",
    "parse_meta",
    "parse_publication",
    "parse_tokens",
    "unpack_items",
]

EVENTGUARD: Final = "eventguard"
MAX_TOPICS: Final = 64  # topics one publication may carry
TOKEN_BYTES: Final = 32
ROOT_TAG: Final = b"pubguard/eventguard/root/v2\x00"
LEAF_TAG: Final = b"pubguard/eventguard/leaf/v1\x00"
_ROUTING_KEYS: Final = frozenset({"tokens"})
_U32 = struct.Struct(">I").pack
_U32_AT = struct.Struct(">I").unpack_from


def leaf_digest(
    event_id: str,
    profile: str,
    publisher: str,
    epoch: int,
    ts: float,
    tokens: Sequence[bytes],
    wrapped: Sequence[bytes],
    body: bytes,
) -> bytes:
    """The publisher-signed digest of one publication (everything but the signature/path)."""
    return H(
        pack_fields(
            LEAF_TAG,
            event_id,
            profile,
            publisher,
            epoch,
            float(ts),
            len(tokens),
            *tokens,
            *wrapped,
            H(body),
        )
    )


def body_aad(event_id: str, epoch: int) -> bytes:
    """AEAD associated data of ``E_Kr(pbl)``: binds the ciphertext to its event and epoch."""
    return aad_for(b"eventguard/pbl", "", epoch, event_id.encode())


def key_aad(event_id: str, epoch: int, token: bytes) -> bytes:
    """AEAD associated data of ``E_K(w,e)(Kr)``: binds the wrapped key to token and event."""
    return aad_for(b"eventguard/kr", "", epoch, token, event_id.encode())


@dataclass(frozen=True, slots=True)
class PublicationFields:
    """A publication's ``meta`` after strict parsing (shared by brokers and subscribers)."""

    publisher: str
    epoch: int
    ts: float
    tokens: tuple[bytes, ...]
    wrapped: tuple[bytes, ...]
    permits: tuple[bytes, ...]
    sig: bytes
    index: int = 0
    size: int = 1
    path: tuple[bytes, ...] = field(default=())

    def leaf(self, event_id: str, profile: str, body: bytes) -> bytes:
        return leaf_digest(
            event_id,
            profile,
            self.publisher,
            self.epoch,
            self.ts,
            self.tokens,
            self.wrapped,
            body,
        )


def pack_items(items: Sequence[bytes]) -> bytes:
    """Byte strings as one wire value: each as a 4-byte big-endian length then its bytes."""
    return b"".join(_U32(len(x)) + x for x in items)


def unpack_items(blob: Any, what: str, n: int) -> tuple[bytes, ...]:
    """Inverse of :func:`pack_items`, exactly ``n`` items; ValidationError otherwise."""
    if type(blob) is not bytes:
        raise ValidationError(f"eventguard {what} must be one bytes value")
    end = len(blob)
    if n == 1 and end >= 4 and _U32_AT(blob, 0)[0] == end - 4:  # one item: the common case
        return (blob[4:],)
    out, i = [], 0
    while i < end:
        if i + 4 > end:
            raise ValidationError(f"eventguard {what}: truncated length")
        (k,) = _U32_AT(blob, i)
        i += 4
        if i + k > end:
            raise ValidationError(f"eventguard {what}: truncated item")
        out.append(blob[i : i + k])
        i += k
    if len(out) != n:
        raise ValidationError(f"eventguard {what} must have {n} entries")
    return tuple(out)


_FLAT_TYPES: Final = (dict, MappingProxyType)  # the core's wire forms: no ABC check needed


def parse_tokens(routing: Mapping[str, Any]) -> tuple[bytes, ...]:
    """A publication's topic tokens ``T(w_1) || ...`` (eventguard.txt §4.4), ValidationError
    if malformed. On the native backend the common case is decoded in one call
    (``native/src/guard/routing.rs``), which leaves anything it does not accept, and the
    errors' wording, to this function."""
    fast = native.NATIVE
    if fast is not None and type(routing) in _FLAT_TYPES:
        toks = fast.eg_tokens(routing)
        if toks is not None:
            return toks  # type: ignore[no-any-return]
    if type(routing) not in _FLAT_TYPES and not isinstance(routing, Mapping):
        raise ValidationError("eventguard routing is exactly {tokens: T(w_1) || ...}")
    if routing.keys() != _ROUTING_KEYS:
        raise ValidationError("eventguard routing is exactly {tokens: T(w_1) || ...}")
    blob = routing["tokens"]
    if type(blob) is not bytes or len(blob) % TOKEN_BYTES:
        raise ValidationError(f"eventguard tokens must be whole {TOKEN_BYTES}-byte tokens")
    if not 1 <= len(blob) // TOKEN_BYTES <= MAX_TOPICS:
        raise ValidationError(f"a publication carries 1..{MAX_TOPICS} tokens")
    if len(blob) == TOKEN_BYTES:
        return (blob,)
    return tuple(blob[i : i + TOKEN_BYTES] for i in range(0, len(blob), TOKEN_BYTES))


def pack_tokens(tokens: Sequence[bytes]) -> bytes:
    """The routing part's ``tokens`` value."""
    return b"".join(tokens)


def parse_publication(
    routing: Mapping[str, Any],
    meta: Mapping[str, Any],
    *,
    tokens: tuple[bytes, ...] | None = None,
) -> PublicationFields:
    """Strictly parse a publication's routing + meta; ValidationError when malformed.
    ``tokens``: ``parse_tokens(routing)`` when the caller already has it (decode once)."""
    if tokens is None:
        tokens = parse_tokens(routing)
    p, e, ts, sig, mi, mn, path, wrapped, permits = parse_meta(meta, len(tokens))
    return PublicationFields(
        publisher=p,
        epoch=e,
        ts=ts,
        tokens=tokens,
        wrapped=wrapped,
        permits=permits,
        sig=sig,
        index=mi,
        size=mn,
        path=unpack_path(path),
    )


#: what :func:`parse_meta` returns: publisher, epoch, ts, sig, Merkle index, batch size, packed
#: path, wrapped keys, permits (a tuple, built on every publication at every broker)
PublicationMeta = tuple[
    str, int, float, bytes, int, int, bytes, tuple[bytes, ...], tuple[bytes, ...]
]


def parse_meta(meta: Mapping[str, Any], n: int) -> PublicationMeta:
    """``(publisher, epoch, ts, sig, index, size, packed path, wrapped keys, permits)`` of a
    publication carrying ``n`` tokens (parse_publication's checks; the path left packed)."""
    g = meta.get
    p, e, ts, sig, mi, mn, mp = (
        g("p"),
        g("e"),
        g("ts"),
        g("sig"),
        g("mi", 0),
        g("mn", 1),
        g("mp", b""),
    )
    if (  # the common shape, checked with exact types (a broker's hot path)
        type(p) is str
        and p
        and type(e) is int
        and e >= 0
        and (type(ts) is float or type(ts) is int)
        and ts == ts
        and type(sig) is bytes
        and type(mi) is int
        and type(mn) is int
        and 0 <= mi < mn <= MAX_BATCH
        and type(mp) is bytes
        and len(mp) in PACKED_PATH_LENGTHS
    ):
        wrapped = unpack_items(g("wk"), "wrapped keys", n)
        permits = unpack_items(g("ad"), "advertisement permits", n)
        return p, e, float(ts), sig, mi, mn, mp, wrapped, permits
    if not isinstance(p, str) or not p:
        raise ValidationError("eventguard publisher must be a non-empty string")
    if isinstance(e, bool) or not isinstance(e, int) or e < 0:
        raise ValidationError("eventguard epoch must be a non-negative integer")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or ts != ts:
        raise ValidationError("eventguard timestamp must be a number")
    if not isinstance(sig, bytes):
        raise ValidationError("eventguard signature must be bytes")
    mi, mn = meta.get("mi", 0), meta.get("mn", 1)
    if isinstance(mi, bool) or isinstance(mn, bool) or not isinstance(mi, int):
        raise ValidationError("eventguard Merkle index must be an integer")
    if not isinstance(mn, int) or not 0 <= mi < mn <= MAX_BATCH:
        raise ValidationError("eventguard Merkle index/size out of range")
    path = check_packed_path(meta.get("mp", b""))
    wrapped = unpack_items(meta.get("wk"), "wrapped keys", n)
    permits = unpack_items(meta.get("ad"), "advertisement permits", n)
    return p, e, float(ts), sig, mi, mn, path, wrapped, permits


_F64 = struct.Struct(">d").pack
_I64 = struct.Struct(">q").pack


def _lp_str(x: str) -> bytes:
    b = x.encode()
    return b"s" + _U32(len(b)) + b


_PROFILE_LP: Final = {EVENTGUARD: _lp_str(EVENTGUARD)}


def leaf_digest_fast(
    event_id: str,
    profile: str,
    publisher: str,
    epoch: int,
    ts: float,
    tokens: Sequence[bytes],
    wrapped: Sequence[bytes],
    body: bytes,
) -> bytes:
    """:func:`leaf_digest` with :func:`~pubguard.schemes.common.guards.pack_fields`'s encoding
    written out for these field types (a broker's hot path; a test checks they agree)."""
    parts = [
        LEAF_TAG,
        _lp_str(event_id),
        _PROFILE_LP.get(profile) or _lp_str(profile),
        _lp_str(publisher),
        b"i",
        _I64(epoch),
        b"f",
        _F64(ts),
        b"i",
        _I64(len(tokens)),
    ]
    for x in (*tokens, *wrapped, sha256_fast(body).digest()):
        parts += (b"b", _U32(len(x)), x)
    return sha256_fast(b"".join(parts)).digest()
