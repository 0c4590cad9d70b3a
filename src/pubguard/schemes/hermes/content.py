"""Event-content and filter encryption (hermes §3.1-3.3, §3.5).

Theory of operation
-------------------
Brokers, never clients, encrypt (§3): the publisher hosting broker (PHB) seals, brokers that
hold the key open. Two modes, one per profile:

- ``hermes-event`` (§3.1): all attributes are one plaintext, sealed under the type's key:
  ``<type_id, timestamp, cipher_text, authentication_tag>`` on the wire as
  ``{"t": type_id, "ts": ms, "b": PHB, "n": counter, "c": ciphertext||tag}``;
- ``hermes-attribute`` (§3.2): each attribute sealed alone under its attribute's key:
  ``<type_id, timestamp, attributes>`` with ``<attr_id, ciphertext, tag>`` tuples, on the wire
  ``{"t", "ts", "b", "n", "a": attr_id || len || ciphertext||tag || ...}`` (one bytes field, so
  the routing map stays flat and cheap to decode); attribute ``i`` uses counter ``n + i``.

AEAD (AES-256-GCM, :mod:`pubguard.crypto.counter_aead`) binds the type id, and in attribute
mode the attribute id, as associated data (§3.5 binds the type id), together with the
timestamp. The key: the group's traffic key in force at the publication timestamp (§4.2),
then the PHB's own subkey ``HKDF(K, PHB id)``; the nonce: the PHB's strictly increasing
counter (:mod:`pubguard.schemes.hermes.nonces`). One cipher context per (group, version, PHB)
is kept, so a run of events pays the key schedule once.

Subscription filters (§3.3) are sealed the same way: the whole constraint list under the
type's key, or each attribute's constraints under that attribute's key; the type id, and the
attribute ids, stay readable so unauthorised brokers route by type. A broker opens what it has
keys for; what it cannot open makes the filter *match all* events of the type (§3.3).

Plaintext values are msgpack-encoded (names inside the event-mode plaintext, so the wire shows
attribute ids only).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from pubguard.crypto.counter_aead import CounterAead, broker_subkey
from pubguard.errors import InvalidToken, ValidationError
from pubguard.model.codec import constraint_from_json
from pubguard.model.constraints import Constraint
from pubguard.model.filters import Filter
from pubguard.schemes.hermes.keygroups import BrokerKeyring
from pubguard.schemes.hermes.nonces import NonceCounter
from pubguard.schemes.hermes.secure_types import SecureEventType

__all__ = [
    "CIPHER_CACHE_MAX",
    "Crypter",
    "OpenedFilter",
    "TypeView",
    "pack_attrs",
    "pack_cache",
    "unpack_attrs",
    "unpack_cache",
]

#: cipher contexts kept per broker (group x key version x PHB); cleared when full
CIPHER_CACHE_MAX: Final = 4096
_TS: Final = struct.Struct(">q")


_LEN: Final = struct.Struct(">I")
MAX_ATTRS: Final = 1024  # attribute tuples one event may carry


def pack_attrs(pairs: list[tuple[bytes, bytes]]) -> bytes:
    """``<attr_id, ciphertext||tag>`` tuples as one field: ``id(32) || len(4) || ct`` each."""
    return b"".join(aid + _LEN.pack(len(ct)) + ct for aid, ct in pairs)


def unpack_attrs(blob: bytes) -> list[tuple[bytes, bytes]]:
    """The inverse of :func:`pack_attrs`; ValidationError for a malformed field."""
    if type(blob) is not bytes:
        raise ValidationError("hermes attributes must be bytes")
    out: list[tuple[bytes, bytes]] = []
    i, n = 0, len(blob)
    while i < n:
        if n - i < 36 or len(out) >= MAX_ATTRS:
            raise ValidationError("malformed hermes attribute tuple")
        aid = blob[i : i + 32]
        (ln,) = _LEN.unpack_from(blob, i + 32)
        j = i + 36 + ln
        if j > n:
            raise ValidationError("malformed hermes attribute tuple")
        out.append((aid, blob[i + 36 : j]))
        i = j
    return out


def pack_cache(values: Mapping[str, Any], view: TypeView) -> bytes:
    """§3.4's plaintext cache, one bytes field: msgpack ``[[attr_id, value], ...]``."""
    return _pack([[view.ids[k], v] for k, v in values.items()])


