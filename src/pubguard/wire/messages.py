"""Broker protocol messages and their strict wire codec.

Theory of operation
-------------------
Every message is a frozen, slotted dataclass with an ``op`` tag, validated on construction
(STYLE.md convention 3, h11 ``_events.py``). The messages implement the five Siena primitives
of eventguard.txt §2.1 (subscribe, unsubscribe, advertise, unadvertise, publish) plus what a
network needs around them (deliver, ack, error, heartbeat).

Profile-specific content is opaque to the core: ``filter`` (a subscription or advertisement),
``routing`` (what brokers match a publication on), ``body`` (never read by a broker) and
``meta`` (signatures, timestamps, permits, security tokens) are wire values in the msgpack data
model, deep-frozen here (sequences become tuples, mappings become read-only mappings). The
``profile`` field names the scheme that interprets them (``pubguard.schemes``).

``to_wire()`` gives a plain ``dict`` ready for msgpack; :func:`decode_message` (or
``Cls.from_wire``) is the inverse and is strict: unknown ops and fields, wrong types, oversize
ids, bodies or nested values all raise :class:`~pubguard.errors.FrameError`. The transport only
adds framing and the version byte.

Wire form (keys in addition to ``op``; ``meta`` and ``body`` may be omitted when empty)::

    subscribe    sub_id profile filter meta        unsubscribe  sub_id profile meta
    advertise    adv_id profile filter meta        unadvertise  adv_id profile meta
    publish      event_id profile routing body meta
    deliver      sub_ids event(= publish fields without op)
    ack          ref of                            error        ref reason detail
    heartbeat    seq
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeAlias

from pubguard import native
from pubguard.errors import DropReason, FrameError, ValidationError

__all__ = [
    "KNOWN_OPS",
    "MAX_BODY_BYTES",
    "MAX_ID_LEN",
    "MAX_SUB_IDS",
    "MAX_WIRE_DEPTH",
    "MAX_WIRE_ITEMS",
    "Ack",
    "Advertise",
    "Deliver",
    "Error",
    "Heartbeat",
    "Message",
    "MsgOp",
    "Publish",
    "Subscribe",
    "Unadvertise",
    "Unsubscribe",
    "decode_deliver",
    "decode_message",
    "decode_publish",
    "freeze_wire",
    "publish_wire",
    "thaw_wire",
]

MAX_ID_LEN: Final = 256  # characters in an id, profile name or ref
MAX_BODY_BYTES: Final = 4 * 1024 * 1024  # an event body (payload or ciphertext)
MAX_WIRE_DEPTH: Final = 16  # nesting of filter / routing / meta values
MAX_WIRE_ITEMS: Final = 65_536  # total values inside one filter / routing / meta field
MAX_SUB_IDS: Final = 65_536  # subscription ids on one delivery
MAX_DETAIL_LEN: Final = 1024  # error detail text
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1  # msgpack's integer range


class MsgOp(enum.StrEnum):
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    ADVERTISE = "advertise"
    UNADVERTISE = "unadvertise"
    PUBLISH = "publish"
    DELIVER = "deliver"
    ACK = "ack"
    ERROR = "error"
    HEARTBEAT = "heartbeat"


# -- deep freeze / thaw of wire values ---------------------------------------------------------


_FLAT: Final = frozenset({str, bool, type(None), bytes})  # leaves that need no check
_SCALARS: Final = _FLAT | {int, float}


def freeze_wire(value: Any, *, what: str = "value") -> Any:
    """Validate a msgpack-model value and return it deep-frozen; ValidationError if invalid."""
    if type(value) is dict:  # the common case, a flat map from a frame: one pass, no recursion
        frozen = _freeze_flat(value)
        if frozen is not None:
            return frozen
    budget = [MAX_WIRE_ITEMS]
    try:
        return _freeze(value, 0, budget)
    except _BadValue as exc:  # named by its path: "routing.price: integer out of range ..."
        raise ValidationError(f"{what}{''.join(reversed(exc.where))}: {exc.message}") from None


def _freeze_flat(d: dict[Any, Any]) -> MappingProxyType[str, Any] | None:
    """``_freeze`` of a map whose keys are ``str`` and values valid scalars (exactly the same
    result), or None to take the general path (which also words the errors). The check runs
    in ``pubguard._native`` (``native/src/wire.rs``) when that backend is active: a signed
    publication's ``meta`` is a dozen fields, checked at every hop."""
    fast = native.NATIVE
    ok = fast.flat_ok(d) if fast is not None else _flat_ok(d)
    return MappingProxyType(dict(d)) if ok else None


