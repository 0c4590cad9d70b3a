"""The scheme hook interface: how a security profile plugs into clients and the broker core.

Theory of operation
-------------------
A *profile* (plain, eventguard, psguard, narada, default, ...) decides what travels on the wire
and what a broker may check and match. The broker core (``pubguard.broker.core``) knows nothing
about keys or tokens: every message names its profile in a ``profile`` field and the core looks
the profile up in a :class:`SchemeRegistry`, so one network carries several profiles at once
(ARCHITECTURE.md, "Scheme interface").

A scheme has two faces:

*Client side* (:class:`ClientScheme`), run by publishers and subscribers who hold keys:

- ``protect_filter(filter, now=, rng=) -> ProtectedFilter``: the wire form of a subscription
  (plain: the constraints; PSGuard: authorisation tokens; EventGuard: T(w) plus the MS permit).
- ``protect_advertisement(filter, ...)``: same for an advertisement.
- ``protect_event(event, now=, rng=) -> ProtectedEvent``: ``routing`` is what brokers match on
  (plain: the attribute map; PSGuard: ``<r, F_T(r)>`` tokens), ``body`` is opaque to brokers
  (plain: the payload; secure profiles: ciphertext), ``meta`` carries guard material
  (signatures, timestamps, permits, security tokens).
- ``open_event(event_id, routing, body, meta) -> Event``: decrypt / verify a delivery; raise
  :class:`~pubguard.errors.InvalidToken` when it cannot be opened.
- optional ``unsubscribe_meta(filter, now=, rng=)`` / ``unadvertise_meta(...)``: the ``meta``
  an unsubscribe / unadvertise must carry (EventGuard's UST/UAT-backed MS permits,
  eventguard.txt §4.5-4.6; Narada's security token). Profiles without it send empty meta.
  Clients call :func:`withdrawal_meta`, which looks the hook up.

*Broker side* (:class:`BrokerScheme`), run by routing nodes that hold no content keys:

- ``decode_filter(wire) -> PF`` and ``decode_event(routing) -> PE`` turn the opaque wire
  fields into whatever the scheme matches on; they raise
  :class:`~pubguard.errors.ValidationError` for malformed input (the core turns that into a
  ``malformed`` drop). Only the routing part of a publication is decoded; ``body`` is never
  touched by the core.
- ``broker_check(message, ctx) -> DropReason | None``: the guards (signatures, timestamps,
  authorisation, replay, revocation). ``ctx`` is a :class:`CheckContext` with the current time,
  the link the message came on and, for an unsubscribe / unadvertise, the stored message it
  cancels (EventGuard's UST / UAT permits, eventguard.txt §4.5-4.6, are checked against it).
  Returning a reason drops the message; the core never raises on a check. A scheme with no
  guards (plain) may set ``checks_messages = False`` so the core skips the call.
- ``covers(f1, f2) -> bool`` on decoded filters: must be *sound* (True only if every event
  matching f2 matches f1). A scheme that cannot tell (tokens) answers False, or True only for
  equal tokens; a missed covering costs forwarding, a wrong one loses events.
- ``new_matcher() -> Matcher``: an index over decoded filters (``add``, ``remove``, ``match``).
  PSGuard matches tokens, not plaintext, so the scheme owns the index. :class:`LinearMatcher`
  builds one from a pairwise ``broker_match(pf, pe)``. A matcher may also offer
  ``match_batch(pes) -> list[set]`` (one AES call per token over a batch's nonces for
  PSGuard); ``Broker.handle_batch`` uses it for runs of publications.
- ``outgoing(message, ctx) -> message | None``: a last per-hop transform before a message
  leaves on a link (per-hop signatures, re-encryption, suppression); ``ctx.link`` is the link
  it leaves on. A scheme whose ``outgoing`` is the identity may set the class attribute
  ``rewrites_outgoing = False`` so the core skips the call on the publication fast path.
- optional ``lease_end(message) -> float | None``: when a stored subscription's (or
  advertisement's) authority runs out (a permit of one key epoch, plus ``max_delay``); the
  core forgets it then (``Broker.expire``). Absent or None: it lasts until withdrawn or its
  link goes.

On the client side, a scheme whose subscriptions are bound to a key epoch offers
``epoch_end(now) -> float | None`` (when the epoch current at ``now`` ends, None if unknown)
and ``renews_ahead`` (True when ``protect_filter(f, now=<a time in the next epoch>)`` may be
called before that epoch begins, as the KDC serves the next epoch's keys shortly before it
starts); ``pubguard.net.client.client`` then subscribes again for each epoch and lets the old
subscription lapse (``leased_subscriptions``: brokers expire it; otherwise the client
withdraws it, which needs no proof).

Broker-side messages are passed duck-typed (the message classes live in ``pubguard.broker``,
a higher layer): they have ``op``, ``profile`` and ``meta``, and per op ``sub_id`` / ``adv_id``
/ ``event_id``, ``filter``, ``routing``, ``body``. Subscription ids are *hop-scoped*: a broker
renames a subscription when it forwards it upward, so a scheme must never sign ``sub_id`` or
``adv_id``; it signs the filter and its own ``meta`` fields, which the core forwards unchanged.

Wire values are the msgpack data model: None, bool, int, float, str, bytes, sequences and
string-keyed mappings (:data:`WireValue`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any, Final, Protocol, TypeAlias, runtime_checkable

from pubguard.errors import DropReason, ValidationError
from pubguard.model.events import Event
from pubguard.model.filters import Filter

__all__ = [
    "LEASE_SLACK",
    "BrokerScheme",
    "CheckContext",
    "ClientScheme",
    "LinearMatcher",
    "LinkInfo",
    "LinkKind",
    "Matcher",
    "ProtectedEvent",
    "ProtectedFilter",
    "Scheme",
    "SchemeRegistry",
    "WireValue",
    "forwarded_grace",
    "withdrawal_meta",
]

WireValue: TypeAlias = (
    None | bool | int | float | str | bytes | tuple[Any, ...] | list[Any] | Mapping[str, Any]
)


class LinkKind(enum.StrEnum):
    """What is at the other end of a broker's link (hierarchical topology, eventguard.txt §2.1)."""

    PARENT = "parent"  # the broker one level closer to the root
    CHILD = "child"  # a broker one level further from the root
    CLIENT = "client"  # a publisher or subscriber attached to this broker