def unpack_cache(blob: Any, view: TypeView) -> dict[str, Any]:
    """Attribute name -> cached value (ids this broker does not know are left out)."""
    if type(blob) is not bytes:
        raise ValidationError("hermes cache must be bytes")
    try:
        items = msgpack.unpackb(blob, raw=False, max_array_len=MAX_ATTRS)
        names = view.names
        return {names[bytes(a)]: v for a, v in items if bytes(a) in names}
    except (ValueError, TypeError, msgpack.UnpackException):
        raise ValidationError("malformed hermes cache") from None


def _pack(v: Any) -> bytes:
    return msgpack.packb(v, use_bin_type=True)


def _unpack(b: bytes) -> Any:
    return msgpack.unpackb(b, raw=False)


@dataclass(frozen=True, slots=True)
class TypeView:
    """A secure type's names and ids, precomputed for the hot path."""

    stype: SecureEventType
    type_id: bytes
    type_group: str  # event-mode key group: the type id in hex
    ids: Mapping[str, bytes]  # attribute name -> attribute id
    names: Mapping[bytes, str]  # attribute id -> attribute name

    @classmethod
    def of(cls, stype: SecureEventType) -> TypeView:
        ids = stype.attribute_ids
        return cls(stype, stype.type_id, stype.type_id.hex(), ids, {v: k for k, v in ids.items()})


def _aad_event(tid: bytes, ts: int) -> bytes:
    return b"hermes-e\x00" + tid + _TS.pack(ts)


def _aad_attr(tid: bytes, aid: bytes, ts: int) -> bytes:
    return b"hermes-a\x00" + tid + aid + _TS.pack(ts)


def _aad_filter(tid: bytes, aid: bytes, ts: int) -> bytes:
    return b"hermes-f\x00" + tid + aid + _TS.pack(ts)


@dataclass(frozen=True, slots=True)
class OpenedFilter:
    """What one broker makes of a subscription filter: its type id, the constraints it could
    read (None: none) and whether some part stayed sealed (then it matches more widely)."""

    type_id: bytes
    readable: Filter | None
    sealed_parts: int

    @property
    def match_all(self) -> bool:
        return self.readable is None


