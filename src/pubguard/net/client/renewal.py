"""Subscriptions that outlive a key epoch (psguard.txt §3.2, eventguard.txt §4.8).

Theory of operation
-------------------
A psguard or default subscription is a set of tokens (and, for default, a subscribe permit)
of one key epoch, and an eventguard subscription rests on an MS permit of one epoch. When the
epoch changes, publishers tag their events with the new epoch's tokens and keys, so a
subscription that is not renewed stops matching (psguard, default), or lapses with its
permit (eventguard, default: the brokers forget it, ``Broker.expire``). The
:class:`SubscriptionRenewal` a :class:`~pubguard.net.client.client.Client` owns renews every live
subscription once per epoch, without a gap:

- Each :class:`~pubguard.net.client.subscription.Subscription` has *generations*: the broker knows
  generation ``g`` as ``<id>@<g>`` (the first as ``<id>``). A delivery naming several
  generations of one subscription is handed over once.
- A scheme that ``renews_ahead`` (psguard, default: the KDC serves the next epoch's keys up
  to ``EPOCH_SKEW`` before it begins: the scheme's ``next_epoch_window``) gets the next
  generation built for the next epoch that long before the current one ends, less
  ``CLOCK_ALLOWANCE``. Both generations are routed across the
  boundary: the old epoch's events in flight match the old one, the new epoch's the new one.
- Otherwise (eventguard: the MS grants the current epoch only, and ``T(w)`` survives epochs,
  so the old generation keeps routing the new epoch's events) the next generation is asked
  for ``RENEW_AFTER`` seconds after the epoch ends.
- Advertisements are renewed in place (same id, the new epoch's permit) ``RENEW_AFTER``
  seconds after the change: routing does not depend on them, and brokers forget one whose
  permit ran out.
- The old generation is retired ``renew_grace`` seconds after its epoch ends (events of the
  old epoch are stale at the brokers by then: ``max_delay``). A scheme with
  ``leased_subscriptions`` needs nothing sent: every broker forgets it when its permit runs
  out. Otherwise (psguard, whose withdrawals need no proof) the client withdraws it.
- A renewal the key service refuses (the subscriber's rights were withdrawn, or its identity
  revoked) ends the subscription: its iteration stops, and the reason is logged. Other
  failures (the key service unreachable) are retried every ``RENEW_RETRY`` seconds.

The schemes' hooks (``renews_subscriptions``, ``epoch_end``, ``renews_ahead``,
``next_epoch_window``, ``leased_subscriptions``, ``blocks_on_io``) are declared with their
defaults on :class:`~pubguard.schemes.base.ClientScheme`. A scheme that does not renew
subscriptions (plain, narada) gets no renewal task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from pubguard.errors import DropError, PubguardError
from pubguard.wire.messages import Advertise, Subscribe, Unsubscribe

if TYPE_CHECKING:
    from pubguard.model.filters import Filter
    from pubguard.net.client.subscription import Subscription
    from pubguard.schemes.base import ClientScheme

__all__ = [
    "CLOCK_ALLOWANCE",
    "GENERATION_SEP",
    "RENEW_AFTER",
    "RENEW_RETRY",
    "SubscriptionRenewal",
]

log = logging.getLogger("pubguard.net.client")

GENERATION_SEP: Final = "@"  # <sub id>@<generation> on the wire (user ids may not hold it)
#: an ahead renewal is sent as early as the key service serves the next epoch (the scheme's
#: ``next_epoch_window`` before it begins) less this many seconds for clock differences.
#: Earlier is better: the renewal must reach the brokers above before the change, and one
#: down then holds it back (``pubguard cluster soak``); it costs a revocation nothing, since
#: any client may fetch the next epoch's keys that far ahead anyway.
CLOCK_ALLOWANCE: Final = 15.0
RENEW_AFTER: Final = 0.5  # seconds after an epoch ends that an MS renewal is asked for
RENEW_RETRY: Final = 2.0  # seconds between attempts when the key service cannot be reached
RENEW_IDLE: Final = 5.0  # seconds between looks while no subscription needs renewing
_NEXT: Final = 1e-3  # a time this far past an epoch's end lies in the next epoch


def wire_id(sub_id: str, generation: int) -> str:
    """The id generation ``generation`` of subscription ``sub_id`` has at the brokers."""
    return sub_id if generation == 0 else f"{sub_id}{GENERATION_SEP}{generation}"


def sub_id_of(wid: str) -> str:
    """Inverse of :func:`wire_id`: the subscription a delivery's id belongs to."""
    return wid.partition(GENERATION_SEP)[0]