#: seconds an entry another broker forwarded outlives its lease (``lease_end``) at the broker
#: that stores it (``Broker._lease``): the sender lapses its own copy first and forwards what
#: that copy covered (a renewal) before this copy goes, so there is no gap in coverage
LEASE_SLACK: Final = 5.0


def forwarded_grace(link: LinkInfo, max_delay: float) -> float:
    """How long after its permit's end a subscription or advertisement that *another broker*
    forwards is still accepted: as long as that broker may hold it (``max_delay`` plus
    ``LEASE_SLACK``, see ``Broker._lease``). A broker forwards such a held copy when the
    entry that covered it lapses first (eventguard's ``T(w)`` survives epochs, so an old
    generation from a grandchild may cover its own renewal); refusing it would leave the
    topic unrouted until the grandchild's withdrawal arrives. It grants nothing new: the
    copy would have been held here as long had it been forwarded before. Clients get none."""
    return 0.0 if link.kind is LinkKind.CLIENT else max_delay + LEASE_SLACK


@dataclass(frozen=True, slots=True)
class LinkInfo:
    """A link as the core describes it to a scheme. ``peer`` is the authenticated identity
    (certificate subject) when the transport knows it."""

    link_id: str
    kind: LinkKind
    peer: str | None = None


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything a broker-side guard may look at besides the message itself."""

    now: float
    link: LinkInfo
    broker_id: str
    prior: Any | None = None  # the stored Subscribe / Advertise an unsubscribe cancels


@dataclass(frozen=True, slots=True)
class ProtectedFilter:
    """Client-side output for a subscription or advertisement: the wire ``filter`` and ``meta``."""

    filter: Mapping[str, Any]
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProtectedEvent:
    """Client-side output for a publication."""

    event_id: str
    routing: Mapping[str, Any]
    body: bytes = b""
    meta: Mapping[str, Any] = field(default_factory=dict)


class Matcher(Protocol):
    """A filter index over decoded (protected) filters."""

    def add(self, key: Hashable, pf: Any) -> None: ...

    def remove(self, key: Hashable) -> None: ...

    def match(self, pe: Any) -> set[Hashable]: ...

    def __len__(self) -> int: ...


class LinearMatcher:
    """A matcher from a pairwise predicate: checks every filter (the safe default)."""

    def __init__(self, match: Callable[[Any, Any], bool]) -> None:
        self._pred = match
        self._filters: dict[Hashable, Any] = {}

    def add(self, key: Hashable, pf: Any) -> None:
        self._filters[key] = pf

    def remove(self, key: Hashable) -> None:
        self._filters.pop(key, None)

    def match(self, pe: Any) -> set[Hashable]:
        pred = self._pred
        return {k for k, f in self._filters.items() if pred(f, pe)}

    def __len__(self) -> int:
        return len(self._filters)


@runtime_checkable
class BrokerScheme(Protocol):
    """What a routing node does for one profile (see the module docstring)."""

    profile: str

    def decode_filter(self, wire: Mapping[str, Any]) -> Any: ...

    def decode_event(self, routing: Mapping[str, Any]) -> Any: ...

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None: ...

    def covers(self, f1: Any, f2: Any) -> bool: ...

    def broker_match(self, pf: Any, pe: Any) -> bool: ...

    def new_matcher(self) -> Matcher: ...

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None: ...


@runtime_checkable
class ClientScheme(Protocol):
    """What a publisher / subscriber does for one profile (see the module docstring)."""

    profile: str

    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter: ...

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter: ...

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent: ...

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event: ...


class Scheme(BrokerScheme, ClientScheme, Protocol):
    """A profile implementing both faces (the plain profile does)."""


class SchemeRegistry:
    """Profile name -> broker-side scheme. The core dispatches on each message's ``profile``."""

    def __init__(self, schemes: Iterable[BrokerScheme] = ()) -> None:
        self._schemes: dict[str, BrokerScheme] = {}
        for s in schemes:
            self.register(s)

    def register(self, scheme: BrokerScheme) -> None:
        name = getattr(scheme, "profile", None)
        if not isinstance(name, str) or not name:
            raise ValidationError("a scheme needs a non-empty 'profile' name")
        if name in self._schemes:
            raise ValidationError(f"profile {name!r} is already registered")
        self._schemes[name] = scheme

    def get(self, profile: str) -> BrokerScheme | None:
        return self._schemes.get(profile)

    def __contains__(self, profile: object) -> bool:
        return profile in self._schemes

    def __iter__(self) -> Any:
        return iter(self._schemes.values())

    @property
    def profiles(self) -> tuple[str, ...]:
        return tuple(sorted(self._schemes))


def withdrawal_meta(
    scheme: object, hook: str, f: Filter | None, *, now: float, rng: Random | None = None
) -> dict[str, Any]:
    """The ``meta`` for an unsubscribe (``hook="unsubscribe_meta"``) or unadvertise
    (``"unadvertise_meta"``): the scheme's optional hook, or ``{}`` when it has none."""
    if hook not in ("unsubscribe_meta", "unadvertise_meta"):
        raise ValidationError(f"unknown withdrawal hook {hook!r}")
    fn = getattr(scheme, hook, None)
    if fn is None or f is None:
        return {}
    return dict(fn(f, now=now, rng=rng))
