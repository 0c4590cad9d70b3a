"""The plain profile: Siena-style content-based routing with no security (the baseline).

Theory of operation
-------------------
Brokers see everything (eventguard.txt §2.1, the reference pub-sub model): a subscription's
wire filter is its constraint list ``{"constraints": [[name, op, value], ...]}``, a
publication's ``routing`` is the plaintext attribute map and its ``body`` the payload. Brokers
match with the filter index, cover with :meth:`Filter.covers` and check nothing. Every secure
profile is measured against this one (docs/profiles.md, "Performance").
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from random import Random
from types import MappingProxyType
from typing import Any

from pubguard.errors import DropReason, ValidationError
from pubguard.model.codec import constraint_from_json
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.base import (
    BrokerScheme,
    CheckContext,
    ClientScheme,
    Matcher,
    ProtectedEvent,
    ProtectedFilter,
)

__all__ = ["PLAIN", "PlainScheme", "new_event_id"]

PLAIN = "plain"
_INF = float("inf")


def new_event_id(rng: Random | None = None) -> str:
    """A 128-bit random identifier in hex (from ``rng`` when given, for determinism)."""
    if rng is None:
        return secrets.token_hex(16)
    return f"{rng.getrandbits(128):032x}"


def filter_to_wire(f: Filter) -> dict[str, Any]:
    return {"constraints": [c.to_json() for c in f.constraints]}


def filter_from_wire(wire: Mapping[str, Any]) -> Filter:
    if not isinstance(wire, Mapping):
        raise ValidationError("plain filter must be a mapping")
    if set(wire) != {"constraints"}:
        raise ValidationError("plain filter has exactly one field, 'constraints'")
    cs = wire["constraints"]
    if not isinstance(cs, list | tuple):
        raise ValidationError("plain filter 'constraints' must be a list")
    return Filter(tuple(constraint_from_json(list(c) if isinstance(c, tuple) else c) for c in cs))


class PlainScheme(BrokerScheme, ClientScheme):
    """Both faces of the plain profile. Stateless; one instance can serve every role."""

    profile = PLAIN

    @property
    def checks_messages(self) -> bool:
        """False while ``broker_check`` accepts everything (the core then skips the call and
        its context); a subclass that overrides ``broker_check`` turns it on automatically."""
        return type(self).broker_check is not PlainScheme.broker_check

    @property
    def rewrites_outgoing(self) -> bool:
        """False while ``outgoing`` is the identity (the core then skips the call); a subclass
        that overrides ``outgoing`` turns it on automatically."""
        return type(self).outgoing is not PlainScheme.outgoing

    # -- client side ------------------------------------------------------------------------
    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter(filter_to_wire(f))

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter(filter_to_wire(f))

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent:
        meta: dict[str, Any] = {} if event.type is None else {"type": event.type}
        return ProtectedEvent(
            event_id=event.id if event.id is not None else new_event_id(rng),
            routing=dict(event.attrs),
            body=event.payload,
            meta=meta,
        )

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        etype = meta.get("type")
        if etype is not None and not isinstance(etype, str):
            raise ValidationError("plain event 'type' must be a string")
        return Event(dict(routing), id=event_id, type=etype, payload=bytes(body))

    # -- broker side ------------------------------------------------------------------------
    def decode_filter(self, wire: Mapping[str, Any]) -> Filter:
        return filter_from_wire(wire)

    def decode_event(self, routing: Mapping[str, Any]) -> Mapping[str, Any]:
        """The event's attributes as a read-only mapping (what the index matches on), checked
        as :class:`Event` checks them. A publication's frozen ``routing`` is returned as is:
        one type check per attribute, no copy (this runs for every event at every hop)."""
        if not isinstance(routing, Mapping):
            raise ValidationError("plain routing must be an attribute mapping")
        for k, v in routing.items():
            t = type(v)
            if (
                not k
                or type(k) is not str
                or not (t is str or t is int or t is bool or (t is float and -_INF < v < _INF))
            ):
                # the model's checks word the error (or accept an odd but valid value)
                return MappingProxyType(dict(Event(dict(routing)).attrs))
        if type(routing) is MappingProxyType:
            return routing
        return MappingProxyType(dict(routing))

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        return None  # the baseline has no guards

    def covers(self, f1: Filter, f2: Filter) -> bool:
        return f1.covers(f2)

    def broker_match(self, pf: Filter, pe: Event) -> bool:
        return pf.matches(pe)

    def new_matcher(self) -> Matcher:
        try:  # the counting index, once pubguard.matching.index exists
            from pubguard.matching.index import IndexedMatcher  # type: ignore[import-not-found]
        except ImportError:
            from pubguard.matching.reference import ReferenceMatcher

            return ReferenceMatcher()
        return IndexedMatcher()  # type: ignore[no-any-return]

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message