def _flat_ok(d: dict[Any, Any]) -> bool:
    """True when ``_freeze_flat(d)`` would succeed (the check without the copy)."""
    if len(d) >= MAX_WIRE_ITEMS:
        return False
    flat = _FLAT
    for k, v in d.items():
        t = type(v)
        if type(k) is not str:
            return False
        if t in flat:
            continue
        if t is int:
            if not _INT_MIN <= v <= _INT_MAX:
                return False
        elif t is not float or v != v:
            return False
    return True


class _BadValue(Exception):
    """A value :func:`_freeze` refuses; ``where`` collects the map keys and list indexes on the
    way out of the recursion (leaf first), so the error names the attribute."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.where: list[str] = []


_INT_RANGE: Final = "wire integers are -2**63 .. 2**64-1"


def _freeze(v: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _BadValue(f"more than {MAX_WIRE_ITEMS} values")
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        if not _INT_MIN <= v <= _INT_MAX:
            raise _BadValue(f"integer out of range ({_INT_RANGE})")
        return v
    if isinstance(v, float):
        if math.isnan(v):
            raise _BadValue("NaN is not a wire value")
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    if depth >= MAX_WIRE_DEPTH:
        raise _BadValue(f"nested deeper than {MAX_WIRE_DEPTH}")
    if isinstance(v, list | tuple):
        items = []
        for i, x in enumerate(v):
            try:
                items.append(_freeze(x, depth + 1, budget))
            except _BadValue as exc:
                exc.where.append(f"[{i}]")
                raise
        return tuple(items)
    if isinstance(v, Mapping):
        out: dict[str, Any] = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise _BadValue("mapping keys must be strings")
            try:
                out[k] = _freeze(x, depth + 1, budget)
            except _BadValue as exc:
                exc.where.append(f".{k}")
                raise
        return MappingProxyType(out)
    raise _BadValue(f"{type(v).__name__} is not a wire value")


def thaw_wire(v: Any) -> Any:
    """The inverse of :func:`freeze_wire`: plain lists and dicts, ready for msgpack."""
    if type(v) is MappingProxyType:  # flat maps (most routing and meta): one copy
        out = dict(v)
        for k, x in out.items():
            if type(x) not in _SCALARS:
                out[k] = thaw_wire(x)
        return out
    if isinstance(v, tuple):
        return [thaw_wire(x) for x in v]
    if isinstance(v, Mapping):
        return {k: thaw_wire(x) for k, x in v.items()}
    return v


def _frozen_map(v: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ValidationError(f"{what} must be a mapping, not {type(v).__name__}")
    return freeze_wire(v, what=what)  # type: ignore[no-any-return]


def _check_id(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise ValidationError(f"{what} must be a non-empty string")
    if len(v) > MAX_ID_LEN:
        raise ValidationError(f"{what} longer than {MAX_ID_LEN} characters")
    return v


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


_EMPTY_MAP: Final[Mapping[str, Any]] = MappingProxyType({})  # shared: read-only and empty


# -- the messages ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscribe:
    """subscribe(f) from a subscriber or a child broker (eventguard.txt §2.1, §4.2)."""

    op: ClassVar[str] = MsgOp.SUBSCRIBE.value
    sub_id: str
    profile: str
    filter: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        _check_id(self.sub_id, "sub_id")
        _check_id(self.profile, "profile")
        object.__setattr__(self, "filter", _frozen_map(self.filter, "filter"))
        object.__setattr__(self, "meta", _frozen_map(self.meta, "meta"))

    @property
    def ref(self) -> str:
        return self.sub_id

    def to_wire(self) -> dict[str, Any]:
        d = {"op": self.op, "sub_id": self.sub_id, "profile": self.profile}
        d["filter"] = thaw_wire(self.filter)
        if self.meta:
            d["meta"] = thaw_wire(self.meta)
        return d


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """unsubscribe(f) (eventguard.txt §4.5): cancels ``sub_id`` on the link it arrives on."""

    op: ClassVar[str] = MsgOp.UNSUBSCRIBE.value
    sub_id: str
    profile: str
    meta: Mapping[str, Any] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        _check_id(self.sub_id, "sub_id")
        _check_id(self.profile, "profile")
        object.__setattr__(self, "meta", _frozen_map(self.meta, "meta"))

    @property
    def ref(self) -> str:
        return self.sub_id

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "sub_id": self.sub_id, "profile": self.profile}
        if self.meta:
            d["meta"] = thaw_wire(self.meta)
        return d


@dataclass(frozen=True, slots=True)
class Advertise:
    """advertise(f) from a publisher (eventguard.txt §2.1, §4.3)."""

    op: ClassVar[str] = MsgOp.ADVERTISE.value
    adv_id: str
    profile: str
    filter: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        _check_id(self.adv_id, "adv_id")
        _check_id(self.profile, "profile")
        object.__setattr__(self, "filter", _frozen_map(self.filter, "filter"))
        object.__setattr__(self, "meta", _frozen_map(self.meta, "meta"))

    @property
    def ref(self) -> str:
        return self.adv_id

    def to_wire(self) -> dict[str, Any]:
        d = {"op": self.op, "adv_id": self.adv_id, "profile": self.profile}
        d["filter"] = thaw_wire(self.filter)
        if self.meta:
            d["meta"] = thaw_wire(self.meta)
        return d


@dataclass(frozen=True, slots=True)
class Unadvertise:
    """unadvertise(f) (eventguard.txt §4.6)."""

    op: ClassVar[str] = MsgOp.UNADVERTISE.value
    adv_id: str
    profile: str
    meta: Mapping[str, Any] = field(default_factory=_empty)

    def __post_init__(self) -> None:
        _check_id(self.adv_id, "adv_id")
        _check_id(self.profile, "profile")
        object.__setattr__(self, "meta", _frozen_map(self.meta, "meta"))

    @property
    def ref(self) -> str:
        return self.adv_id

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "adv_id": self.adv_id, "profile": self.profile}
        if self.meta:
            d["meta"] = thaw_wire(self.meta)
        return d


@dataclass(frozen=True, slots=True)
class Publish:
    """publish(e): ``routing`` is matched by brokers, ``body`` is opaque to them."""

    op: ClassVar[str] = MsgOp.PUBLISH.value
    event_id: str
    profile: str
    routing: Mapping[str, Any]
    body: bytes = b""
    meta: Mapping[str, Any] = field(default_factory=_empty)
    #: the wire dict this publication was decoded from (never mutated), so a broker that
    #: passes it on unchanged packs that dict instead of thawing the frozen fields again;
    #: None for a publication built in code (``dataclasses.replace`` gives None too)
    wire: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_id(self.event_id, "event_id")
        _check_id(self.profile, "profile")
        object.__setattr__(self, "routing", _frozen_map(self.routing, "routing"))
        if isinstance(self.body, bytearray | memoryview):
            object.__setattr__(self, "body", bytes(self.body))
        if not isinstance(self.body, bytes):
            raise ValidationError("body must be bytes")
        if len(self.body) > MAX_BODY_BYTES:
            raise ValidationError(f"body larger than {MAX_BODY_BYTES} bytes")
        object.__setattr__(self, "meta", _frozen_map(self.meta, "meta"))

    @property
    def ref(self) -> str:
        return self.event_id

    @classmethod
    def _trusted(
        cls,
        event_id: str,
        profile: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        wire: dict[str, Any] | None = None,
    ) -> Publish:
        """Build from fields the decoder has just validated and frozen (no second pass)."""
        p = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(p, "event_id", event_id)
        setattr_(p, "profile", profile)
        setattr_(p, "routing", routing)
        setattr_(p, "body", body)
        setattr_(p, "meta", meta)
        setattr_(p, "wire", wire)
        return p

    @classmethod
    def trusted(
        cls, event_id: str, profile: str, routing: dict[str, Any], body: bytes = b""
    ) -> Publish:
        """A publication a broker scheme builds itself (a rewritten routing), without the
        decoder's second pass over a wire dict: the ids and the body are checked as the
        constructor checks them, and ``routing`` must be a flat map of wire scalars (else
        ValidationError: the caller takes the constructor). The caller hands ``routing``
        over and never changes it; it is frozen by a read-only view, and the wire dict the
        frame is packed from (``wire``) is built here."""
        got = cls.trusted_run(profile, [(event_id, routing, body)])[0]
        if got is None:
            raise ValidationError(
                "not a publication of the common shape (ids, body, a flat routing of wire scalars)"
            )
        return got

    @classmethod
    def trusted_run(
        cls, profile: str, rows: list[tuple[str, dict[str, Any], bytes]]
    ) -> list[Publish | None]:
        """:meth:`trusted` of each ``(event_id, routing, body)`` of one profile, in one call
        (a scheme rewriting a micro-batch): the same checks and the same publications, or
        None for a row :meth:`trusted` would refuse (its caller takes the constructor,
        which words the error)."""
        if not (type(profile) is str and 0 < len(profile) <= MAX_ID_LEN):
            return [None] * len(rows)
        fast = native.NATIVE
        flat = fast.flat_ok if fast is not None else _flat_ok
        new = object.__new__
        proxy = MappingProxyType
        empty = _EMPTY_MAP
        fill = _PublishFill
        out: list[Publish | None] = []
        for event_id, routing, body in rows:
            if not (
                type(event_id) is str
                and 0 < len(event_id) <= MAX_ID_LEN
                and type(routing) is dict
                and type(body) is bytes
                and len(body) <= MAX_BODY_BYTES
                and flat(routing)
            ):
                out.append(None)
                continue
            wire: dict[str, Any] = {
                "op": "publish",
                "event_id": event_id,
                "profile": profile,
                "routing": routing,
            }
            if body:
                wire["body"] = body
            if cls is Publish:  # filled by plain slot stores, then made a (frozen) Publish
                p: Any = new(fill)
                p.event_id = event_id
                p.profile = profile
                p.routing = proxy(routing)
                p.body = body
                p.meta = empty
                p.wire = wire
                p.__class__ = Publish
            else:  # a subclass: its slots' own setters
                p = new(cls)
                vals = (event_id, profile, proxy(routing), body, empty, wire)
                for put, v in zip(_PUB_SET, vals, strict=True):
                    put(p, v)
            out.append(p)
        return out

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, **self._fields()}
        return d

    def _fields(self) -> dict[str, Any]:
        d: dict[str, Any] = {"event_id": self.event_id, "profile": self.profile}
        d["routing"] = thaw_wire(self.routing)
        if self.body:
            d["body"] = self.body
        if self.meta:
            d["meta"] = thaw_wire(self.meta)
        return d


#: the setters of a publication's slots, for ``Publish.trusted_run`` on a subclass: what
#: ``object.__setattr__`` does on a new frozen instance, without its per-call name look-up
_PUB_SET: Final = tuple(
    Publish.__dict__[k].__set__ for k in ("event_id", "profile", "routing", "body", "meta", "wire")
)
#: a mutable twin of ``Publish`` with the same slots (so the same layout), for
#: ``Publish.trusted_run``: a new publication is filled by plain slot stores and then made a
#: ``Publish`` by ``__class__`` assignment, which CPython allows between classes of the same
#: layout and which leaves a frozen ``Publish``, equal to the one ``trusted`` builds. Half
#: the cost of calling each slot's setter (a scheme builds one per event it rewrites).
_PublishFill: Final[type] = type("_PublishFill", (), {"__slots__": Publish.__slots__})


@dataclass(frozen=True, slots=True)
class Deliver:
    """A publication handed to a local client, naming which of its subscriptions matched."""

    op: ClassVar[str] = MsgOp.DELIVER.value
    event: Publish
    sub_ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.event, Publish):
            raise ValidationError("deliver.event must be a Publish")
        ids = self.sub_ids
        if not isinstance(ids, list | tuple) or not ids:
            raise ValidationError("deliver.sub_ids must be a non-empty sequence")
        if len(ids) > MAX_SUB_IDS:
            raise ValidationError(f"deliver carries more than {MAX_SUB_IDS} sub_ids")
        object.__setattr__(self, "sub_ids", tuple(_check_id(s, "sub_id") for s in ids))

    @property
    def ref(self) -> str:
        return self.event.event_id

    @classmethod
    def trusted(cls, event: Publish, sub_ids: tuple[str, ...]) -> Deliver:
        """Build without re-validating: for the broker core, whose ids were validated on the
        way in (a delivery to 32 subscribers must not re-check 32 id tuples)."""
        d = object.__new__(cls)
        object.__setattr__(d, "event", event)
        object.__setattr__(d, "sub_ids", sub_ids)
        return d

    @classmethod
    def trusted_run(cls, pairs: list[tuple[Publish, tuple[str, ...]]]) -> list[Deliver]:
        """:meth:`trusted` of each ``(event, sub_ids)``, in one call (a scheme that builds a
        run's deliveries itself), filled as ``Publish.trusted_run`` fills publications."""
        if cls is not Deliver:
            return [cls.trusted(event, sub_ids) for event, sub_ids in pairs]
        new = object.__new__
        fill = _DeliverFill
        out: list[Deliver] = []
        for event, sub_ids in pairs:
            d: Any = new(fill)
            d.event = event
            d.sub_ids = sub_ids
            d.__class__ = Deliver
            out.append(d)
        return out

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, "sub_ids": list(self.sub_ids), "event": self.event._fields()}


