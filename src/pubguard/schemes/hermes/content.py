"""Event-content and filter encryption (hermes §3.1-3.3, §3.5).

Theory of operation
-------------------
Brokers, never clients, encrypt (§3): the publisher hosting broker (PHB) seals, brokers that
hold the key open. Two modes, one per profile:

- ``hermes-event`` (§3.1): all attributes are one plaintext, sealed under the type's key:
  ``<type_id, timestamp, cipher_text, authentication_tag>``;
- ``hermes-attribute`` (§3.2): each attribute sealed alone under its attribute's key:
  ``<type_id, timestamp, attributes>`` with ``<attr_id, ciphertext, tag>`` tuples; attribute
  ``i`` uses counter ``n + i``.

On the wire a sealed event's routing is ``{"t": type_id, "s": sealed}`` (and ``"k"``, the
plaintext cache of §3.4, between brokers that may read it): ``sealed`` is one opaque bytes
field, ``ts (8) || n (8) || len(PHB) (2) || PHB || body`` (:class:`Sealed`), the body being
``ciphertext||tag`` (event mode) or the tuples ``attr_id (32) || len (4) || ciphertext||tag``
(attribute mode, :func:`pack_attrs`). Routing needs the type id only (§3.3: unauthorised
brokers route by type), so a broker that only forwards never parses ``sealed``; one that
opens or filters reads it once (:meth:`Sealed.parse`, its tuples when it needs them).

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

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgpack

from pubguard import native as nb
from pubguard.crypto import KeyedHash, SecretBytes, hkdf, random_bytes
from pubguard.crypto.counter_aead import (
    CounterAead,
    broker_subkey,
    open_batch,
    open_each,
    seal_batch,
    seal_each,
)
from pubguard.errors import InvalidToken, StateError, ValidationError
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
    "Sealed",
    "TypeView",
    "open_attribute_run",
    "pack_attrs",
    "pack_cache",
    "pack_sealed",
    "seal_attribute_publish_run",
    "seal_attribute_run",
    "unpack_attrs",
    "unpack_cache",
]

#: cipher contexts kept per broker (group x key version x PHB); cleared when full
CIPHER_CACHE_MAX: Final = 4096
_TS: Final = struct.Struct(">q")


_LEN: Final = struct.Struct(">I")
_WIRE_ID_INFO: Final = b"pubguard-hermes-wire-id\x00"
WIRE_ID_BYTES: Final = 16  # a wire id is 32 hex characters, as under the other profiles
#: exact value types of the model (``pubguard.model.values``; bool before int on purpose)
_TYPE_NAMES: Final[dict[type, str]] = {bool: "bool", int: "int", float: "float", str: "str"}
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


#: ``seal_attribute_run``'s job: type id, ts (ms), first counter, PHB id, the application's
#: id, the attributes, and attribute name -> (attribute id, cipher) of the keys in force
_SealJob: TypeAlias = tuple[
    bytes, int, int, bytes, str, Mapping[str, Any], Mapping[str, tuple[bytes, CounterAead]]
]
#: ``open_attribute_run``'s job: type id, ts (ms), first counter, the attribute tuples, and
#: attribute id -> (attribute name, cipher) of the attributes to open
_OpenJob: TypeAlias = tuple[bytes, int, int, bytes, Mapping[bytes, tuple[str, CounterAead]]]

#: a sealed part's header: timestamp (ms), first counter, length of the PHB id (§3.5)
_HDR: Final = struct.Struct(">qQH")
MAX_PHB_BYTES: Final = 1024


def pack_sealed(ts_ms: int, n: int, phb: bytes, body: bytes) -> bytes:
    """A sealed event's one opaque routing field: ``ts || n || len(PHB) || PHB || body``."""
    try:
        return _HDR.pack(ts_ms, n, len(phb)) + phb + body
    except struct.error:
        raise ValidationError("hermes timestamp or counter out of range") from None


