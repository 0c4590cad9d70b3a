"""The frame every guarded profile's ``broker_check`` shares (eventguard, narada, default).

Theory of operation
-------------------
A source that is struck out is refused before any signature check (narada §V-A: "rejecting
communications from IP addresses that have made multiple bogus attempts"; eventguard Fig. 3
containment). Otherwise the profile's own check runs; a forged token maps to FORGED, anything
malformed (validation, type, value or missing-key errors while parsing) to MALFORMED. A verdict
in ``striking`` counts one strike against the link, on client links always and on broker links
only with ``strike_brokers`` (a broker relays what others sent; banning it would cut a subtree).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.schemes.base import CheckContext, LinkKind
from pubguard.schemes.common.guards import StrikeCounter

__all__ = ["GUARD_STRIKING", "checked"]

GUARD_STRIKING: Final = frozenset(
    {DropReason.FORGED, DropReason.UNAUTHORISED, DropReason.MALFORMED, DropReason.REVOKED}
)


def checked(
    strikes: StrikeCounter,
    ctx: CheckContext,
    check: Callable[[], DropReason | None],
    *,
    striking: frozenset[DropReason] = GUARD_STRIKING,
    strike_brokers: bool = True,
) -> DropReason | None:
    """Run ``check`` behind ``strikes`` (see the module docstring); the verdict, None to pass."""
    src = ctx.link.link_id
    if strikes.banned(src, ctx.now):
        return DropReason.FLOOD
    try:
        reason = check()
    except InvalidToken:
        reason = DropReason.FORGED
    except (ValidationError, TypeError, ValueError, KeyError):
        reason = DropReason.MALFORMED
    if reason in striking and (strike_brokers or ctx.link.kind is LinkKind.CLIENT):
        strikes.strike(src, ctx.now)
    return reason