#: a mutable twin of ``Deliver``, for ``Deliver.trusted_run`` (as ``_PublishFill``)
_DeliverFill: Final[type] = type("_DeliverFill", (), {"__slots__": Deliver.__slots__})


@dataclass(frozen=True, slots=True)
class Ack:
    """A broker accepted message ``ref`` (an id) of op ``of`` from a client."""

    op: ClassVar[str] = MsgOp.ACK.value
    ref: str
    of: str

    def __post_init__(self) -> None:
        _check_id(self.ref, "ref")
        if self.of not in _DECODERS:
            raise ValidationError(f"ack of unknown op {self.of!r}")

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, "ref": self.ref, "of": str(self.of)}


@dataclass(frozen=True, slots=True)
class Error:
    """A broker dropped message ``ref`` from a directly connected client (narada §IV-H)."""

    op: ClassVar[str] = MsgOp.ERROR.value
    ref: str
    reason: DropReason
    detail: str = ""

    def __post_init__(self) -> None:
        _check_id(self.ref, "ref")
        try:
            object.__setattr__(self, "reason", DropReason(self.reason))
        except ValueError:
            raise ValidationError(f"unknown drop reason {self.reason!r}") from None
        if not isinstance(self.detail, str) or len(self.detail) > MAX_DETAIL_LEN:
            raise ValidationError(f"detail must be a string of at most {MAX_DETAIL_LEN} chars")

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, "ref": self.ref, "reason": self.reason.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Link liveness; answered by the transport, ignored by the core."""

    op: ClassVar[str] = MsgOp.HEARTBEAT.value
    seq: int

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int):
            raise ValidationError("heartbeat seq must be an integer")
        if not 0 <= self.seq <= _INT_MAX:
            raise ValidationError("heartbeat seq out of range")

    @property
    def ref(self) -> str:
        return str(self.seq)

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, "seq": self.seq}


Message: TypeAlias = (
    Subscribe | Unsubscribe | Advertise | Unadvertise | Publish | Deliver | Ack | Error | Heartbeat
)

# -- decoding -----------------------------------------------------------------------------------

# op -> (required keys, optional keys, constructor from the checked dict)
_Spec = tuple[frozenset[str], frozenset[str], Callable[[Mapping[str, Any]], Any]]


def _publish_fast(d: Mapping[str, Any]) -> Publish | None:
    """The hot path (every publication at every hop): the checks of Publish.__post_init__
    done inline once, then built without running them again; None unless every field has
    its common shape (flat routing and meta maps), which leaves the rest and the wording of
    errors to the constructor."""
    eid, profile, routing = d.get("event_id"), d.get("profile"), d.get("routing")
    body, meta = d.get("body", b""), d.get("meta")
    if (
        type(eid) is str
        and 0 < len(eid) <= MAX_ID_LEN
        and type(profile) is str
        and 0 < len(profile) <= MAX_ID_LEN
        and type(routing) is dict
        and type(body) is bytes
        and len(body) <= MAX_BODY_BYTES
        and (meta is None or type(meta) is dict)
    ):
        fr = _freeze_flat(routing)
        fm = _EMPTY_MAP if not meta else _freeze_flat(meta)  # type: ignore[arg-type]
        if fr is not None and fm is not None:
            return Publish._trusted(eid, profile, fr, body, fm, d if type(d) is dict else None)
    return None


def _publish_from(d: Mapping[str, Any]) -> Publish:
    p = _publish_fast(d)
    if p is not None:
        return p
    meta = d.get("meta")
    return Publish(
        d["event_id"], d["profile"], d["routing"], d.get("body", b""), {} if meta is None else meta
    )


_PUBLISH_REQ: Final = frozenset({"op", "event_id", "profile", "routing"})
_PUBLISH_ALL: Final = _PUBLISH_REQ | {"body", "meta"}


def decode_publish(obj: Any) -> Publish | None:
    """``decode_message(obj)`` for a publish wire dict of the common shape (exactly the same
    message), else None: the caller takes :func:`decode_message`, which also words the errors.
    A broker's hot path: one call instead of the op dispatch and key checks of the general
    decoder."""
    if type(obj) is not dict or obj.get("op") != "publish":
        return None
    keys = obj.keys()
    if not (_PUBLISH_REQ <= keys and keys <= _PUBLISH_ALL):
        return None
    return _publish_fast(obj)


def publish_wire(
    event_id: str,
    profile: str,
    routing: Mapping[str, Any],
    body: bytes = b"",
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``Publish(...).to_wire()`` with the same checks (ValidationError), without building the
    frozen message and thawing it again: a publisher's hot path. Flat routing and meta maps
    are checked in one pass each; anything else takes the full constructor."""
    if (
        type(event_id) is str
        and 0 < len(event_id) <= MAX_ID_LEN
        and type(profile) is str
        and 0 < len(profile) <= MAX_ID_LEN
        and type(body) is bytes
        and len(body) <= MAX_BODY_BYTES
        and type(routing) in (dict, MappingProxyType)
        and (not meta or type(meta) in (dict, MappingProxyType))
    ):
        r = dict(routing)
        m = dict(meta) if meta else None
        # the check ``_freeze_flat`` runs at every hop (natively when that backend is on)
        fast = native.NATIVE
        ok = fast.flat_ok if fast is not None else _flat_ok
        if ok(r) and (m is None or ok(m)):
            d: dict[str, Any] = {
                "op": MsgOp.PUBLISH.value,
                "event_id": event_id,
                "profile": profile,
                "routing": r,
            }
            if body:
                d["body"] = body
            if m:
                d["meta"] = m
            return d
    return Publish(event_id, profile, routing, body, {} if meta is None else meta).to_wire()