class Sealed:
    """A sealed event's routing field, parsed (:func:`pack_sealed`). Only a broker that opens
    or filters parses it; the attribute tuples are unpacked when first needed."""

    __slots__ = ("_pairs", "body", "n", "phb", "ts")

    def __init__(self, ts: int, n: int, phb: str, body: bytes) -> None:
        self.ts = ts
        self.n = n
        self.phb = phb
        self.body = body
        self._pairs: list[tuple[bytes, bytes]] | None = None

    @classmethod
    def parse(cls, blob: Any) -> Sealed:
        """ValidationError for anything but a well-formed header."""
        if type(blob) is not bytes or len(blob) < _HDR.size:
            raise ValidationError("malformed hermes sealed event")
        ts, n, ln = _HDR.unpack_from(blob)
        end = _HDR.size + ln
        if not 0 < ln <= MAX_PHB_BYTES or len(blob) < end:
            raise ValidationError("malformed hermes sealed event")
        try:
            phb = blob[_HDR.size : end].decode()
        except UnicodeDecodeError:
            raise ValidationError("malformed hermes sealed event") from None
        return cls(ts, n, phb, blob[end:])

    def pairs(self) -> list[tuple[bytes, bytes]]:
        """The attribute tuples (attribute mode; ValidationError if malformed)."""
        if self._pairs is None:
            self._pairs = unpack_attrs(self.body)
        return self._pairs


def seal_attribute_run(jobs: list[_SealJob]) -> list[bytes]:
    """Every event of a micro-batch sealed per attribute (§3.2, §3.5), as its routing field
    (:func:`pack_sealed`): ``jobs`` are ``(type_id, ts_ms, n, PHB, app_id, attrs, keys)``, ``keys``
    the attribute name -> ``(attr_id, CounterAead)`` of the keys in force. Attribute ``i``'s
    plaintext is msgpack ``[app_id, value]``, its associated data ``"hermes-a\\0" || type id
    || attr id || ts``, its nonce counter ``n + i``. One native call when the extension is
    built (``native/src/hermes.rs``), this loop otherwise; the two give the same bytes."""
    nat = nb.NATIVE
    if nat is not None and jobs:
        try:
            return nat.hermes_seal_run(jobs)  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
            pass  # something the extension does not take: the reference decides (and words it)
    return _seal_attribute_run(jobs)


def seal_attribute_publish_run(jobs: list[_SealJob], crypter: Crypter) -> list[tuple[bytes, str]]:
    """:func:`seal_attribute_run` of a micro-batch and each event's wire id
    (``crypter.wire_id`` of its type id and application id) beside its sealed field: the
    PHB's whole per-event work in one native call (``hermes_seal_publish_run``), or the
    two references."""
    nat = nb.NATIVE
    key = crypter.native_wire_key()
    if nat is not None and key is not None and jobs:
        try:
            return nat.hermes_seal_publish_run(jobs, key)  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
            pass  # something the extension does not take: the reference decides (and words it)
    blobs = _seal_attribute_run(jobs)
    ids = crypter.wire_ids([(j[0], j[4]) for j in jobs]) if jobs else []
    return list(zip(blobs, ids, strict=True))


def _seal_attribute_run(jobs: list[_SealJob]) -> list[bytes]:
    out = []
    packer = msgpack.Packer(use_bin_type=True)
    pack = packer.pack
    for tid, ts, n, phb, app_id, attrs, keys in jobs:
        head = _AAD_ATTR + tid
        tail = _TS.pack(ts)
        pt0 = b"\x92" + pack(app_id)  # a 2-array's head, then its items
        items = []
        aids = []
        for name, v in attrs.items():
            aid, c = keys[name]
            aids.append(aid)
            items.append((c, pt0 + pack(v), head + aid + tail))
        sealed = seal_each(n, items)
        body = pack_attrs(list(zip(aids, sealed, strict=True)))
        out.append(pack_sealed(ts, n, phb, body))
    return out


def open_attribute_run(jobs: list[_OpenJob]) -> list[tuple[dict[str, Any], str | None] | None]:
    """Open every event of a run per attribute: ``jobs`` are ``(type_id, ts_ms, n, body,
    keys)`` with
    ``body`` the attribute tuples (:meth:`Sealed.body`) and ``keys`` attribute id -> ``(name,
    CounterAead)`` for the attributes to open. Per event: attribute name -> value for every
    tuple that authenticates and unpacks, and the application's id sealed with them; None
    for a malformed body. Native when built (``native/src/hermes.rs``), the same results."""
    nat = nb.NATIVE
    if nat is not None and jobs:
        try:
            return nat.hermes_open_run(jobs)  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
            pass  # an input, or a plaintext, the extension does not take: the reference
    return _open_attribute_run(jobs)