class SubscriptionRenewal:
    """The renewal task of a :class:`~pubguard.net.client.client.Client` (see the module doc).

    It shares the client's live ``subs`` and ``adverts`` (it renews them, and ends those the
    key service refuses), sends through ``send`` (the client's credit-respecting send) and
    stops when ``closing()`` says so."""

    def __init__(
        self,
        scheme: ClientScheme,
        *,
        identity: str,
        renew_grace: float,
        subs: dict[str, Subscription],
        adverts: dict[str, Filter],
        send: Callable[[dict[str, Any]], Awaitable[None]],
        closing: Callable[[], bool],
    ) -> None:
        self.scheme, self.identity, self.renew_grace = scheme, identity, renew_grace
        self._subs, self._adverts = subs, adverts
        self._send, self._closing = send, closing
        #: the epoch end the subscriptions have been renewed past (ahead renewals: until
        #: then a new subscription is given the next epoch's generation at once)
        self._renewed_through = float("-inf")
        self._renew_wake: asyncio.Event | None = None  # set by a new subscription
        self.renewals = 0  # generations sent by renewals

    @property
    def active(self) -> bool:
        """Whether the scheme's subscriptions are renewed at all."""
        return self.scheme.renews_subscriptions

    async def run(self) -> None:
        if not self.active:
            return
        ends = self.scheme.epoch_end
        ahead = self.scheme.renews_ahead
        lead = max(0.0, self.scheme.next_epoch_window - CLOCK_ALLOWANCE)
        wake = self._renew_wake = asyncio.Event()
        retire: set[asyncio.Task[None]] = set()
        try:
            while not self._closing():
                now = time.time()
                try:
                    end = ends(max(now, self._renewed_through + _NEXT))
                except (PubguardError, OSError) as exc:
                    log.warning("client %s: cannot learn the key epoch: %s", self.identity, exc)
                    await asyncio.sleep(RENEW_RETRY)
                    continue
                if end is None or not (self._subs or self._adverts):  # until one is made
                    wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), RENEW_IDLE)
                    continue
                if end <= self._renewed_through:  # done; its grants are not renewed yet
                    await asyncio.sleep(RENEW_RETRY)
                    continue
                if ahead:  # the lead before the end, at most a quarter of an epoch
                    nxt = ends(end + _NEXT)
                    span = (nxt if nxt is not None else end) - end
                    at = end - min(lead, span / 4)
                else:
                    at = end + RENEW_AFTER
                if at > now:
                    await asyncio.sleep(at - now)
                    if self._closing():
                        return
                    if ahead and ends(max(time.time(), self._renewed_through + _NEXT)) != end:
                        continue  # the clock jumped: look again
                if not await self._renew_all(end, end + _NEXT if ahead else None):
                    await asyncio.sleep(RENEW_RETRY)
                    continue
                self._renewed_through = end
                loop = asyncio.get_running_loop()
                for coro in (
                    self._retire_at(end + self.renew_grace),
                    self._readvertise_at(end + RENEW_AFTER),
                ):
                    t = loop.create_task(coro)
                    retire.add(t)
                    t.add_done_callback(retire.discard)
        finally:
            for t in list(retire):
                t.cancel()

    async def _protect(self, method: Any, f: Filter, now: float) -> Any:
        """``method(f, now=now)``; in a worker thread when it calls a remote MS (eventguard),
        so the loop is not stalled (as the withdrawal permits, net/client/withdrawal.py)."""
        if self.scheme.blocks_on_io:
            return await asyncio.to_thread(method, f, now=now)
        return method(f, now=now)

    async def _renew_all(self, end: float, build_at: float | None) -> bool:
        """Send the next generation of every subscription not yet renewed past ``end``;
        False if some could not be built for now (tried again later)."""
        ok = True
        for sub in list(self._subs.values()):
            if sub.renewed_for >= end or sub.id not in self._subs:
                continue
            ok = await self._renew_one(sub, end, build_at) and ok
        return ok

    async def _renew_one(self, sub: Subscription, end: float, build_at: float | None) -> bool:
        at = time.time() if build_at is None else build_at
        try:
            pf = await self._protect(self.scheme.protect_filter, sub.filter, at)
        except DropError as exc:  # the key service refuses: rights withdrawn or revoked
            log.warning(
                "client %s: subscription %s not renewed for the next key epoch (%s): it ends",
                self.identity,
                sub.id,
                exc.reason.value,
            )
            self._subs.pop(sub.id, None)
            sub._close()
            return True
        except (PubguardError, OSError) as exc:
            log.warning(
                "client %s: cannot renew subscription %s yet: %s", self.identity, sub.id, exc
            )
            return False
        log.info(
            "client %s: subscription %s renewed past %.3f (built for %.3f, now %.3f)",
            self.identity,
            sub.id,
            end,
            at,
            time.time(),
        )
        sub.old.append((sub.wire_id, end))
        sub.generation += 1
        sub.wire_id = wire_id(sub.id, sub.generation)
        sub.built_at, sub.renewed_for = at, end
        self.renewals += 1
        await self._send(Subscribe(sub.wire_id, self.scheme.profile, pf.filter, pf.meta).to_wire())
        return True

    async def after_subscribe(self, sub: Subscription) -> None:
        """A subscription made after an ahead renewal, before the epoch ends, gets the next
        epoch's generation at once (like the others)."""
        if self._renew_wake is not None:
            self._renew_wake.set()
        through = self._renewed_through
        if self.active and self.scheme.renews_ahead and time.time() < through:
            await self._renew_one(sub, through, through + _NEXT)

    async def _readvertise_at(self, at: float) -> None:
        """Advertise again, in place (same id), with the new epoch's permit once it began:
        brokers forget an advertisement whose permit ran out (``Broker.expire``). Routing
        does not depend on advertisements, so this need not come ahead."""
        await asyncio.sleep(max(0.0, at - time.time()))
        for aid, f in list(self._adverts.items()):
            try:
                pf = await self._protect(self.scheme.protect_advertisement, f, time.time())
            except (PubguardError, OSError) as exc:
                log.warning("client %s: advertisement %s not renewed: %s", self.identity, aid, exc)
                continue
            if aid in self._adverts:
                await self._send(Advertise(aid, self.scheme.profile, pf.filter, pf.meta).to_wire())

    async def _retire_at(self, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.time()))
        for sub in list(self._subs.values()):
            await self.retire(sub, before=at - self.renew_grace)

    async def retire(self, sub: Subscription, *, before: float = float("inf")) -> None:
        """Forget ``sub``'s old generations whose epoch ended by ``before``; withdraw them
        unless the brokers expire them (a psguard withdrawal needs no proof)."""
        leased = self.active and self.scheme.leased_subscriptions
        keep = [(w, end) for w, end in sub.old if end > before]
        gone = [w for w, end in sub.old if end <= before]
        sub.old = keep
        if not leased:
            for w in gone:
                try:
                    await self._send(Unsubscribe(w, self.scheme.profile, {}).to_wire())
                except PubguardError as exc:
                    log.info(
                        "client %s: old generation %s not withdrawn: %s", self.identity, w, exc
                    )