_DELIVER_KEYS: Final = frozenset({"op", "sub_ids", "event"})
_EVENT_REQ: Final = frozenset({"event_id", "profile", "routing"})
_EVENT_ALL: Final = _EVENT_REQ | {"body", "meta"}


def decode_deliver(obj: Any) -> Deliver | None:
    """``decode_message(obj)`` for a deliver wire dict of the common shape (exactly the same
    message), else None (the caller takes :func:`decode_message`): a subscriber's hot path."""
    if type(obj) is not dict or obj.get("op") != "deliver" or obj.keys() != _DELIVER_KEYS:
        return None
    ev, ids = obj["event"], obj["sub_ids"]
    if type(ev) is not dict or type(ids) is not list or not 0 < len(ids) <= MAX_SUB_IDS:
        return None
    keys = ev.keys()
    if not (_EVENT_REQ <= keys and keys <= _EVENT_ALL):
        return None
    for sid in ids:
        if type(sid) is not str or not 0 < len(sid) <= MAX_ID_LEN:
            return None
    pub = _publish_fast(ev)
    return None if pub is None else Deliver.trusted(pub, tuple(ids))


def _deliver_from(d: Mapping[str, Any]) -> Deliver:
    ev = d["event"]
    if not isinstance(ev, Mapping):
        raise ValidationError("deliver.event must be a mapping")
    _check_keys(ev, *_PUBLISH_KEYS, what="deliver.event")
    ids = d["sub_ids"]
    # the hot path (every delivery at every subscriber): Deliver.__post_init__'s checks inline
    if (
        type(ids) is list
        and 0 < len(ids) <= MAX_SUB_IDS
        and all(type(s) is str and 0 < len(s) <= MAX_ID_LEN for s in ids)
    ):
        return Deliver.trusted(_publish_from(ev), tuple(ids))
    return Deliver(_publish_from(ev), ids)