def _open_attribute_run(jobs: list[_OpenJob]) -> list[tuple[dict[str, Any], str | None] | None]:
    out: list[tuple[dict[str, Any], str | None] | None] = []
    for tid, ts, n, body, keys in jobs:
        head = _AAD_ATTR + tid
        try:
            pairs = unpack_attrs(body)
        except ValidationError:
            out.append(None)
            continue
        tail = _TS.pack(ts)
        names: list[str | None] = []
        items: list[tuple[CounterAead, bytes, bytes] | None] = []
        for aid, blob in pairs:
            hit = keys.get(aid)
            names.append(None if hit is None else hit[0])
            items.append(None if hit is None else (hit[1], blob, head + aid + tail))
        out.append(_finish_open(names, open_each(n, items)))
    return out


def pack_cache(values: Mapping[str, Any], view: TypeView, app_id: str | None = None) -> bytes:
    """§3.4's plaintext cache, one bytes field: msgpack ``[[attr_id, value], ...]``, and
    ``[b"", app_id]`` first when the application's event id is known (a broker that reads
    from the cache does not decrypt, so the id it would have found sealed rides along)."""
    head = [[b"", app_id]] if app_id else []
    return _pack(head + [[view.ids[k], v] for k, v in values.items()])


def unpack_cache(blob: Any, view: TypeView) -> tuple[dict[str, Any], str | None]:
    """Attribute name -> cached value (ids this broker does not know are left out), and the
    application's event id if the cache carries it."""
    if type(blob) is not bytes:
        raise ValidationError("hermes cache must be bytes")
    try:
        items = msgpack.unpackb(blob, raw=False, max_array_len=MAX_ATTRS)
        names = view.names
        app_id = None
        if items and items[0][0] == b"" and isinstance(items[0][1], str):
            app_id = items.pop(0)[1] or None
        return {names[bytes(a)]: v for a, v in items if bytes(a) in names}, app_id
    except (ValueError, TypeError, IndexError, msgpack.UnpackException):
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
    types: Mapping[str, str]  # attribute name -> its declared value type
    # attribute name -> the head of its associated data, ``_AAD_ATTR || type id || attr id``
    aad_heads: Mapping[str, bytes]
    name: str  # the type's name (what a delivery names it by)
    # attribute name -> the exact value types its declared type takes (``type_check``)
    accepts: Mapping[str, frozenset[type]]

    @classmethod
    def of(cls, stype: SecureEventType) -> TypeView:
        ids = stype.attribute_ids
        types = {a.name: a.type for a in stype.etype.attributes}
        tid = stype.type_id
        heads = {k: b"hermes-a\x00" + tid + aid for k, aid in ids.items()}
        accepts = {
            k: frozenset(
                t for t, n in _TYPE_NAMES.items() if n == w or (w == "float" and n == "int")
            )
            for k, w in types.items()
        }
        names = {v: k for k, v in ids.items()}
        return cls(stype, tid, tid.hex(), ids, names, types, heads, stype.name, accepts)

    def type_check(self, attrs: Mapping[str, Any]) -> None:
        """ValidationError unless ``attrs`` conform to the type (``EventType.validate`` of
        ``Event(attrs)``, in one pass: the PHB's check of every publication, §2.1)."""
        accepts = self.accepts
        for k, v in attrs.items():  # the common case: exact types, finite floats
            ok = accepts.get(k)
            if ok is None or type(v) not in ok or (type(v) is float and not math.isfinite(v)):
                break
        else:
            return
        types = self.types  # the first failure, worded
        for k, v in attrs.items():
            want = types.get(k)
            if want is None:
                raise ValidationError(f"event type {self.stype.name!r} has no attribute {k!r}")
            t = _TYPE_NAMES.get(type(v))
            if t is None:
                raise ValidationError(f"attribute {k!r} must be int, float, str or bool")
            if t != want and not (want == "float" and t == "int"):
                raise ValidationError(f"attribute {k!r} must be {want}, got {t}")
            if t == "float" and not math.isfinite(v):
                raise ValidationError(f"attribute {k!r} must be a finite number")


