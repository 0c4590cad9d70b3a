"""The broker core's per-profile routing tables, and the keys its tables are indexed by.

Every message names its profile; the core keeps one :class:`Profile` per profile in use: the
scheme, its matcher (the index over decoded filters) and the upward :class:`ForwardSet`
(Siena covering, eventguard.txt §2.1). A profile's optional hooks
(:class:`~pubguard.schemes.base.BrokerScheme`: ``checks_messages``, ``rewrites_outgoing``,
``filter_anchors``) are read once, here, when the profile is first used, so the publication
path never asks the scheme what it does.

Entries are keyed ``(link, id)`` (:data:`Key`): ids are hop-scoped, so the same id from two
links names two entries. What an entry forwards goes out renamed :func:`forward_id`.
"""

from __future__ import annotations

import hashlib
from typing import Final

from pubguard.broker.covering import ForwardSet
from pubguard.errors import PubguardError
from pubguard.schemes.base import BrokerScheme, Matcher

__all__ = ["DECODE_ERRORS", "Key", "Profile", "forward_id", "skey", "why"]

Key = tuple[str, str]  # (link_id, sub_id or adv_id)

#: what a scheme hook may raise on bad input (-> malformed); anything else is a bug and propagates
DECODE_ERRORS: Final = (
    PubguardError,
    TypeError,
    ValueError,
    KeyError,
    IndexError,
    AttributeError,
)


def why(exc: BaseException) -> str:
    """Drop detail for a decoding failure: our own messages, never a foreign repr."""
    if isinstance(exc, PubguardError):
        return str(exc)
    return f"undecodable ({type(exc).__name__})"


def skey(key: Key) -> str:
    """The store key of a ``(link, id)`` pair."""
    return f"{key[0]}\x00{key[1]}"


def forward_id(broker_id: str, key: Key) -> str:
    """The id under which broker ``broker_id`` forwards the entry ``key``: ids are hop-scoped,
    so a forwarded subscription or advertisement is renamed ``<broker_id>~<hash(link, id)>``."""
    h = hashlib.blake2b(skey(key).encode(), digest_size=10).hexdigest()
    return f"{broker_id}~{h}"


class Profile:
    """Per-profile routing tables: the scheme, its matcher and the upward forward set, plus
    whether the scheme's ``broker_check`` / ``outgoing`` hooks do anything (the scheme's
    ``checks_messages`` / ``rewrites_outgoing``, read once) and whether ``handle_batch`` may
    admit a run of its publications before routing any of them (``batches``)."""

    __slots__ = ("batches", "checks", "fwd", "in_runs", "matcher", "rewrites", "runs", "scheme")

    def __init__(self, scheme: BrokerScheme) -> None:
        self.scheme = scheme
        self.matcher: Matcher = scheme.new_matcher()
        # the scheme's equality anchors (model filters: Filter.covers) narrow the covering scans
        self.fwd = ForwardSet(scheme.covers, scheme.filter_anchors)
        self.checks = bool(scheme.checks_messages)
        self.rewrites = bool(scheme.rewrites_outgoing)
        # handle_batch admits a run's publications (guards included) before routing any of
        # them: that is handle's outcome unless a later guard could see what an earlier
        # outgoing did, so a profile with both hooks is never batched
        plain = not self.checks and not self.rewrites
        batch = getattr(self.matcher, "match_batch", None) is not None
        # the scheme checks a run of publications in one call (``broker_check_run``)
        self.runs = self.checks and bool(scheme.checks_in_runs)
        # the scheme rewrites a run's messages in one call (``outgoing_run``) and its guard
        # never reads what its outgoing did: a run is admitted, matched, routed, then rewritten
        self.in_runs = self.rewrites and bool(scheme.rewrites_in_runs)
        self.batches = (
            plain or self.in_runs or ((batch or self.runs) and not (self.checks and self.rewrites))
        )