class Crypter:
    """One broker's sealing and opening, over its keyring and nonce counter."""

    __slots__ = ("_ciphers", "broker", "counter", "keyring", "mode")

    def __init__(
        self, broker: str, mode: str, keyring: BrokerKeyring, counter: NonceCounter
    ) -> None:
        if mode not in ("event", "attribute"):
            raise ValidationError("mode must be 'event' or 'attribute'")
        self.broker = broker
        self.mode = mode
        self.keyring = keyring
        self.counter = counter
        self._ciphers: dict[tuple[str, int, str], CounterAead] = {}

    def __repr__(self) -> str:
        return f"Crypter({self.broker!r}, {self.mode})"

    # -- keys --------------------------------------------------------------------------------
    def _cipher(self, group: str, ts_ms: int, phb: str) -> CounterAead | None:
        key = self.keyring.key_at(group, ts_ms / 1000.0)
        if key is None:
            return None
        ck = (group, key.version, phb)
        c = self._ciphers.get(ck)
        if c is None:
            if len(self._ciphers) >= CIPHER_CACHE_MAX:
                self._ciphers.clear()
            c = self._ciphers[ck] = CounterAead(broker_subkey(key.key, phb))
        return c

    def can_read(self, group: str, ts_ms: int) -> bool:
        return self.keyring.key_at(group, ts_ms / 1000.0) is not None

    # -- events ------------------------------------------------------------------------------
    def seal_event(self, view: TypeView, attrs: Mapping[str, Any], ts_ms: int) -> dict[str, Any]:
        """The PHB's sealing of one event (``StateError``-free: raises ValidationError for an
        attribute outside the type, :class:`InvalidToken` when it holds no key)."""
        tid = view.type_id
        if self.mode == "event":
            c = self._cipher(view.type_group, ts_ms, self.broker)
            if c is None:
                raise InvalidToken("this broker holds no key for the type")
            n = self.counter.take(1)
            return {
                "t": tid,
                "ts": ts_ms,
                "b": self.broker,
                "n": n,
                "c": c.seal(n, _pack(dict(attrs)), _aad_event(tid, ts_ms)),
            }
        items = []
        for name, v in attrs.items():
            aid = view.ids.get(name)
            if aid is None:
                raise ValidationError(f"type {view.stype.name!r} has no attribute {name!r}")
            c = self._cipher(aid.hex(), ts_ms, self.broker)
            if c is None:
                raise InvalidToken("this broker holds no key for an attribute")
            items.append((aid, c, _pack(v)))
        n = self.counter.take(max(1, len(items)))
        sealed = [
            (aid, c.seal(n + i, pt, _aad_attr(tid, aid, ts_ms)))
            for i, (aid, c, pt) in enumerate(items)
        ]
        return {"t": tid, "ts": ts_ms, "b": self.broker, "n": n, "a": pack_attrs(sealed)}

    def open_event(
        self,
        view: TypeView,
        routing: Mapping[str, Any],
        skip: frozenset[str] = frozenset(),
        pairs: list[tuple[bytes, bytes]] | None = None,
    ) -> dict[str, Any]:
        """Attribute name -> value for every attribute this broker can open (names in
        ``skip`` are not opened: the caller has them from a plaintext cache; ``pairs``: the
        attribute tuples if the caller unpacked them already). Ciphertexts it has no key for,
        or that fail to authenticate, are left out."""
        tid, ts, phb, n = view.type_id, routing["ts"], routing["b"], routing["n"]
        if self.mode == "event":
            if skip:
                return {}
            c = self._cipher(view.type_group, ts, phb)
            if c is None:
                return {}
            try:
                out = _unpack(c.open(n, routing["c"], _aad_event(tid, ts)))
            except InvalidToken:
                return {}
            return dict(out) if isinstance(out, dict) else {}
        res: dict[str, Any] = {}
        for i, (aid, blob) in enumerate(pairs if pairs is not None else unpack_attrs(routing["a"])):
            name = view.names.get(aid)
            if name is None or name in skip:
                continue
            c = self._cipher(aid.hex(), ts, phb)
            if c is None:
                continue
            try:
                res[name] = _unpack(c.open(n + i, blob, _aad_attr(tid, aid, ts)))
            except InvalidToken:
                continue
        return res

    # -- filters (§3.3) ----------------------------------------------------------------------
    def seal_filter(self, view: TypeView, f: Filter, ts_ms: int) -> dict[str, Any]:
        """A subscription filter sealed whole (event mode) or per attribute."""
        tid = view.type_id
        if self.mode == "event":
            c = self._cipher(view.type_group, ts_ms, self.broker)
            if c is None:
                raise InvalidToken("this broker holds no key for the type")
            n = self.counter.take(1)
            pt = _pack([k.to_json() for k in f.constraints])
            ct = c.seal(n, pt, _aad_filter(tid, b"", ts_ms))
            return {"t": tid, "ts": ts_ms, "b": self.broker, "n": n, "c": ct}
        by_attr: dict[bytes, list[Constraint]] = {}
        for k in f.constraints:
            aid = view.ids.get(k.name)
            if aid is None:
                raise ValidationError(f"type {view.stype.name!r} has no attribute {k.name!r}")
            by_attr.setdefault(aid, []).append(k)
        n = self.counter.take(len(by_attr))
        parts = []
        for i, (aid, cs) in enumerate(sorted(by_attr.items())):
            c = self._cipher(aid.hex(), ts_ms, self.broker)
            if c is None:
                raise InvalidToken("this broker holds no key for an attribute")
            pt = _pack([k.to_json() for k in cs])
            parts.append([aid, c.seal(n + i, pt, _aad_filter(tid, aid, ts_ms))])
        return {"t": tid, "ts": ts_ms, "b": self.broker, "n": n, "a": parts}

    def open_filter(self, view: TypeView | None, wire: Mapping[str, Any]) -> OpenedFilter:
        """What this broker can read of a sealed filter (``view`` None: it knows no type)."""
        tid = wire["t"]
        if view is None:
            parts = 1 if "c" in wire else len(wire["a"])
            return OpenedFilter(tid, None, parts)
        ts, phb, n = wire["ts"], wire["b"], wire["n"]
        if "c" in wire:
            c = self._cipher(view.type_group, ts, phb)
            if c is None:
                return OpenedFilter(tid, None, 1)
            cs = _unpack(c.open(n, wire["c"], _aad_filter(tid, b"", ts)))  # InvalidToken: forged
            return OpenedFilter(tid, Filter(tuple(constraint_from_json(x) for x in cs)), 0)
        read: list[Constraint] = []
        sealed = 0
        for i, (aid, blob) in enumerate(wire["a"]):
            c = self._cipher(aid.hex(), ts, phb) if aid in view.names else None
            if c is None:
                sealed += 1
                continue
            cs = _unpack(c.open(n + i, blob, _aad_filter(tid, aid, ts)))
            read += [constraint_from_json(x) for x in cs]
        return OpenedFilter(tid, Filter(tuple(read)) if read else None, sealed)