def _finish_event_seal(tid: bytes, ts: int, n: int, phb: bytes, sealed: bytes) -> dict[str, Any]:
    """An event-mode sealed routing (``Crypter.seal_events``)."""
    return {"t": tid, "s": pack_sealed(ts, n, phb, sealed)}


def _finish_open(
    names: list[str | None] | None, opened: list[bytes | None]
) -> tuple[dict[str, Any], str | None]:
    """Values and the application's id from an event's opened plaintexts (``names`` None:
    the one event-mode plaintext). What fails to authenticate, or is authentic but
    malformed (the PHB's fault), is left out."""
    if names is None:
        pt = opened[0]
        if pt is None:
            return {}, None
        try:
            out = _unpack(pt)
        except ValueError:
            return {}, None
        if not (isinstance(out, list) and len(out) == 2 and isinstance(out[1], dict)):
            return {}, None
        return dict(out[1]), out[0] if isinstance(out[0], str) and out[0] else None
    res: dict[str, Any] = {}
    app_id = None
    for name, pt in zip(names, opened, strict=True):
        if pt is None or name is None:
            continue
        try:
            i, value = _unpack(pt)
        except (ValueError, TypeError):
            continue
        res[name] = value
        if app_id is None and isinstance(i, str) and i:
            app_id = i
    return res, app_id


def _aad_event(tid: bytes, ts: int) -> bytes:
    return b"hermes-e\x00" + tid + _TS.pack(ts)


#: attribute-mode associated data: ``_AAD_ATTR || type id || attribute id || ts`` (§3.5)
_AAD_ATTR: Final = b"hermes-a\x00"


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


@dataclass(frozen=True, slots=True)
class _Plan:
    """One (type, PHB)'s attribute ciphers in force (``Crypter._plan``)."""

    stamp: int  # the keyring's stamp when made
    since: int  # in force from (ms)
    by_name: Mapping[str, tuple[bytes, CounterAead]]
    by_aid: Mapping[bytes, tuple[str, CounterAead]]


