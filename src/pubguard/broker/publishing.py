"""Publication routing for the broker core: admit, match, route (eventguard.txt §2.1).

A publication is *admitted* (profile known, event id not in the duplicate window, routing
decodable by the scheme, the scheme's guards pass; then its id is recorded), *matched* with the
profile's index, and *routed*: one ``DeliverTo`` per local client link naming all of its
matching subscriptions (not back to the publisher unless ``echo``), one ``Forward`` per child
broker link with a matching (covering) filter but the one it came from, and a ``Forward`` to the
parent unless it came from there (see ``pubguard.broker.core`` for why this is exactly once on a
tree). The three steps are separate so that ``Broker.handle_batch`` can admit a run of
publications one by one, match them together (the index's ``match_batch``, vectorised across
events) and route them in arrival order, with exactly the actions and state of one ``handle``
per message.

Cheap rejects first (the flood containment of eventguard.txt §4.7, Fig. 3): a publication
still in wire form whose ``event_id`` is in the duplicate window, of a profile already in use,
is dropped as ``duplicate`` *before* it is decoded (:meth:`PublicationRouting._seen_wire`):
a replayed copy costs a dict lookup instead of decoding and freezing its routing fields. The
drop, its reason, detail and counters are those of the full path; only a duplicate that is
also malformed now counts as ``duplicate`` rather than ``malformed``. (A banned source is
refused by the profile's guard, ``schemes/common/guard_check.py``, which needs the decoded message.)
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pubguard.broker.actions import Action, DeliverTo, Forward
from pubguard.broker.advertising import DECODE_ERRORS, CoreHooks, Key, why
from pubguard.broker.dedup import DedupWindow
from pubguard.errors import DropReason
from pubguard.schemes.base import LinkInfo, LinkKind, Matcher
from pubguard.wire.messages import Deliver, Publish

if TYPE_CHECKING:
    from pubguard.broker.core import _Profile

__all__ = ["BATCH_MATCH_MIN", "CATCH_UP_MAX", "CATCH_UP_S", "PARK_MAX", "PublicationRouting"]

BATCH_MATCH_MIN: Final = 32  # publications in a run before handle_batch uses match_batch
#: seconds a broker link that came back counts as catching up (``Broker.link_live``)
CATCH_UP_S: Final = 5.0
#: publications parked per catching-up client link, awaiting its renewal (oldest dropped)
PARK_MAX: Final = 4096
#: publications caught up per broker link and outage: what they add to a down link's queue
#: stays well under the transport's back-pressure threshold (``max_queue``, 10,000 frames),
#: so a subtree's outage does not stall the publishers sooner than it did without them
CATCH_UP_MAX: Final = 4096
_DOWN: Final = float("inf")  # a down link's entry in ``_recovering``


@dataclass(slots=True)
class _Admitted:
    """A publication that passed the guards: its profile, matcher and decoded event."""

    prof: _Profile
    matcher: Matcher
    pe: Any


class PublicationRouting(CoreHooks):
    """Mixin of :class:`~pubguard.broker.core.Broker`: the publication handlers."""

    links: dict[str, LinkInfo]
    parent: str | None
    echo: bool
    counters: Counter[str]
    _dedup: DedupWindow
    _profiles: dict[str, _Profile]
    _recovering: dict[str, float]
    _down_since: dict[str, float]
    _dormant: set[str]
    _caught: Counter[str]
    _epochs: dict[tuple[str, str], int]
    _parked: dict[str, deque[tuple[Publish, Any, int]]]
    no_catch_up: frozenset[str]

    # -- publications -------------------------------------------------------------------------
    def _seen_wire(self, message: Any, link: LinkInfo, now: float) -> list[Action] | None:
        """The drop of a wire publication whose id is in the duplicate window, decided before
        decoding it; None when the message needs the full path."""
        if type(message) is not dict or message.get("op") != "publish":
            return None
        eid, prof = message.get("event_id"), message.get("profile")
        if type(eid) is not str or type(prof) is not str or prof not in self._profiles:
            return None
        if not self._dedup.seen(eid, now):
            return None
        self.counters["in.publish"] += 1
        return self._drop(DropReason.DUPLICATE, "seen event id", link, eid, "publish")

    def _on_publish(
        self, msg: Publish, link: LinkInfo, now: float, counted: bool = False
    ) -> list[Action]:
        adm = self._admit(msg, link, now, counted)
        if isinstance(adm, list):
            return adm
        keys: set[Key] = adm.matcher.match(adm.pe)  # type: ignore[assignment]
        return self._route(msg, link, adm, keys, now)

    def _admit(
        self, msg: Publish, link: LinkInfo, now: float, counted: bool = False
    ) -> _Admitted | list[Action]:
        """Everything before matching: profile, duplicate window, decoding, the guards."""
        if not counted:
            self.counters["in.publish"] += 1
        prof = self._profiles.get(msg.profile) or self._profile(msg.profile)
        if prof is None:
            return self._drop(
                DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.event_id, "publish"
            )
        if self._dedup.seen(msg.event_id, now):
            return self._drop(DropReason.DUPLICATE, "seen event id", link, msg.event_id, "publish")
        try:
            pe = prof.scheme.decode_event(msg.routing)
        except DECODE_ERRORS as exc:
            return self._drop(DropReason.MALFORMED, why(exc), link, msg.event_id, "publish")
        if prof.checks:
            refused = self._check(prof.scheme, msg, link, now, None)
            if refused is not None:
                return refused
        self._dedup.record(msg.event_id, now)
        return _Admitted(prof, prof.matcher, pe)

    def _route(
        self, msg: Publish, link: LinkInfo, adm: _Admitted, keys: set[Key], now: float
    ) -> list[Action]:
        """The actions for an admitted publication whose matching keys are ``keys``."""
        out: list[Action] = []
        src = link.link_id
        delivered = 0
        if len(keys) == 1:  # the common case (fan-out one): no grouping, no sorting
            ((lk, sid),) = keys
            if self.links[lk].kind is LinkKind.CLIENT:
                if lk != src or self.echo:
                    out.append(DeliverTo(lk, Deliver.trusted(msg, (sid,))))
                    delivered = 1
            elif lk != src:
                out.append(Forward(lk, msg))
        elif keys:
            by_link: dict[str, list[str]] = {}
            for lk, sid in keys:
                sids = by_link.get(lk)
                if sids is None:
                    by_link[lk] = [sid]
                else:
                    sids.append(sid)
            links = self.links
            echo = self.echo
            client = LinkKind.CLIENT
            for lk in sorted(by_link) if len(by_link) > 1 else by_link:
                if links[lk].kind is client:
                    if lk != src or echo:
                        sids = by_link[lk]
                        if len(sids) > 1:
                            sids.sort()
                        out.append(DeliverTo(lk, Deliver.trusted(msg, tuple(sids))))
                        delivered += 1
                elif lk != src:
                    out.append(Forward(lk, msg))
        parent = self.parent
        if parent is not None and parent != src:
            out.append(Forward(parent, msg))
        if self._recovering:  # a broker link is down or catching up
            self._catch_up(msg, adm.pe, src, out, now)
        counters = self.counters
        counters["delivered"] += delivered
        prof = adm.prof
        if not prof.rewrites:
            counters["sent"] += len(out)
            return out
        return self._outgoing(out, now, prof.scheme)

    def _catch_up(self, msg: Publish, pe: Any, src: str, out: list[Action], now: float) -> None:
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
        read = getattr(prof.scheme, "event_epoch", None) if prof is not None else None
        epoch = read(msg) if read is not None else None
        if epoch is None:
            return
        horizon = getattr(prof.scheme, "catch_up_horizon", 0.0)  # type: ignore[union-attr]
        sent = {a.link for a in out}
        for lk, up in list(self._recovering.items()):
            if up == _DOWN:  # since the driver said so, or (restored) since now
                waited = now - self._down_since.setdefault(lk, now)
                if waited > horizon:
                    if waited > self._longest_horizon():  # off this loop until it is back
                        del self._recovering[lk]
                        self._dormant.add(lk)
                    continue
            elif now - up > CATCH_UP_S:
                self._caught_up(lk)
                continue
            if lk == src or lk in sent or lk == self.parent:
                continue
            newest = self._epochs.get((lk, msg.profile))
            if newest is None or newest >= epoch:
                continue
            if self.links[lk].peer in self.no_catch_up:  # the operator's choice: matched only
                self.counters["publish.catch_up_withheld"] += 1
                continue
            if self.links[lk].kind is not LinkKind.CLIENT:
                if self._caught[lk] >= CATCH_UP_MAX:
                    self.counters["publish.catch_up_capped"] += 1
                    continue
                self._caught[lk] += 1
                out.append(Forward(lk, msg))
                self.counters["publish.catch_up"] += 1
                continue
            parked = self._parked.get(lk)
            if parked is None:
                parked = self._parked[lk] = deque(maxlen=PARK_MAX)
            if len(parked) == PARK_MAX:
                self.counters["publish.parked_overflow"] += 1
            parked.append((msg, pe, epoch))
            self.counters["publish.parked"] += 1

    def _longest_horizon(self) -> float:
        """The longest ``catch_up_horizon`` of this broker's profiles: a link down longer is
        dormant (``Broker.link_live`` wakes it), so a durable client that never returns costs
        the publications nothing."""
        return max(
            (getattr(p.scheme, "catch_up_horizon", 0.0) for p in self._profiles.values()),
            default=0.0,
        )

    def _caught_up(self, link_id: str) -> None:
        """The link has been back for ``CATCH_UP_S``: routed by matching alone again, and
        what is still parked for it is dropped (counted)."""
        del self._recovering[link_id]
        gone = self._parked.pop(link_id, None)
        if gone:
            self.counters["publish.parked_expired"] += len(gone)

    def _unpark(self, link_id: str, profile: str, epoch: int) -> list[Action]:
        """A subscription came over client link ``link_id``, whose newest key epoch of
        ``profile`` is now ``epoch``: hand it the parked publications of that profile, up to
        that epoch, that its subscriptions now match (the rest stay parked until the link
        has caught up)."""
        parked = self._parked.get(link_id)
        prof = self._profiles.get(profile)
        if not parked or prof is None:
            return []
        out: list[Action] = []
        keep: deque[tuple[Publish, Any, int]] = deque(maxlen=PARK_MAX)
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
            self.counters["publish.unparked"] += 1
            self.counters["delivered"] += 1
        if keep:
            self._parked[link_id] = keep
        else:
            del self._parked[link_id]
        return out

    def _route_run(
        self,
        run: list[tuple[Publish, _Admitted | None, list[Action]]],
        link: LinkInfo,
        now: float,
        out: list[Action],
    ) -> None:
        """Match a run of consecutive publications (together, per matcher) and append their
        actions (or their drops) to ``out`` in arrival order."""
        groups: dict[int, tuple[Matcher, list[int]]] = {}
        for i, (_, adm, _) in enumerate(run):
            if adm is not None:
                groups.setdefault(id(adm.matcher), (adm.matcher, []))[1].append(i)
        found: dict[int, set[Key]] = {}
        for matcher, idx in groups.values():
            pes = [run[i][1].pe for i in idx]  # type: ignore[union-attr]
            batch = getattr(matcher, "match_batch", None)
            # a matcher may name its own break-even run length (psguard's TokenMatcher: 8)
            if batch is not None and len(idx) >= getattr(matcher, "batch_min", BATCH_MATCH_MIN):
                results = batch(pes)
            else:
                results = [matcher.match(pe) for pe in pes]
            found.update(zip(idx, results, strict=True))
        for i, (msg, adm, dropped) in enumerate(run):
            out += dropped if adm is None else self._route(msg, link, adm, found[i], now)
