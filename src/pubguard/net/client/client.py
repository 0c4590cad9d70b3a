"""asyncio client: publish, subscribe, iterate over deliveries (in the style of nats-py).

::

    async with await connect("tls://127.0.0.1:7001", identity="alice", ssl=ctx) as client:
        sub = await client.subscribe("age > 20")
        await client.publish(Event({"age": 30}))
        async for delivery in sub:
            print(delivery.event)

Theory of operation
-------------------
A :class:`Client` owns one link to one broker and speaks the envelope of ``envelope.py``:
every subscribe / unsubscribe / advertise / publish is a reliable message with a sequence
number, kept until the broker acknowledges it (cumulative ``a``). At most ``window`` messages
are unacknowledged; ``publish`` awaits credit beyond that and awaits the socket's drain, so a
fast publisher is slowed instead of buffering without bound (back-pressure).

Deliveries arrive as reliable messages too; the client acknowledges them after putting them on
the subscriptions' bounded queues. A full queue drops the delivery and the next read of that
subscription raises :class:`~pubguard.errors.SlowConsumerError` (nats-py's slow consumer).

When the link fails (EOF, TLS error, no frame for ``heartbeat_timeout``) the client reconnects
with exponential back-off. If the broker *resumed* the session (a durable client, or a broker
that persisted this link) the client resends what the broker had not processed; otherwise it
re-subscribes every live subscription and resends unacknowledged publications (the broker's
de-dup window drops any that had in fact been processed). Such a fresh session may have missed
what was published while the link was down: ``fresh_sessions`` counts them and
``on_reconnect(resumed)`` is told of every reconnection.

What the broker does not serve is never sent: its ``hello`` names the profiles it serves, and
a publish, subscribe or advertise of another profile raises
:class:`~pubguard.errors.ProfileNotServedError` before the message is built. The broker's
verdict on what was sent comes back as the link's cumulative ack (accepted) or an ``Error``
reply (refused); :meth:`Client.confirm` waits for both and raises
:class:`~pubguard.errors.RefusedError` for refusals. When a newer connection with the same
identity replaces this one at the broker, the client stops: its calls and its subscriptions'
iterations raise :class:`~pubguard.errors.ReplacedError`.

A :class:`Client` owns three collaborators and hands each what it needs, never itself: its
:class:`~pubguard.net.client.link.ClientLink` (the connection: handshake, resumption,
reconnection, read loop, heartbeats, the reliable channel and the hand-over of deliveries),
its :class:`~pubguard.net.client.renewal.SubscriptionRenewal` (key-epoch renewal) and its
:class:`~pubguard.net.client.signing.BatchSigner` (Merkle batches of publications). The
client keeps the live subscriptions and advertisements, credit and the public API.

Batch signing without the caller batching (amortised signing). With a scheme that
signs Merkle roots (its ``merkle_batches`` hook: psguard, default, eventguard) and
``batch_sign`` on (the default for those schemes), :meth:`Client.publish` protects the event
at once (encryption, tokens, typed errors for a bad event) but leaves it unsigned in a pending
batch; the batch is signed under one Merkle root and queued when the event loop next runs the
client's flush callback (``call_soon``: no timer), or at once when it holds ``max_batch``
events, or before any other message is sent, so messages keep their order. At a low rate
every batch is one event (an ordinary single-signed publication, one loop iteration later,
the same iteration in which the frame is written anyway); at a high rate, or when the caller
publishes in a loop without yielding, batches grow up to ``max_batch`` and the publisher
signs, and every broker and subscriber verifies, once per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import ssl as _ssl
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from pubguard.errors import (
    DropError,
    DropReason,
    FilterRefusedError,
    ProfileNotServedError,
    PubguardError,
    RefusedError,
    StateError,
    TransportError,
    ValidationError,
)
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.client.link import ClientLink, Queued
from pubguard.net.client.renewal import GENERATION_SEP, SubscriptionRenewal
from pubguard.net.client.signing import BatchSigner
from pubguard.net.client.subscription import Delivery, Handler, Subscription
from pubguard.net.client.withdrawal import withdrawal_meta_off_loop
from pubguard.net.conn import FrameConnection
from pubguard.schemes.base import ClientScheme, ProtectedEvent
from pubguard.schemes.plain import PlainScheme, new_event_id
from pubguard.wire import envelope
from pubguard.wire.framing import MAX_FRAME_SIZE, encode_frame
from pubguard.wire.messages import (
    Advertise,
    Error,
    Subscribe,
    Unadvertise,
    Unsubscribe,
    publish_wire,
)

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_WINDOW",
    "Client",
    "Delivery",
    "Subscription",
    "connect",
    "parse_url",
]

log = logging.getLogger(__name__)

DEFAULT_WINDOW: Final = 2048  # unacknowledged messages a client may have in flight
#: publications signed under one Merkle root by :meth:`Client.publish` (batch_sign)
DEFAULT_MAX_BATCH: Final = 64
DEFAULT_MAX_PENDING: Final = 65_536  # deliveries buffered per subscription
HIGH_WATER: Final = 1 << 20  # bytes in the socket buffer before publish awaits drain
DEFAULT_RENEW_GRACE: Final = 60.0  # eventguard.txt §4.7 max_delay: old epochs' events are stale
WITHDRAW_TIMEOUT: Final = 2.0  # seconds close() spends withdrawing with proofs (non-durable)


def parse_url(url: str) -> tuple[bool, str, int]:
    """``tls://host:port`` (default) or ``tcp://host:port`` -> (use_tls, host, port)."""
    u = urlsplit(url if "://" in url else f"tls://{url}")
    if u.scheme not in ("tls", "tcp") or not u.hostname or u.port is None:
        raise ValidationError(f"broker URL must look like tls://host:port, got {url!r}")
    return u.scheme == "tls", u.hostname, u.port