class Crypter:
    """One broker's sealing and opening, over its keyring and nonce counter."""

    __slots__ = (
        "_ciphers",
        "_id_hash",
        "_id_native",
        "_plans",
        "broker",
        "counter",
        "keyring",
        "mode",
    )

    def __init__(
        self,
        broker: str,
        mode: str,
        keyring: BrokerKeyring,
        counter: NonceCounter,
        wire_id_key: bytes | SecretBytes | None = None,
    ) -> None:
        if mode not in ("event", "attribute"):
            raise ValidationError("mode must be 'event' or 'attribute'")
        if wire_id_key is None:  # a fresh secret held in memory (see ``wire_id``)
            wire_id_key = SecretBytes(random_bytes(32))
        self.broker = broker
        self.mode = mode
        self.keyring = keyring
        self.counter = counter
        self._ciphers: dict[tuple[str, int, str], CounterAead] = {}
        # (type id, PHB) -> the attribute ciphers in force (``_plan``)
        self._plans: dict[tuple[bytes, str], _Plan] = {}
        # the wire-id key: this PHB's own, not a group key, so it survives every refresh
        info = _WIRE_ID_INFO + mode.encode() + b"\x00" + broker.encode()
        id_key = hkdf(wire_id_key, info=info)
        self._id_hash = KeyedHash(id_key)
        # the same key in the extension (``WireIds``), when it is built
        self._id_native = None if nb.NATIVE is None else nb.NATIVE.HermesWireIdKey(id_key)

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

    def _plan(self, view: TypeView, ts_ms: int, phb: str) -> _Plan:
        """The ciphers of every attribute key this broker holds in force at ``ts_ms`` (§4.2)
        for PHB ``phb``, by name (sealing) and by attribute id (opening): one look-up per
        event instead of one per attribute, kept while the keyring is unchanged and the event
        is not older than its keys."""
        pk = (view.type_id, phb)
        plan = self._plans.get(pk)
        stamp = self.keyring.stamp
        if plan is not None and plan.stamp == stamp and ts_ms >= plan.since:
            return plan
        by_name: dict[str, tuple[bytes, CounterAead]] = {}
        by_aid: dict[bytes, tuple[str, CounterAead]] = {}
        since = 0
        current = True
        for aid, name in view.names.items():
            g = aid.hex()
            c = self._cipher(g, ts_ms, phb)
            if c is None:
                continue
            by_name[name] = (aid, c)
            by_aid[aid] = (name, c)
            cur = self.keyring.current(g)
            if cur is None or cur.valid_from > ts_ms / 1000.0:
                current = False  # an older key (grace period): not a plan for later events
            else:
                since = max(since, math.ceil(cur.valid_from * 1000))
        out = _Plan(stamp, since, by_name, by_aid)
        if current:
            if len(self._plans) >= CIPHER_CACHE_MAX:
                self._plans.clear()
            self._plans[pk] = out
        return out

    def can_read(self, group: str, ts_ms: int) -> bool:
        return self.keyring.key_at(group, ts_ms / 1000.0) is not None

    # -- events ------------------------------------------------------------------------------
    def seal_event(
        self, view: TypeView, attrs: Mapping[str, Any], ts_ms: int, app_id: str = ""
    ) -> dict[str, Any]:
        """The PHB's sealing of one event: its routing ``{"t": type id, "s": sealed}``.
        ValidationError for an attribute outside the type, :class:`InvalidToken` when it holds
        no key. ``app_id``, the application's event id, is sealed with the content: with the
        whole event, or beside every attribute (each plaintext is ``[app_id, value]``), so
        whoever may read any of it gets the id back and no other broker sees it."""
        out = self.seal_events([(view, attrs, ts_ms, app_id)], strict=True)[0]
        assert out is not None
        return out

    def seal_events(
        self, jobs: list[tuple[TypeView, Mapping[str, Any], int, str]], *, strict: bool = False
    ) -> list[dict[str, Any] | None]:
        """:meth:`seal_event` of each ``(view, attrs, ts_ms, app_id)`` in order
        (:meth:`seal_publications` without the wire ids)."""
        return [None if r is None else r[0] for r in self.seal_publications(jobs, strict=strict)]

    def seal_publications(
        self, jobs: list[tuple[TypeView, Mapping[str, Any], int, str]], *, strict: bool = False
    ) -> list[tuple[dict[str, Any], str] | None]:
        """The PHB's step for a micro-batch: :meth:`seal_event` of each ``(view, attrs, ts_ms,
        app_id)`` in order, and its :meth:`wire_id` beside it. Attribute mode is one
        :func:`seal_attribute_publish_run` (packing, associated data and AEAD of every
        attribute of every event, and the wire ids), event mode one :func:`seal_batch` and
        one :func:`wire_ids`. A job :meth:`seal_event` would refuse is None here
        (``strict``: raised) and takes no counter values, so every event gets the nonces it
        gets alone."""
        phb = self.broker.encode()
        if self.mode == "event":
            plans: list[tuple[bytes, int, int] | None] = []
            items: list[tuple[CounterAead, int, bytes, bytes]] = []
            ids: list[tuple[bytes, str]] = []
            for view, attrs, ts_ms, app_id in jobs:
                c = self._cipher(view.type_group, ts_ms, self.broker)
                if c is None:
                    if strict:
                        raise InvalidToken("this broker holds no key for the type")
                    plans.append(None)
                    continue
                n = self.counter.take(1)
                tid = view.type_id
                plans.append((tid, ts_ms, n))
                items.append((c, n, _pack([app_id, dict(attrs)]), _aad_event(tid, ts_ms)))
                ids.append((tid, app_id))
            sealed = iter(zip(seal_batch(items), self.wire_ids(ids), strict=True))
            out: list[tuple[dict[str, Any], str] | None] = []
            for p in plans:
                if p is None:
                    out.append(None)
                    continue
                blob, wid = next(sealed)
                out.append((_finish_event_seal(p[0], p[1], p[2], phb, blob), wid))
            return out
        ok: list[bool] = []
        run: list[_SealJob] = []
        take = self.counter.take
        last: tuple[Any, int, Mapping[str, tuple[bytes, CounterAead]]] = (None, -1, {})
        for view, attrs, ts_ms, app_id in jobs:
            if last[0] is not view or last[1] != ts_ms:  # a run's events share one plan
                last = (view, ts_ms, self._plan(view, ts_ms, self.broker).by_name)
            keys = last[2]
            if not keys.keys() >= attrs.keys():  # which refusal (nothing taken yet)
                try:
                    for name in attrs:
                        if name not in view.ids:
                            raise ValidationError(
                                f"type {view.stype.name!r} has no attribute {name!r}"
                            )
                    raise InvalidToken("this broker holds no key for an attribute")
                except (ValidationError, InvalidToken):
                    if strict:
                        raise
                    ok.append(False)
                    continue
            n = take(max(1, len(attrs)))
            run.append((view.type_id, ts_ms, n, phb, app_id, attrs, keys))
            ok.append(True)
        blobs = seal_attribute_publish_run(run, self)
        if len(run) == len(jobs):  # every event sealed (the common run)
            return [({"t": j[0], "s": b}, w) for j, (b, w) in zip(run, blobs, strict=True)]
        done = iter(blobs)
        it = iter(run)
        res: list[tuple[dict[str, Any], str] | None] = []
        for y in ok:
            if y:
                blob, wid = next(done)
                res.append(({"t": next(it)[0], "s": blob}, wid))
            else:
                res.append(None)
        return res

    def seal_publish_run(
        self, view: TypeView, ts_ms: int, items: list[tuple[Mapping[str, Any], str]]
    ) -> list[tuple[dict[str, Any], str]] | None:
        """:meth:`seal_publications` of a run of one type at one instant, each ``(attrs,
        app_id)``, in one native call that also builds each sealed routing
        (``hermes_seal_routing_run``): the same routings, wire ids and counter values. None
        when it does not apply (event mode, no extension, an attribute without a key here,
        a value the extension does not take, the counter's end): nothing was taken, and the
        caller takes :meth:`seal_publications`, which decides and words each refusal."""
        nat = nb.NATIVE
        key = self._id_native
        if nat is None or key is None or self.mode != "attribute" or not items:
            return None
        counter = self.counter
        n = counter.next_value
        try:
            out, used = nat.hermes_seal_routing_run(
                view.type_id,
                ts_ms,
                n,
                self.broker.encode(),
                self._plan(view, ts_ms, self.broker).by_name,
                items,
                key,
            )
            if counter.take(used) != n:  # nothing else takes between (one core, one thread)
                raise StateError("nonce counter moved during a run")
        except (TypeError, ValueError, AttributeError, OverflowError, KeyError, StateError):
            return None
        return out  # type: ignore[no-any-return]

    def open_event(
        self, view: TypeView, routing: Mapping[str, Any], skip: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """Attribute name -> value for every attribute this broker can open (names in
        ``skip`` are not opened: the caller has them from a plaintext cache). Ciphertexts it
        has no key for, or that fail to authenticate, are left out."""
        return self.open_sealed(view, routing, skip)[0]

    def open_sealed(
        self, view: TypeView, routing: Mapping[str, Any], skip: frozenset[str] = frozenset()
    ) -> tuple[dict[str, Any], str | None]:
        """:meth:`open_event` and the application's event id sealed with it (None when this
        broker opened nothing); nothing for a malformed routing."""
        try:
            sealed = Sealed.parse(routing.get("s"))
        except ValidationError:
            return {}, None
        return self.open_events([(view, sealed, skip)])[0]

    def open_events(
        self, jobs: list[tuple[TypeView, Sealed, frozenset[str]]]
    ) -> list[tuple[dict[str, Any], str | None]]:
        """:meth:`open_sealed` of each ``(view, sealed, skip)``, a run in one call
        (:func:`open_attribute_run`, or one :func:`open_batch` in event mode). A malformed
        attribute section opens to nothing."""
        if self.mode == "event":
            at: list[int | None] = []
            items: list[tuple[CounterAead, int, bytes, bytes] | None] = []
            for view, sealed, skip in jobs:
                c = None if skip else self._cipher(view.type_group, sealed.ts, sealed.phb)
                at.append(None if c is None else len(items))
                if c is not None:
                    items.append((c, sealed.n, sealed.body, _aad_event(view.type_id, sealed.ts)))
            opened = open_batch(items) if items else []
            return [({}, None) if i is None else _finish_open(None, [opened[i]]) for i in at]
        run: list[_OpenJob] = []
        last: tuple[Any, int, str, Mapping[bytes, tuple[str, CounterAead]]] = (None, -1, "", {})
        for view, sealed, skip in jobs:
            if last[0] is not view or last[1] != sealed.ts or last[2] != sealed.phb:
                last = (view, sealed.ts, sealed.phb, self._plan(view, sealed.ts, sealed.phb).by_aid)
            keys = last[3]
            if skip:
                keys = {a: v for a, v in keys.items() if v[0] not in skip}
            run.append((view.type_id, sealed.ts, sealed.n, sealed.body, keys))
        got = open_attribute_run(run)
        return [({}, None) if r is None else r for r in got]

    def open_sealed_run(
        self, jobs: list[tuple[TypeView, bytes]]
    ) -> list[tuple[dict[str, Any], str | None] | None]:
        """The SHB's step for a run, attribute mode: each ``(view, sealed)``, a sealed
        routing field, parsed (:meth:`Sealed.parse`) and opened (:meth:`open_events` with
        nothing skipped), in one native call when built (``hermes_open_sealed_run``: the
        per-event header, plan look-up and tuples never go through Python); None for a
        malformed header. The same results either way."""
        nat = nb.NATIVE
        if nat is not None and self.mode == "attribute" and jobs:
            plan = self._plan
            try:
                return nat.hermes_open_sealed_run(  # type: ignore[no-any-return]
                    [(v, v.type_id, blob) for v, blob in jobs],
                    lambda v, ts, phb: plan(v, ts, phb).by_aid,
                )
            except (TypeError, ValueError, AttributeError, OverflowError, KeyError):
                pass  # something the extension does not take: the reference decides
        return self._open_sealed_run(jobs)

    def _open_sealed_run(
        self, jobs: list[tuple[TypeView, bytes]]
    ) -> list[tuple[dict[str, Any], str | None] | None]:
        """:meth:`open_sealed_run`'s reference: :meth:`Sealed.parse`, then one
        :meth:`open_events` of the well-formed ones."""
        parsed: list[Sealed | None] = []
        for _, blob in jobs:
            try:
                parsed.append(Sealed.parse(blob))
            except ValidationError:
                parsed.append(None)
        todo = [(v, p, frozenset[str]()) for (v, _), p in zip(jobs, parsed, strict=True) if p]
        got = iter(self.open_events(todo))
        return [None if p is None else next(got) for p in parsed]

    def wire_id(self, view: TypeView, app_id: str) -> str:
        """The id an event sealed here carries between brokers instead of ``app_id``:
        ``hex(KH(HKDF(S, "pubguard-hermes-wire-id" || mode || PHB), type_id || app_id)[:16])``
        under this PHB's own wire-id secret ``S`` (not a group key, which every refresh
        replaces). Only this PHB computes it; it is the same for the same event as long as
        this broker runs, across key refreshes, so a re-sent or re-published copy is still a
        duplicate downstream."""
        return self._id_hash(view.type_id + app_id.encode())[:WIRE_ID_BYTES].hex()

    def wire_ids(self, items: list[tuple[bytes, str]]) -> list[str]:
        """:meth:`wire_id` of each ``(type_id, app_id)``, in one native call when built."""
        nat = nb.NATIVE
        if nat is not None and self._id_native is not None and items:
            try:
                return nat.hermes_wire_ids(self._id_native, items)  # type: ignore[no-any-return]
            except (TypeError, ValueError, AttributeError):
                pass  # something the extension does not take: the reference
        h = self._id_hash
        return [h(tid + app.encode())[:WIRE_ID_BYTES].hex() for tid, app in items]

    def native_wire_key(self) -> object | None:
        """This PHB's wire-id key in the extension (None: not built, or the Python backend
        was active when this crypter was made); it shows nothing of the key."""
        return self._id_native

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