_PUBLISH_KEYS = (frozenset({"event_id", "profile", "routing"}), frozenset({"body", "meta"}))
_DECODERS: dict[str, _Spec] = {
    MsgOp.SUBSCRIBE: (
        frozenset({"sub_id", "profile", "filter"}),
        frozenset({"meta"}),
        lambda d: Subscribe(d["sub_id"], d["profile"], d["filter"], d.get("meta", {})),
    ),
    MsgOp.UNSUBSCRIBE: (
        frozenset({"sub_id", "profile"}),
        frozenset({"meta"}),
        lambda d: Unsubscribe(d["sub_id"], d["profile"], d.get("meta", {})),
    ),
    MsgOp.ADVERTISE: (
        frozenset({"adv_id", "profile", "filter"}),
        frozenset({"meta"}),
        lambda d: Advertise(d["adv_id"], d["profile"], d["filter"], d.get("meta", {})),
    ),
    MsgOp.UNADVERTISE: (
        frozenset({"adv_id", "profile"}),
        frozenset({"meta"}),
        lambda d: Unadvertise(d["adv_id"], d["profile"], d.get("meta", {})),
    ),
    MsgOp.PUBLISH: (*_PUBLISH_KEYS, _publish_from),
    MsgOp.DELIVER: (frozenset({"sub_ids", "event"}), frozenset(), _deliver_from),
    MsgOp.ACK: (frozenset({"ref", "of"}), frozenset(), lambda d: Ack(d["ref"], d["of"])),
    MsgOp.ERROR: (
        frozenset({"ref", "reason"}),
        frozenset({"detail"}),
        lambda d: Error(d["ref"], d["reason"], d.get("detail", "")),
    ),
    MsgOp.HEARTBEAT: (frozenset({"seq"}), frozenset(), lambda d: Heartbeat(d["seq"])),
}