class Client:
    """One client link to one broker. Create with :func:`connect`."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        identity: str,
        ssl: _ssl.SSLContext | None,
        durable: bool = False,
        scheme: ClientScheme | None = None,
        window: int = DEFAULT_WINDOW,
        heartbeat_interval: float = 2.0,
        heartbeat_timeout: float = 10.0,
        reconnect: bool = True,
        batch_sign: bool | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        renew_grace: float = DEFAULT_RENEW_GRACE,
        on_reconnect: Callable[[bool], None] | None = None,
    ) -> None:
        if not identity or len(identity) > envelope.MAX_NAME:
            raise ValidationError("identity must be a non-empty name")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValidationError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.host, self.port, self.identity, self.ssl = host, port, identity, ssl
        self.durable = durable
        self.scheme: ClientScheme = scheme if scheme is not None else PlainScheme()
        self.window = window
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        signs = self.scheme.merkle_batches
        if batch_sign and not signs:
            raise ValidationError(
                f"profile {self.scheme.profile!r} does not sign Merkle batches (batch_sign)"
            )
        #: publish() signs the events of one loop iteration under one Merkle root
        self.batch_sign = signs if batch_sign is None else batch_sign
        self.max_batch = max_batch
        #: seconds after its key epoch ends that a renewed subscription's old generation is
        #: retired (pubguard.net.client.renewal)
        self.renew_grace = float(renew_grace)
        self.session = secrets.token_hex(8)
        self._subs: dict[str, Subscription] = {}
        self._adverts: dict[str, Filter] = {}
        self._ids = itertools.count(1)
        self._link = ClientLink(
            host,
            port,
            ssl=ssl,
            identity=identity,
            session=self.session,
            durable=durable,
            scheme=self.scheme,
            window=window,
            reconnect=reconnect,
            heartbeat_interval=heartbeat_interval,
            heartbeat_timeout=heartbeat_timeout,
            subs=self._subs,
            fresh_session_msgs=self._fresh_session_msgs,
            on_reconnect=on_reconnect,
        )
        self._confirmed = 0  # the link's error_count at the last confirm()
        self._renewal = SubscriptionRenewal(
            self.scheme,
            identity=identity,
            renew_grace=self.renew_grace,
            subs=self._subs,
            adverts=self._adverts,
            send=self._send,
            closing=self._is_closing,
        )
        self._signer = BatchSigner(self.scheme, max_batch)
        self._task: asyncio.Task[None] | None = None
        self._hb_task: asyncio.Task[None] | None = None
        self._renew_task: asyncio.Task[None] | None = None

    # -- what the collaborators count and hold ---------------------------------------------

    @property
    def broker_name(self) -> str | None:
        return self._link.broker_name

    @property
    def errors(self) -> deque[Error]:
        """The broker's last error replies (drops of this client's messages)."""
        return self._link.errors

    @property
    def reconnect(self) -> bool:
        """Whether a failed link is reconnected; set it False to let the link lapse (the
        link's own flag: a copy here would change nothing)."""
        return self._link.reconnect

    @reconnect.setter
    def reconnect(self, value: bool) -> None:
        self._link.reconnect = value

    @property
    def reconnects(self) -> int:
        return self._link.reconnects

    @property
    def fresh_sessions(self) -> int:
        """Reconnections the broker did not resume (events published meanwhile may be lost)."""
        return self._link.fresh_sessions

    @property
    def served(self) -> tuple[str, ...] | None:
        """The profiles the broker serves (its hello), or None if it did not say."""
        return self._link.served

    def _check_served(self, profile: str) -> None:
        """ProfileNotServedError unless the broker serves ``profile`` (or did not say)."""
        served = self._link.served
        if served is not None and profile not in served:
            raise ProfileNotServedError(profile, served, broker=self._link.broker_name)

    @property
    def delivers(self) -> int:
        """Deliver messages received (before subscription routing)."""
        return self._link.delivers

    @property
    def renewals(self) -> int:
        """Subscription generations sent by key-epoch renewals."""
        return self._renewal.renewals

    @property
    def batches(self) -> int:
        """Merkle batches signed by publish() (batch_sign)."""
        return self._signer.batches

    @property
    def _unacked(self) -> OrderedDict[int, Queued]:
        return self._link.unacked

    @property
    def _writer(self) -> FrameConnection | None:
        return self._link.writer

    @property
    def _held(self) -> deque[Any] | None:
        return self._link.held

    @property
    def _closing(self) -> bool:
        return self._link.closing

    def _is_closing(self) -> bool:
        return self._link.closing

    # -- lifecycle -------------------------------------------------------------------------

    async def _start(self) -> Client:
        await self._link.handshake()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._link.supervise())
        self._hb_task = loop.create_task(self._link.heartbeats())
        if self._renewal.active:
            self._renew_task = loop.create_task(self._renewal.run())
        return self

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def is_connected(self) -> bool:
        return self._link.writer is not None

    async def close(self) -> None:
        """Close the link; pending subscriptions end their iteration."""
        link = self._link
        if link.closing:
            return
        with contextlib.suppress(Exception):
            self._sign_batch()
            if not self.durable and link.writer is not None:
                await asyncio.wait_for(self._withdraw_all(), WITHDRAW_TIMEOUT)
        link.closing = True
        with contextlib.suppress(Exception):
            if link.writer is not None and link.unacked:
                await self.flush(timeout=1.0)
        for t in (self._renew_task, self._hb_task, self._task, link.held_task):
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        w = link.writer
        with contextlib.suppress(Exception):
            link.send_ack()  # what was handled is acknowledged before the bye
        link.drop_connection()
        if w is not None:
            with contextlib.suppress(Exception):
                w.write(encode_frame(envelope.bye("client closing")))
                w.close()
                await asyncio.wait_for(w.wait_closed(), 1.0)
        for s in list(self._subs.values()):
            s._close()
            if s._task is not None:
                s._task.cancel()
        link.credit.set()
        for f in link.status_waiters.values():
            if not f.done():
                f.set_exception(TransportError("client closed"))

    async def _withdraw_all(self) -> None:
        """A leaving non-durable client withdraws what needs its own proof to withdraw
        (EventGuard's usb/uab permits, §4.5-4.6; the default profile's signed withdrawals).
        Its broker forgets the link's subscriptions anyway, but cannot prove the withdrawal to
        the brokers above it, which refuse a withdrawal without the holder's proof (a fake
        unsubscribe) and would keep routing the subscription's events down. A proof fetched
        from a remote MS is fetched in a worker thread (:mod:`pubguard.net.client.withdrawal`), so
        ``close()``'s ``wait_for`` can cut a dead MS short."""
        now = time.time()
        for sub in list(self._subs.values()):
            meta = await withdrawal_meta_off_loop(
                self.scheme, "unsubscribe_meta", sub.filter, now=now
            )
            if meta:
                await self._send(Unsubscribe(sub.wire_id, self.scheme.profile, meta).to_wire())
        for aid, f in list(self._adverts.items()):
            meta = await withdrawal_meta_off_loop(self.scheme, "unadvertise_meta", f, now=now)
            if meta:
                await self._send(Unadvertise(aid, self.scheme.profile, meta).to_wire())

    # -- public API ------------------------------------------------------------------------

    async def publish(self, event: Event | Mapping[str, Any], *, profile: str | None = None) -> str:
        """Publish ``event`` (an Event or an attribute mapping); returns its event id (the
        application's; one is drawn if it has none). The wire carries
        ``scheme.wire_id(id)``, opaque under the secure profiles."""
        ev = event if isinstance(event, Event) else Event(event)
        if ev.id is None:
            ev = Event(ev.attrs, id=new_event_id(), type=ev.type, payload=ev.payload)
        prof = profile or self.scheme.profile
        self._check_served(prof)
        if self.batch_sign:
            return await self._publish_batched(ev, prof)
        pe = await self._off_loop_if_due(self.scheme.protect_event, ev)
        msg = publish_wire(pe.event_id, prof, pe.routing, pe.body, pe.meta)
        await self._send(msg)
        return str(ev.id)

    async def _publish_batched(self, ev: Event, prof: str) -> str:
        """publish() with ``batch_sign``: prepare now, sign with the loop iteration's batch."""
        await self._await_credit()
        if ev.id is None:
            ev = Event(ev.attrs, id=new_event_id(), type=ev.type, payload=ev.payload)
        prepared = await self._off_loop_if_due(self.scheme.prepare_event, ev)
        if _rough_size(ev) > MAX_FRAME_SIZE // 4:  # alone, so a FrameError reaches the caller
            self._sign_batch()
            (pe,) = self.scheme.sign_prepared([prepared], now=time.time())
            await self._send(publish_wire(pe.event_id, prof, pe.routing, pe.body, pe.meta))
            return pe.event_id
        signer = self._signer
        if signer.add(prepared, prof):
            self._sign_batch()
        elif not signer.scheduled:
            signer.scheduled = True
            asyncio.get_running_loop().call_soon(self._sign_batch)
        w = self._link.writer
        if w is not None and w.write_buffer_size() > HIGH_WATER:
            with contextlib.suppress(ConnectionError):
                await w.drain()
        assert ev.id is not None
        return ev.id

    async def _off_loop_if_due(self, protect: Callable[..., Any], ev: Event) -> Any:
        """``protect(ev, now=now)``; in a worker thread when it is about to ask a remote MS
        (an eventguard publisher's first publication of a new epoch renews its grant, §4.8),
        as renewals and withdrawals are (net/client/withdrawal.py)."""
        now = time.time()
        if self.scheme.blocks_on_io and self.scheme.key_service_due(ev, now):
            return await asyncio.to_thread(protect, ev, now=now)
        return protect(ev, now=now)

    def _sign_batch(self) -> None:
        """Sign the pending publications (one Merkle root per run of one profile) and queue
        them in order; called from the loop, at ``max_batch``, and before any other message."""
        if not self._signer.pending:  # the common case on every send: nothing pending
            return
        for event_id, msg in self._signer.take(time.time()):
            try:
                self._link.enqueue(msg)
            except PubguardError as exc:  # (too large: sizes are checked in publish)
                log.warning("client %s: publication %s not sent: %s", self.identity, event_id, exc)
        self._link.flush_out()

    async def publish_protected(self, pe: ProtectedEvent, *, profile: str | None = None) -> str:
        """Send an event protected earlier by this client's scheme (a publisher may protect
        ahead of time; the guards' timestamp window still applies)."""
        prof = profile or self.scheme.profile
        self._check_served(prof)
        await self._send(publish_wire(pe.event_id, prof, pe.routing, pe.body, pe.meta))
        return pe.event_id

    async def publish_batch(self, events: list[Event], *, profile: str | None = None) -> list[str]:
        """Publish several events; a profile that signs Merkle batches (``merkle_batches``)
        signs one root over the batch (amortised signing), others protect each event alone."""
        if not self.scheme.merkle_batches or len(events) < 2 or self.batch_sign:
            return [await self.publish(e, profile=profile) for e in events]
        prof = profile or self.scheme.profile
        self._check_served(prof)
        events = [
            e
            if e.id is not None
            else Event(e.attrs, id=new_event_id(), type=e.type, payload=e.payload)
            for e in events
        ]
        for pe in self.scheme.protect_events(events, now=time.time()):
            await self._send(publish_wire(pe.event_id, prof, pe.routing, pe.body, pe.meta))
        return [str(e.id) for e in events]

    async def subscribe(
        self,
        filter: str | Filter,
        handler: Handler | None = None,
        *,
        sub_id: str | None = None,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> Subscription:
        """Subscribe with a filter (text or Filter); iterate the result or pass ``handler``."""
        f = Filter.parse(filter) if isinstance(filter, str) else filter
        self._check_served(self.scheme.profile)
        sid = sub_id or f"s{next(self._ids)}-{secrets.token_hex(4)}"
        if GENERATION_SEP in sid:
            raise ValidationError(f"a subscription id may not contain {GENERATION_SEP!r}")
        if sid in self._subs:
            raise StateError(f"subscription {sid!r} already exists on this client")
        sub = Subscription(self.unsubscribe, sid, f, handler, max_pending)
        try:
            msg = self._subscribe_msg(sub)  # may be refused by the key service (DropError)
        except DropError as exc:
            sub._close()
            if exc.reason is not DropReason.UNAUTHORISED or isinstance(exc, FilterRefusedError):
                raise
            why = str(exc).removeprefix(f"{exc.reason.value}: ")
            raise FilterRefusedError(str(f), self.identity, why) from exc
        except BaseException:
            sub._close()
            raise
        self._subs[sid] = sub
        await self._send(msg)
        await self._renewal.after_subscribe(sub)
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        if self._subs.pop(sub.id, None) is None:
            return
        sub._close()
        # the scheme's withdrawal proof (EventGuard usb permit, §4.5; signed withdrawals)
        meta = await withdrawal_meta_off_loop(
            self.scheme, "unsubscribe_meta", sub.filter, now=time.time()
        )
        await self._send(Unsubscribe(sub.wire_id, self.scheme.profile, meta).to_wire())
        await self._renewal.retire(sub)  # a generation of the last epoch still in its grace

    async def advertise(self, filter: str | Filter, *, adv_id: str | None = None) -> str:
        f = Filter.parse(filter) if isinstance(filter, str) else filter
        self._check_served(self.scheme.profile)
        aid = adv_id or f"a{next(self._ids)}-{secrets.token_hex(4)}"
        self._adverts[aid] = f
        await self._send(self._advertise_msg(aid, f))
        return aid

    async def unadvertise(self, adv_id: str) -> None:
        """Withdraw an advertisement (with the scheme's ``unadvertise_meta``, §4.6)."""
        f = self._adverts.pop(adv_id, None)
        if f is None:
            return
        meta = await withdrawal_meta_off_loop(self.scheme, "unadvertise_meta", f, now=time.time())
        await self._send(Unadvertise(adv_id, self.scheme.profile, meta).to_wire())

    async def flush(self, timeout: float | None = 10.0) -> None:
        """Wait until the broker has acknowledged everything sent so far."""
        self._sign_batch()
        link = self._link
        if link.failure is not None:
            raise link.failure
        target = link.chan.tx_next - 1

        async def _wait() -> None:
            while not link.chan.acked_through(target):
                if link.failure is not None:
                    raise link.failure
                if link.closing:
                    raise TransportError("client closed")
                await link.wait_credit()

        await asyncio.wait_for(_wait(), timeout)

    async def confirm(self, timeout: float | None = 10.0) -> None:
        """Wait for the broker's verdict on everything sent so far (:meth:`flush`), then raise
        :class:`~pubguard.errors.RefusedError` if it refused any of it since the last
        confirm (an ``Error`` reply: unauthorised, malformed, stale, ...). The broker writes
        a refusal before the acknowledgement that covers the refused message."""
        await self.flush(timeout)
        link = self._link
        n, self._confirmed = link.error_count - self._confirmed, link.error_count
        if n:
            recent = list(link.errors)[-n:]  # (the deque keeps the last 100)
            first = recent[0]
            raise RefusedError(
                first.reason, first.ref, first.detail, broker=link.broker_name or "", count=n
            )

    async def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """The broker's status report (links, tables, queues, drop counters)."""
        link = self._link
        if link.failure is not None:
            raise link.failure
        await asyncio.wait_for(link.connected.wait(), timeout)
        q = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        link.status_waiters[q] = fut
        try:
            link.write_control(envelope.status_request(q))
            return await asyncio.wait_for(fut, timeout)
        finally:
            link.status_waiters.pop(q, None)

    # -- sending ---------------------------------------------------------------------------
    async def _fresh_session_msgs(self) -> list[dict[str, Any]]:
        """Every live subscription and advertisement again, for a broker that does not know
        this session; built in a worker thread when the scheme calls a remote MS (one call
        each: the loop is not stalled for them, as for renewals)."""

        def build() -> tuple[list[dict[str, Any]], list[tuple[str, str, DropError]]]:
            msgs: list[dict[str, Any]] = []
            refused = []  # rights withdrawn or revoked meanwhile: (kind, id, error)
            for sub in list(self._subs.values()):
                try:
                    msgs += self._subscribe_msgs(sub)
                except DropError as exc:
                    refused.append(("subscription", sub.id, exc))
            for aid, f in list(self._adverts.items()):
                try:
                    msgs.append(self._advertise_msg(aid, f))
                except DropError as exc:
                    refused.append(("advertisement", aid, exc))
            return msgs, refused

        try:
            msgs, refused = await asyncio.to_thread(build) if self.scheme.blocks_on_io else build()
        except (PubguardError, OSError) as exc:  # the key service unreachable: try again
            raise TransportError(f"cannot re-subscribe: {exc}") from exc
        for kind, ident, err in refused:  # as a refused renewal (net/client/renewal.py): it ends
            log.warning(
                "client %s: %s %s refused by the key service on a fresh session (%s): it ends",
                self.identity,
                kind,
                ident,
                err.reason.value,
            )
            if kind == "advertisement":
                self._adverts.pop(ident, None)
            elif (sub := self._subs.pop(ident, None)) is not None:
                sub._close()
        return msgs

    def _subscribe_msgs(self, sub: Subscription) -> list[dict[str, Any]]:
        """What re-subscribes ``sub`` on a fresh session: the current generation, preceded by
        any older one whose epoch is still running (renewed ahead, pubguard.net.client.renewal:
        without it this epoch's publications would not match until the epoch ends). An old
        generation whose epoch is over is not rebuilt: its permit would be refused."""
        now = time.time()
        msgs = []
        for wid, end in sub.old:
            if end <= now:
                continue
            try:
                pf = self.scheme.protect_filter(sub.filter, now=now)
            except PubguardError as exc:  # refused now: the current generation decides
                log.info("client %s: old generation %s not re-sent: %s", self.identity, wid, exc)
                continue
            msgs.append(Subscribe(wid, self.scheme.profile, pf.filter, pf.meta).to_wire())
        return [*msgs, self._subscribe_msg(sub)]  # the current last: the scheme keeps its keys

    def _subscribe_msg(self, sub: Subscription) -> dict[str, Any]:
        # the current generation, for the epoch it was built for (renewed ahead: the next)
        pf = self.scheme.protect_filter(sub.filter, now=max(time.time(), sub.built_at))
        return Subscribe(sub.wire_id, self.scheme.profile, pf.filter, pf.meta).to_wire()

    def _advertise_msg(self, aid: str, f: Filter) -> dict[str, Any]:
        pf = self.scheme.protect_advertisement(f, now=time.time())
        return Advertise(aid, self.scheme.profile, pf.filter, pf.meta).to_wire()

    async def _await_credit(self) -> None:
        """Wait until one more message fits in the window beside those in flight and the
        pending batch (which is signed and sent first: only then can it be acknowledged)."""
        link = self._link
        if link.failure is not None:
            raise link.failure
        while link.chan.in_flight + len(self._signer) >= self.window:
            if link.failure is not None:
                raise link.failure
            if link.closing:
                raise TransportError("client closed")
            if self._signer.pending:
                self._sign_batch()
                continue
            await link.wait_credit()
        if link.closing:
            raise TransportError("client closed")

    async def _send(self, msg: dict[str, Any]) -> None:
        await self._await_credit()
        self._sign_batch()  # publications published before this message go out before it
        self._link.enqueue(msg)
        w = self._link.writer
        if w is not None and w.write_buffer_size() > HIGH_WATER:
            with contextlib.suppress(ConnectionError):
                await w.drain()


def _rough_size(ev: Event) -> int:
    """An upper-bound-ish size of an event's attributes and payload (bytes)."""
    return len(ev.payload) + sum(len(k) + len(str(v)) for k, v in ev.attrs.items())


async def connect(
    url: str,
    *,
    identity: str,
    ssl: _ssl.SSLContext | None = None,
    durable: bool = False,
    scheme: ClientScheme | None = None,
    window: int = DEFAULT_WINDOW,
    reconnect: bool = True,
    heartbeat_interval: float = 2.0,
    heartbeat_timeout: float = 10.0,
    batch_sign: bool | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    renew_grace: float = DEFAULT_RENEW_GRACE,
    on_reconnect: Callable[[bool], None] | None = None,
) -> Client:
    """Connect to the broker at ``url`` (``tls://host:port``); TransportError if refused.
    ``on_reconnect(resumed)`` is called after each reconnection (``resumed`` False: a fresh
    session, which may have missed what was published while the link was down)."""
    use_tls, host, port = parse_url(url)
    if use_tls and ssl is None:
        raise ValidationError("a tls:// URL needs an ssl context (client_ssl_context(...))")
    client = Client(
        host,
        port,
        identity=identity,
        ssl=ssl if use_tls else None,
        durable=durable,
        scheme=scheme,
        window=window,
        heartbeat_interval=heartbeat_interval,
        heartbeat_timeout=heartbeat_timeout,
        reconnect=reconnect,
        batch_sign=batch_sign,
        max_batch=max_batch,
        renew_grace=renew_grace,
        on_reconnect=on_reconnect,
    )
    return await client._start()
