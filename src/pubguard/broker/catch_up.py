"""Catch-up routing: publications of a new key epoch for links that could not renew in time.

Theory of operation
-------------------
psguard and default tokens change with the key epoch (psguard.txt §3.2): a subscription made
for epoch ``e`` matches none of epoch ``e + 1``'s publications, and the subtree's renewals for
the next epoch reach a broker only over a live link. A :class:`CatchUpRouter`, owned by the
:class:`~pubguard.broker.core.Broker`, keeps what the core needs to bridge the gap:

- per ``(link, profile)`` the newest key epoch of the subscriptions that came over it (the
  scheme's ``filter_epoch``) and how many it holds (a withdrawal of the last one forgets it);
- the links that are *down* (the driver said so, ``link_down``) and since when, that came back
  at a time (``link_live``: catching up for ``CATCH_UP_S``), or that are *dormant* (down for
  longer than every profile's ``catch_up_horizon``: off the publication path until they
  return);
- per down or catching-up link the publications caught up during this outage (at most
  ``CATCH_UP_MAX``), and per durable client link the publications *parked* for it until its
  renewal arrives (at most ``PARK_MAX``).

:meth:`CatchUpRouter.route` is called for every publication while any link is recovering; see
its docstring for the rule and why it is safe. The same state holds a lapsed lease open while
its link cannot renew (:meth:`CatchUpRouter.lapsed`, ``Broker.expire``).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from typing import Any, Final

from pubguard.broker.actions import Action, DeliverTo, Forward
from pubguard.broker.profiles import DECODE_ERRORS, Key, Profile
from pubguard.schemes.base import BrokerScheme, LinkInfo, LinkKind
from pubguard.wire.messages import Deliver, Publish, Subscribe

__all__ = ["CATCH_UP_MAX", "CATCH_UP_S", "PARK_MAX", "CatchUpRouter"]

#: seconds a broker link that came back counts as catching up (``Broker.link_live``)
CATCH_UP_S: Final = 5.0
#: publications parked per catching-up client link, awaiting its renewal (oldest dropped)
PARK_MAX: Final = 4096
#: publications caught up per broker link and outage: what they add to a down link's queue
#: stays well under the transport's back-pressure threshold (``max_queue``, 10,000 frames),
#: so a subtree's outage does not stall the publishers sooner than it did without them
CATCH_UP_MAX: Final = 4096
DOWN: Final = float("inf")  # a down link's entry in ``recovering``

Parked = deque[tuple[Publish, Any, int]]


class CatchUpRouter:
    """The catch-up state of one broker (see the module docstring). ``profiles`` is the
    broker's table of profiles in use (read only); what is caught up, capped, withheld,
    parked or unparked is counted in ``counters`` (the broker's)."""

    def __init__(
        self,
        profiles: Mapping[str, Profile],
        counters: Counter[str],
        no_catch_up: frozenset[str],
    ) -> None:
        self._profiles = profiles
        self._counters = counters
        # peers (child brokers, durable clients by authenticated name) never caught up to:
        # the operator's choice for a subtree in a less trusted domain (docs/network.md)
        self.no_catch_up = no_catch_up
        #: the links that are down (``DOWN``) or came back at a time
        self.recovering: dict[str, float] = {}
        self._down_since: dict[str, float] = {}
        self._dormant: set[str] = set()  # down for longer than every profile's horizon
        self._caught: Counter[str] = Counter()  # publications caught up per link and outage
        self._epochs: dict[tuple[str, str], int] = {}
        self._sub_counts: Counter[tuple[str, str]] = Counter()
        #: client links' parked publications (with their decoded events and epochs)
        self.parked: dict[str, Parked] = {}

    # -- link state ---------------------------------------------------------------------------
    def link_down(self, link_id: str, now: float | None) -> None:
        """A child broker link or durable client link went down at ``now`` (see
        ``Broker.link_down``)."""
        if self.recovering.get(link_id) == DOWN or link_id in self._dormant:
            return  # down already
        self.recovering[link_id] = DOWN
        self._down_since.pop(link_id, None)
        self._caught.pop(link_id, None)
        if now is not None:
            self._down_since[link_id] = now

    def link_live(self, link_id: str, now: float) -> None:
        """A link that was down is connected again: it catches up for ``CATCH_UP_S``."""
        if link_id in self.recovering or link_id in self._dormant:
            self._dormant.discard(link_id)
            self.recovering[link_id] = now
            self._down_since.pop(link_id, None)

    def restored_down(self, link_id: str) -> None:
        """A link restored from the store is down until the driver reconnects it."""
        self.recovering[link_id] = DOWN

    def forget_link(self, link_id: str) -> None:
        """The link is gone: nothing of it is kept."""
        self.recovering.pop(link_id, None)
        self._down_since.pop(link_id, None)
        self._dormant.discard(link_id)
        self._caught.pop(link_id, None)
        self.parked.pop(link_id, None)
        for lp in [lp for lp in self._epochs if lp[0] == link_id]:
            del self._epochs[lp]

    def tick(self, now: float) -> None:
        """Links back for longer than ``CATCH_UP_S`` have caught up (``Broker.expire``)."""
        for lk, up in list(self.recovering.items()):
            if up != DOWN and now - up > CATCH_UP_S:
                self._caught_up(lk)

    # -- subscriptions --------------------------------------------------------------------------
    def note_subscription(self, link_id: str, msg: Subscribe, scheme: BrokerScheme) -> None:
        """Count the subscription under its link and profile, and keep the newest key epoch
        its scheme reads from it (``filter_epoch``; None for a profile whose routing does not
        change with the epoch). A lapsed one keeps its epoch (its link may be down across the
        change); a withdrawal of the link's last one forgets it."""
        lp = (link_id, msg.profile)
        self._sub_counts[lp] += 1
        try:
            epoch = scheme.filter_epoch(msg)
        except DECODE_ERRORS:
            return
        if epoch is not None and epoch > self._epochs.get(lp, -1):
            self._epochs[lp] = epoch

    def note_removal(self, link_id: str, profile: str) -> None:
        """A subscription of ``link_id`` and ``profile`` is gone (withdrawn, lapsed, replaced)."""
        self._sub_counts[(link_id, profile)] -= 1

    def withdrawn(self, link_id: str, profile: str) -> None:
        """An unsubscribe came over ``link_id``: withdrawn, not lapsed, so once none of the
        link's subscriptions of ``profile`` is left it gets no catch-up."""
        if not self._sub_counts[(link_id, profile)]:
            self._epochs.pop((link_id, profile), None)

    def renewed(self, link_id: str, profile: str) -> list[Action]:
        """A subscription (a renewal after an outage, perhaps) came over client link
        ``link_id``: what is parked for it that it now matches (``_unpark``)."""
        if not self.parked or link_id not in self.parked:
            return []
        epoch = self._epochs.get((link_id, profile))
        if epoch is None:
            return []
        return self._unpark(link_id, profile, epoch)

    def lapsed(self, link_id: str, profile: str, expires: float, now: float) -> bool:
        """Whether an entry of ``link_id`` whose lease ends at ``expires`` lapses at ``now``
        (``Broker.expire``: not while its link is down or catching up)."""
        if expires >= now:
            return False
        up = DOWN if link_id in self._dormant else self.recovering.get(link_id)
        if up is None:
            return True
        if up == DOWN:  # down: held open for the horizon past the lease
            prof = self._profiles.get(profile)
            horizon = prof.scheme.catch_up_horizon if prof is not None else 0.0
            return now > expires + horizon
        return now - up > CATCH_UP_S  # back: its peer has re-sent its renewals by then

    # -- publications -------------------------------------------------------------------------
    def route(
        self,
        msg: Publish,
        pe: Any,
        src: str,
        out: list[Action],
        now: float,
        links: Mapping[str, LinkInfo],
        parent: str | None,
    ) -> None:
        """Route ``msg`` also to each child broker link whose newest subscriptions of its
        profile are of an earlier key epoch than the publication's (the scheme's
        ``filter_epoch`` and ``event_epoch``) while it is down (for at most the scheme's
        ``catch_up_horizon``, its timestamp window: later they would arrive stale) or came back
        less than ``CATCH_UP_S`` ago (at most ``CATCH_UP_MAX`` per outage). For such a durable
        client link, park it instead (at most ``PARK_MAX``) until the client's renewal comes
        (``_unpark``: a client is handed only what its own filters match).

        Why: psguard and default tokens change with the key epoch (psguard.txt §3.2), and a
        subtree's renewals for the next epoch reach this broker only over a live link. If the
        link (or this broker) was down when they were sent, and still is at the change, the
        new epoch's publications match none of the subscriptions this broker holds for it and
        would be lost to the whole subtree until the renewals arrive. Routed to the link
        instead (queued in its outbox while it is down), they are matched below, where the
        renewals are. What the subtree receives is what a broker may see anyway (tokens and
        ciphertext); a link withdrawn of its last subscription gets nothing extra, a live link
        stops catching up at its renewal or after ``CATCH_UP_S``, whichever comes first, and
        a down one after the horizon (however many epochs its subscriptions lag: with short
        epochs an outage and the reconnection back-off span several)."""
        prof = self._profiles.get(msg.profile)
        if prof is None:
            return
        epoch = prof.scheme.event_epoch(msg)
        if epoch is None:
            return
        horizon = prof.scheme.catch_up_horizon
        counters = self._counters
        sent = {a.link for a in out}
        for lk, up in list(self.recovering.items()):
            if up == DOWN:  # since the driver said so, or (restored) since now
                waited = now - self._down_since.setdefault(lk, now)
                if waited > horizon:
                    if waited > self._longest_horizon():  # off this loop until it is back
                        del self.recovering[lk]
                        self._dormant.add(lk)
                    continue
            elif now - up > CATCH_UP_S:
                self._caught_up(lk)
                continue
            if lk == src or lk in sent or lk == parent:
                continue
            newest = self._epochs.get((lk, msg.profile))
            if newest is None or newest >= epoch:
                continue
            if links[lk].peer in self.no_catch_up:  # the operator's choice: matched only
                counters["publish.catch_up_withheld"] += 1
                continue
            if links[lk].kind is not LinkKind.CLIENT:
                if self._caught[lk] >= CATCH_UP_MAX:
                    counters["publish.catch_up_capped"] += 1
                    continue
                self._caught[lk] += 1
                out.append(Forward(lk, msg))
                counters["publish.catch_up"] += 1
                continue
            parked = self.parked.get(lk)
            if parked is None:
                parked = self.parked[lk] = deque(maxlen=PARK_MAX)
            if len(parked) == PARK_MAX:
                counters["publish.parked_overflow"] += 1
            parked.append((msg, pe, epoch))
            counters["publish.parked"] += 1

    def _longest_horizon(self) -> float:
        """The longest ``catch_up_horizon`` of the broker's profiles: a link down longer is
        dormant (``Broker.link_live`` wakes it), so a durable client that never returns costs
        the publications nothing."""
        return max((p.scheme.catch_up_horizon for p in self._profiles.values()), default=0.0)

    def _caught_up(self, link_id: str) -> None:
        """The link has been back for ``CATCH_UP_S``: routed by matching alone again, and
        what is still parked for it is dropped (counted)."""
        del self.recovering[link_id]
        gone = self.parked.pop(link_id, None)
        if gone:
            self._counters["publish.parked_expired"] += len(gone)

    def _unpark(self, link_id: str, profile: str, epoch: int) -> list[Action]:
        """A subscription came over client link ``link_id``, whose newest key epoch of
        ``profile`` is now ``epoch``: hand it the parked publications of that profile, up to
        that epoch, that its subscriptions now match (the rest stay parked until the link
        has caught up)."""
        parked = self.parked.get(link_id)
        prof = self._profiles.get(profile)
        if not parked or prof is None:
            return []
        out: list[Action] = []
        keep: Parked = deque(maxlen=PARK_MAX)
        for msg, pe, e in parked:
            if msg.profile != profile or e > epoch:
                keep.append((msg, pe, e))
                continue
            keys: set[Key] = prof.matcher.match(pe)  # type: ignore[assignment]
            sids = sorted(sid for lk, sid in keys if lk == link_id)
            if not sids:
                keep.append((msg, pe, e))
                continue
            out.append(DeliverTo(link_id, Deliver.trusted(msg, tuple(sids))))
            self._counters["publish.unparked"] += 1
            self._counters["delivered"] += 1
        if keep:
            self.parked[link_id] = keep
        else:
            del self.parked[link_id]
        return out