_ALLOWED: dict[tuple[frozenset[str], frozenset[str]], frozenset[str]] = {}


def _check_keys(d: Mapping[str, Any], req: frozenset[str], opt: frozenset[str], what: str) -> None:
    allowed = _ALLOWED.get((req, opt))
    if allowed is None:
        allowed = _ALLOWED[(req, opt)] = req | opt | {"op"}
    keys_view = d.keys()
    if req <= keys_view and keys_view <= allowed:
        return
    keys = set(d)
    missing = req - keys
    if missing:
        raise ValidationError(f"{what} is missing {', '.join(sorted(missing))}")
    extra = keys - req - opt - {"op"}
    if extra:
        shown = ", ".join(sorted(repr(k) for k in extra)[:5])
        raise ValidationError(f"{what} has unknown fields {shown}")


def decode_message(obj: Any) -> Message:
    """Decode one wire dict into a message; FrameError on anything unexpected.

    (The broker checks ``op in KNOWN_OPS`` first to count unknown ops as ``unknown_type``.)
    """
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise FrameError(f"a message must be a mapping, not {type(obj).__name__}")
    op = obj.get("op")
    if not isinstance(op, str):
        raise FrameError("a message needs a string 'op'")
    spec = _DECODERS.get(op)
    if spec is None:
        raise FrameError(f"unknown op {op[:40]!r}")
    req, opt, build = spec
    try:
        _check_keys(obj, req, opt, what=op)
        msg: Message = build(obj)
    except ValidationError as exc:
        raise FrameError(f"bad {op}: {exc}") from exc
    except (TypeError, ValueError, KeyError) as exc:  # defensive: a constructor bug or odd type
        raise FrameError(f"bad {op}: {type(exc).__name__}") from exc
    return msg


KNOWN_OPS: Final = frozenset(_DECODERS)


def _make_from_wire(cls: type) -> classmethod:  # type: ignore[type-arg]
    def from_wire(c: type, obj: Any) -> Any:
        msg = decode_message(obj)
        if not isinstance(msg, c):
            raise FrameError(f"expected {c.op}, got {msg.op}")  # type: ignore[attr-defined]
        return msg

    from_wire.__doc__ = f"Decode a wire dict that must be a {cls.__name__}; FrameError otherwise."
    return classmethod(from_wire)


for _cls in (
    Subscribe,
    Unsubscribe,
    Advertise,
    Unadvertise,
    Publish,
    Deliver,
    Ack,
    Error,
    Heartbeat,
):
    _cls.from_wire = _make_from_wire(_cls)  # type: ignore[attr-defined,union-attr]
