"""The routing half of a broker scheme whose filters and events are PSGuard tokens: the psguard
profile (:mod:`pubguard.schemes.psguard.broker`) and the default profile
(:mod:`pubguard.schemes.default.broker`) share it.

A broker sees tokens and ciphertext only (psguard.txt §4.1): it decodes a subscription into a
:class:`~pubguard.schemes.psguard.wire.TokenFilter` and a publication's routing part into a
:class:`~pubguard.schemes.psguard.wire.TokenEvent` (:mod:`pubguard.schemes.psguard.wire`),
indexes filters in a :class:`~pubguard.schemes.psguard.match.TokenMatcher`, and covers only
identical token sets (tokens reveal no order between filters). Outgoing messages are
forwarded unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pubguard.schemes.base import BrokerScheme, CheckContext, Matcher
from pubguard.schemes.psguard.match import TokenMatcher
from pubguard.schemes.psguard.record import broker_match
from pubguard.schemes.psguard.wire import TokenEvent, TokenFilter, parse_filter, parse_routing

__all__ = ["TokenRouting"]


class TokenRouting(BrokerScheme):
    """The routing half of a broker scheme whose filters and events are PSGuard tokens (the
    psguard and default profiles): decoding, covering, matching, outgoing unchanged."""

    rewrites_outgoing = False
    #: the last frozen routing part decoded and its TokenEvent: the core decodes a
    #: publication's routing just before its guards run, which then need it again
    _last_decoded: tuple[Any, TokenEvent | None] = (None, None)

    def decode_filter(self, wire: Mapping[str, Any]) -> TokenFilter:
        return parse_filter(wire)

    def event_epoch(self, message: Any) -> int | None:
        """The key epoch a publication's tokens belong to (its record's ``e``), or None."""
        e = message.meta.get("e")
        return e if type(e) is int else None

    def filter_epoch(self, message: Any) -> int | None:
        """The key epoch a subscription's tokens belong to (the client's ``e`` hint), or
        None: what the core's catch-up routing compares with a publication's epoch."""
        e = message.meta.get("e")
        return e if type(e) is int and e >= 0 else None

    def decode_event(self, routing: Mapping[str, Any]) -> TokenEvent:
        te = parse_routing(routing)
        if type(routing) is MappingProxyType:  # immutable (the core's frozen wire form)
            self._last_decoded = (routing, te)
        return te

    def decoded(self, routing: Mapping[str, Any]) -> TokenEvent | None:
        """``decode_event(routing)``'s result if this very (immutable) routing part was the
        last one decoded, else None."""
        last, te = self._last_decoded
        return te if last is routing else None

    def covers(self, f1: TokenFilter, f2: TokenFilter) -> bool:
        return bool(f2.scopes) and f1.canonical == f2.canonical

    def broker_match(self, pf: TokenFilter, pe: TokenEvent) -> bool:
        return broker_match(pf.as_rows(), pe.as_record())

    def new_matcher(self) -> Matcher:
        return TokenMatcher()

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message
