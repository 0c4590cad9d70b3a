"""The client's link to its broker: handshake, resumption, reconnection with back-off, the read
loop, heartbeats and the hand-over of deliveries (a collaborator owned by
:class:`~pubguard.net.client.client.Client`).

Theory of operation
-------------------
The sequence numbers, the unacknowledged messages, credit and the receive side's acceptance
are a :class:`~pubguard.wire.reliable.ReliableChannel`, the same one a broker's links drive;
this module is its asyncio shell. Each message the client sends is kept as itself and packed
(``pack(msg)``): the packed form is framed once per loop iteration (``encode_run``: a run of
messages as one batch frame), the message itself is what a fresh session re-sends.

When the link fails (EOF, TLS error, no frame for ``heartbeat_timeout``) the client reconnects
with exponential back-off (``BACKOFF_MIN`` doubling up to ``BACKOFF_MAX``). If the broker
*resumed* the session (a durable client, or a broker that persisted this link) the client
resends what the broker had not processed; otherwise it re-subscribes every live subscription
and resends unacknowledged publications (the broker's de-dup window drops any that had in fact
been processed); ``on_reconnect(resumed)`` is called after each reconnection, and
``fresh_sessions`` counts those the broker did not resume (events published meanwhile may have
been missed). A broker's ``bye`` saying that a newer connection with this identity replaced
this one (``envelope.is_replaced``) ends the link for good: the client's calls then raise
:class:`~pubguard.errors.ReplacedError` (``failure``) instead of reconnecting, which would
knock the other connection off in turn. Deliveries are reliable messages: a sequence gap
closes the link, a resent duplicate is skipped, and what arrived is acknowledged
cumulatively: at once when ``ACK_EVERY`` deliveries are unacknowledged, otherwise at most
``ACK_DELAY`` seconds later (one
ack frame covers every delivery of a burst instead of one per read, which halves the frames a
broker reads when it fans events out to many subscribers). A delivery whose opening asks a
remote key service first (the scheme's ``open_due``: an eventguard subscriber's first event of
a new epoch, §4.8) is opened in a worker thread; the deliveries that arrive meanwhile wait
behind it in order, and acknowledgements stop short of the first of them until they are
handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl as _ssl
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pubguard.errors import FrameError, PubguardError, ReplacedError, TransportError
from pubguard.model.events import Event
from pubguard.net.client.renewal import GENERATION_SEP, sub_id_of
from pubguard.net.client.subscription import Delivery, Subscription
from pubguard.net.conn import FrameConnection, PeerClosed, open_frame_connection
from pubguard.schemes.base import ClientScheme
from pubguard.wire import envelope
from pubguard.wire.framing import (
    MAX_FRAME_SIZE,
    encode_frame,
    encode_message_frame,
    encode_run,
    pack,
)
from pubguard.wire.messages import Deliver, Error, Heartbeat, decode_deliver, decode_message
from pubguard.wire.reliable import ReliableChannel

__all__ = [
    "ACK_DELAY",
    "ACK_EVERY",
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "CONNECT_TIMEOUT",
    "FLUSH_AT",
    "ClientLink",
]

log = logging.getLogger("pubguard.net.client")

CONNECT_TIMEOUT: Final = 10.0
BACKOFF_MIN: Final = 0.05
BACKOFF_MAX: Final = 2.0
#: a reliable message the broker core ignores: what a withdrawn message's sequence carries
_NOOP: Final = Heartbeat(0).to_wire()
_PERMITTED: Final = frozenset({"subscribe", "advertise"})  # ops whose meta carries a permit
ACK_EVERY: Final = 128  # unacknowledged deliveries that trigger an ack at once
# seconds a delivery waits at most for its cumulative ack: with deliveries spread over many
# subscribers each one gets a delivery every few ms even at 20,000 events/s, so 2 ms meant one
# ack frame (a TLS record each way, a wake-up at both ends) per delivery; 20 ms cuts the CPU
# per event of the whole network by about a sixth at 5,000 events/s (docs/network.md) and stays
# far inside the broker's window (4,096 frames per link)
ACK_DELAY: Final = 0.02
#: messages queued in one loop iteration that are written at once rather than at its end
#: (a publisher in a tight loop still hands the socket batch frames of a bounded size)
FLUSH_AT: Final = 256

#: what the channel keeps per message: the message (re-sent as itself on a fresh session,
#: withdrawn when its permit lapsed) and its packed form (framed without packing again)
Queued = tuple[dict[str, Any], bytes]


class ClientLink:
    """Connection handling for a client (see the module docstring). ``subs`` is the client's
    live subscriptions (deliveries are handed to them); ``fresh_session_msgs`` builds what
    re-subscribes on a broker that does not know this session."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        ssl: _ssl.SSLContext | None,
        identity: str,
        session: str,
        durable: bool,
        scheme: ClientScheme,
        window: int,
        reconnect: bool,
        heartbeat_interval: float,
        heartbeat_timeout: float,
        subs: dict[str, Subscription],
        fresh_session_msgs: Callable[[], Awaitable[list[dict[str, Any]]]],
        on_reconnect: Callable[[bool], None] | None = None,
    ) -> None:
        self.host, self.port, self.ssl, self.identity = host, port, ssl, identity
        self.session, self.durable, self.scheme = session, durable, scheme
        self.reconnect = reconnect
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._subs = subs
        self._fresh_session_msgs = fresh_session_msgs
        self.chan: ReliableChannel[Queued] = ReliableChannel(window=window)
        self.broker_name: str | None = None
        #: the profiles the broker serves (its hello), None if it did not say (older brokers)
        self.served: tuple[str, ...] | None = None
        self.errors: deque[Error] = deque(maxlen=100)
        self.error_count = 0  # Error replies received in all
        self.reconnects = 0
        #: reconnections the broker did not resume: what was published meanwhile is lost
        self.fresh_sessions = 0
        self.on_reconnect = on_reconnect
        self.resumed = False  # whether the broker resumed the session at the last handshake
        #: why the link ended for good (a newer connection with this identity took over)
        self.failure: PubguardError | None = None
        self.delivers = 0  # Deliver messages received (before subscription routing)
        self.closing = False
        self.writer: FrameConnection | None = None
        self.connected = asyncio.Event()
        #: set whenever the window may have room again (an ack, a reconnection, the end)
        self.credit = asyncio.Event()
        self.credit.set()
        self.status_waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._last_rx = time.monotonic()
        self._pending_frames: list[dict[str, Any]] = []  # decoded after the broker's hello
        self._ack_timer: asyncio.TimerHandle | None = None
        self._flush_scheduled = False
        #: deliveries waiting behind one being opened in a worker thread (an eventguard
        #: subscriber's first event of a new epoch renews its grant with a remote MS, §4.8),
        #: in arrival order; None while deliveries are opened as they arrive
        self.held: deque[Deliver] | None = None
        self.held_task: asyncio.Task[None] | None = None
        #: the sequence number of the first held delivery: acknowledgements stop short of it
        #: until the held ones are handed over (a durable session gets them again otherwise)
        self._hold_from: int | None = None

    @property
    def unacked(self) -> OrderedDict[int, Queued]:
        """Messages sent and not yet acknowledged by the broker."""
        return self.chan.unacked

    # -- connecting ------------------------------------------------------------------------

    async def handshake(self) -> None:
        try:
            conn = await asyncio.wait_for(
                open_frame_connection(self.host, self.port, ssl=self.ssl), CONNECT_TIMEOUT
            )
        except _ssl.SSLCertVerificationError as exc:  # say it in words, without _ssl.c:NNNN
            raise TransportError(
                f"cannot connect to {self.host}:{self.port}: the broker's certificate does not "
                f"verify ({exc.verify_message})"
            ) from exc
        except (TimeoutError, OSError, _ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        try:
            hello = envelope.hello(
                self.identity, "client", self.session, durable=self.durable, rx=self.chan.rx_seq
            )
            conn.write(encode_frame(hello))
            frames = await conn.next_frames(CONNECT_TIMEOUT)
            first = frames[0]
            if envelope.check_envelope(first) == "bye":
                raise TransportError(f"broker refused the link: {first['reason']}")
            if first["t"] != "hello":
                raise FrameError("expected hello from the broker")
        except PeerClosed:
            conn.close()
            raise TransportError("broker closed the connection during the handshake") from None
        except (TimeoutError, OSError, _ssl.SSLError, FrameError) as exc:
            conn.close()
            raise TransportError(f"handshake with {self.host}:{self.port} failed: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        resumed = bool(first.get("resumed", False))
        self.resumed = resumed
        try:  # a fresh session's re-subscriptions, built before anything is written
            fresh = [] if resumed else await self._fresh_session_msgs()
        except BaseException:
            conn.close()
            raise
        self.broker_name = first["name"]
        ps = first.get("profiles")
        self.served = None if ps is None else tuple(ps)
        self.writer = conn
        self._last_rx = time.monotonic()
        self._resume(resumed, first["rx"], fresh)
        self.chan.announce_rx()  # the broker resends what follows this (hello)
        self.connected.set()
        self._pending_frames = frames[1:]

    def _resume(self, resumed: bool, peer_rx: int, fresh: list[dict[str, Any]]) -> None:
        chan = self.chan
        if resumed:
            chan.resume(peer_rx)
            self._withdraw_lapsed(time.time())
        else:
            # a fresh session on the broker: re-subscribe, re-advertise, resend publications
            chan.reset_receiver()
            if self.held:
                self._hold_from = 1  # the new session's deliveries queue behind the held
            old = [q for _, q in chan.pending() if q[0].get("op") == "publish"]
            chan.restart([*((m, pack(m)) for m in fresh), *old])
        self.flush_out()
        self.credit.set()

    def _withdraw_lapsed(self, now: float) -> None:
        """Take out of the resend queue the subscriptions and advertisements whose permit ran
        out while they waited there (the scheme's ``permit_lapsed``: the renewal loop builds a
        generation per key epoch while the broker is away). A broker refuses a client's lapsed
        permit and counts a strike against the link for each, so an honest subscriber with
        many subscriptions could be banned as a flood for reconnecting after a long outage. A
        no-op keeps each withdrawn message's sequence number: the stream stays gapless."""
        lapsed = self.scheme.permit_lapsed
        noop = (_NOOP, pack(_NOOP))
        for seq, (m, _) in list(self.chan.pending()):
            if m.get("op") in _PERMITTED:
                meta = m.get("meta")
                if isinstance(meta, dict) and lapsed(meta, now=now):
                    self.chan.replace(seq, noop)

    def drop_connection(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        w = self.writer  # unacknowledged messages are resent from the channel on reconnection
        self.writer = None
        self.connected.clear()
        if w is not None:
            w.close()

    async def supervise(self) -> None:
        backoff = BACKOFF_MIN
        while not self.closing:
            try:
                await self._read_loop()
            except ReplacedError as exc:
                log.info("client %s: %s", self.identity, exc)
                self._fail(exc)
                return
            except (OSError, _ssl.SSLError, PubguardError) as exc:
                log.info("client %s: link lost: %s", self.identity, exc)
            self.drop_connection()
            if self.closing or not self.reconnect:
                self.credit.set()
                for s in self._subs.values():
                    s._close()
                return
            while not self.closing:
                await asyncio.sleep(backoff)
                try:
                    await self.handshake()
                    self.reconnects += 1
                    backoff = BACKOFF_MIN
                    self._reconnected(self.resumed)
                    break
                except TransportError as exc:
                    log.info("client %s: reconnect failed: %s", self.identity, exc)
                    backoff = min(backoff * 2, BACKOFF_MAX)

    def _reconnected(self, resumed: bool) -> None:
        if not resumed:
            self.fresh_sessions += 1
        if self.on_reconnect is not None:
            try:
                self.on_reconnect(resumed)
            except Exception:  # a callback's bug must not end the link
                log.exception("client %s: on_reconnect failed", self.identity)

    def _fail(self, exc: PubguardError) -> None:
        """End the link for good: every pending and later call raises ``exc``."""
        self.failure = exc
        self.drop_connection()
        for s in self._subs.values():
            s._close(exc)
        for f in self.status_waiters.values():
            if not f.done():
                f.set_exception(exc)
        self.credit.set()

    async def heartbeats(self) -> None:
        while not self.closing and self.failure is None:
            await asyncio.sleep(self.heartbeat_interval)
            w = self.writer
            if w is None:
                continue
            if time.monotonic() - self._last_rx > self.heartbeat_timeout:
                log.info(
                    "client %s: no frame for %.1fs, reconnecting",
                    self.identity,
                    self.heartbeat_timeout,
                )
                w.close()
                continue
            with contextlib.suppress(Exception):
                w.write(encode_frame(envelope.heartbeat()))

    # -- receiving -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        conn = self.writer
        assert conn is not None
        first, self._pending_frames = self._pending_frames, []
        try:
            # every chunk's envelopes go to _on_frames from the transport's callback
            await conn.run(self._on_frames, first)
        except PeerClosed:
            raise TransportError("broker closed the link") from None

    def _on_frames(self, frames: list[dict[str, Any]]) -> None:
        self._last_rx = time.monotonic()
        self._handle(frames)

    def _handle(self, frames: list[dict[str, Any]]) -> None:
        chan = self.chan
        got = False
        for env in frames:
            t = envelope.check_envelope(env)
            if t == "m":  # (the decoder hands a batch frame out as its m envelopes)
                if not chan.receive(env["s"]):
                    continue  # a resent duplicate: already handed to the application
                got = True
                self._on_message(env["m"])
            elif t == "a":
                chan.on_ack(env["u"])
                self.flush_out()  # (what the window held back, after a fresh session)
                self.credit.set()
            elif t == "st":
                fut = self.status_waiters.get(env["q"])
                if fut is not None and not fut.done():
                    fut.set_result(env["data"])
            elif t == "bye":
                if envelope.is_replaced(env["reason"]):
                    raise ReplacedError(self.identity, broker=self.broker_name)
                raise TransportError(f"broker closed the link: {env['reason']}")
            elif t == "hello":
                raise FrameError("unexpected second hello")
        if got and self.writer is not None:
            if chan.unacked_rx >= ACK_EVERY:
                self.send_ack()
            elif self._ack_timer is None:
                self._ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY, self.send_ack)

    def send_ack(self) -> None:
        """One cumulative ack for every delivery handled so far (delayed, see module doc)."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if self.writer is None:
            return
        cap = None if self._hold_from is None else self._hold_from - 1
        upto = self.chan.ack_owed(cap)
        if upto is not None:
            self.write_control(envelope.ack(upto))

    def _on_message(self, wire: dict[str, Any]) -> None:
        msg = decode_deliver(wire) or decode_message(wire)  # the common delivery: one call
        if isinstance(msg, Deliver):
            self.delivers += 1
            if self.held is not None:
                self.held.append(msg)  # in order, behind the one being opened
                return
            now = time.time()
            if self._open_off_loop(msg, now):
                self.held = deque((msg,))
                self._hold_from = self.chan.rx_seq
                self.held_task = asyncio.get_running_loop().create_task(self._open_held())
                return
            self._hand_over(msg, self._open(msg, now))
        elif isinstance(msg, Error):
            self.errors.append(msg)
            self.error_count += 1
            # info: the caller learns it from Client.confirm() (RefusedError) or .errors
            log.info(
                "client %s: broker dropped %s: %s %s",
                self.identity,
                msg.ref,
                msg.reason,
                msg.detail,
            )

    def _open_off_loop(self, msg: Deliver, now: float) -> bool:
        """Whether opening ``msg`` asks a remote key service first (``open_due``): then it
        is opened in a worker thread, as the publisher's renewals and the withdrawals are
        (net/client/withdrawal.py), and the loop keeps running meanwhile."""
        if not self.scheme.blocks_on_io:
            return False
        ev = msg.event
        return bool(self.scheme.open_due(ev.routing, ev.meta, now=now))

    def _open(self, msg: Deliver, now: float) -> Event | None:
        """The delivery's event, opened; None (logged) if it cannot be opened."""
        ev = msg.event
        try:
            return self.scheme.open_event(ev.event_id, ev.routing, ev.body, ev.meta, now=now)
        except PubguardError as exc:
            log.warning("client %s: cannot open event %s: %s", self.identity, ev.event_id, exc)
            return None

    def _hand_over(self, msg: Deliver, event: Event | None) -> None:
        if event is None:
            return
        ids = msg.sub_ids
        if len(ids) > 1 or GENERATION_SEP in ids[0]:  # renewed: <id>@<generation>
            ids = tuple(dict.fromkeys(sub_id_of(w) for w in ids))  # one delivery each
        for sid in ids:
            sub = self._subs.get(sid)
            if sub is not None:
                sub._push(Delivery(event, sid))

    async def _open_held(self) -> None:
        """Open the held deliveries in order (those that ask the key service in a worker
        thread), hand each over, then take deliveries as they arrive again."""
        held = self.held
        assert held is not None
        try:
            while held:
                msg = held[0]
                now = time.time()
                try:
                    if self._open_off_loop(msg, now):
                        event = await asyncio.to_thread(self._open, msg, now)
                    else:
                        event = self._open(msg, now)
                except Exception:  # not a PubguardError: a bug; the rest still go out
                    log.exception("client %s: opening %s failed", self.identity, msg.ref)
                    event = None
                held.popleft()
                self._hand_over(msg, event)
        finally:
            if not held:  # (cancelled by close: the rest stay unacknowledged)
                self.held = self._hold_from = self.held_task = None
                if self.writer is not None:
                    self.send_ack()

    # -- sending ---------------------------------------------------------------------------

    def enqueue(self, msg: dict[str, Any]) -> None:
        """Give ``msg`` the next sequence number; its frame is written at the end of this
        loop iteration with the others queued in it (or at once, ``FLUSH_AT`` of them)."""
        packed = pack(msg)  # FrameError here, before the message takes a sequence number
        if len(packed) > MAX_FRAME_SIZE - 64:
            encode_message_frame(self.chan.tx_next, packed)  # raises unless its frame fits
        self.chan.send((msg, packed))
        if self.writer is not None:
            if not self._flush_scheduled:
                self._flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush_out)
            if self.chan.unsent >= FLUSH_AT:
                self.flush_out()

    def flush_out(self) -> None:
        """Write what the window allows of the queued messages with one call (consecutive
        messages as batch frames, envelope.py ``mb``: fewer syscalls, one decode a burst)."""
        self._flush_scheduled = False
        w = self.writer
        if w is None:  # (nothing counts as written: a reconnection resumes from the channel)
            return
        items = self.chan.take_writable()
        if items:
            packed = [q[1] for _, q in items]
            w.write(b"".join(encode_run(items[0][0], packed, envelope.MAX_BATCH)))

    def write_control(self, env: dict[str, Any]) -> None:
        """An unsequenced envelope (ack, status request, bye), after the queued messages."""
        w = self.writer
        if w is None:
            raise TransportError("not connected")
        self.flush_out()  # keep order with queued reliable frames
        w.write(encode_frame(env))

    async def wait_credit(self) -> None:
        """Until the window may have room again (or the link ends)."""
        self.credit.clear()
        await self.credit.wait()
