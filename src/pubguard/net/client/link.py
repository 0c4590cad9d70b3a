"""The client's link to its broker: handshake, resumption, reconnection with back-off, the read
loop and heartbeats (a mixin of :class:`~pubguard.net.client.client.Client`).

Theory of operation
-------------------
When the link fails (EOF, TLS error, no frame for ``heartbeat_timeout``) the client reconnects
with exponential back-off (``BACKOFF_MIN`` doubling up to ``BACKOFF_MAX``). If the broker
*resumed* the session (a durable client, or a broker that persisted this link) the client
resends what the broker had not processed; otherwise it re-subscribes every live subscription
and resends unacknowledged publications (the broker's de-dup window drops any that had in fact
been processed). Deliveries are reliable messages: a sequence gap closes the link, a resent
duplicate is skipped, and what arrived is acknowledged cumulatively: at once when
``ACK_EVERY`` deliveries are unacknowledged, otherwise at most ``ACK_DELAY`` seconds later (one
ack frame covers every delivery of a burst instead of one per read, which halves the frames a
broker reads when it fans events out to many subscribers). A delivery whose opening asks a
remote key service first (``open_due``: an eventguard subscriber's first event of a new
epoch, §4.8) is opened in a worker thread; the deliveries that arrive meanwhile wait behind
it in order, and acknowledgements stop short of the first of them until they are handed over.
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

from pubguard.errors import FrameError, PubguardError, TransportError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.client.renewal import GENERATION_SEP, sub_id_of
from pubguard.net.client.subscription import Delivery, Subscription
from pubguard.net.client.withdrawal import blocks_on_io
from pubguard.net.conn import FrameConnection, PeerClosed, open_frame_connection
from pubguard.schemes.base import ClientScheme
from pubguard.wire import envelope
from pubguard.wire.framing import encode_frame
from pubguard.wire.messages import Deliver, Error, Heartbeat, decode_deliver, decode_message

__all__ = [
    "ACK_DELAY",
    "ACK_EVERY",
    "BACKOFF_MAX",
    "BACKOFF_MIN",
    "CONNECT_TIMEOUT",
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


class ClientLink:
    """Connection handling for a client (see the module docstring)."""

    # provided by Client
    host: str
    port: int
    ssl: _ssl.SSLContext | None
    identity: str
    session: str
    durable: bool
    scheme: ClientScheme
    reconnect: bool
    heartbeat_interval: float
    heartbeat_timeout: float
    broker_name: str | None
    errors: deque[Error]
    reconnects: int
    delivers: int
    _subs: dict[str, Subscription]
    _adverts: dict[str, Filter]
    _unacked: OrderedDict[int, dict[str, Any]]
    _tx_next: int
    _rx_seq: int
    _acked_rx: int
    _ack_timer: asyncio.TimerHandle | None
    _writer: FrameConnection | None
    _out: list[bytes]
    _connected: asyncio.Event
    _credit: asyncio.Event
    _status: dict[int, asyncio.Future[dict[str, Any]]]
    _closing: bool
    _last_rx: float
    _pending_frames: list[dict[str, Any]]
    _fresh_session_msgs: Callable[[], Awaitable[list[dict[str, Any]]]]
    _write: Callable[[dict[str, Any]], None]
    #: deliveries waiting behind one being opened in a worker thread (an eventguard
    #: subscriber's first event of a new epoch renews its grant with a remote MS, §4.8), in
    #: arrival order; None while deliveries are opened as they arrive
    _held: deque[Deliver] | None = None
    _held_task: asyncio.Task[None] | None = None
    #: the sequence number of the first held delivery: acknowledgements stop short of it
    #: until the held ones are handed over (a durable session gets them again otherwise)
    _hold_from: int | None = None

    async def _handshake(self) -> None:
        try:
            conn = await asyncio.wait_for(
                open_frame_connection(self.host, self.port, ssl=self.ssl), CONNECT_TIMEOUT
            )
        except (TimeoutError, OSError, _ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        try:
            conn.write(
                encode_frame(
                    envelope.hello(
                        self.identity, "client", self.session, durable=self.durable, rx=self._rx_seq
                    )
                )
            )
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
        try:  # a fresh session's re-subscriptions, built before anything is written
            fresh = [] if resumed else await self._fresh_session_msgs()
        except BaseException:
            conn.close()
            raise
        self.broker_name = first["name"]
        self._writer = conn
        self._last_rx = time.monotonic()
        self._resume(resumed, first["rx"], fresh)
        self._acked_rx = self._rx_seq  # the broker resends what follows this (hello)
        self._connected.set()
        self._pending_frames = frames[1:]

    def _resume(self, resumed: bool, peer_rx: int, fresh: list[dict[str, Any]]) -> None:
        w = self._writer
        assert w is not None
        if resumed:
            for s in [s for s in self._unacked if s <= peer_rx]:
                del self._unacked[s]
            self._withdraw_lapsed(time.time())
        else:
            # a fresh session on the broker: re-subscribe, re-advertise, resend publications
            self._rx_seq = 0
            if self._held:
                self._hold_from = 1  # the new session's deliveries queue behind the held
            old = [m for m in self._unacked.values() if m.get("op") == "publish"]
            self._unacked.clear()
            self._tx_next = 1
            for m in fresh + old:
                self._unacked[self._tx_next] = m
                self._tx_next += 1
        for seq, m in self._unacked.items():
            w.write(encode_frame(envelope.message(seq, m)))
        self._credit.set()

    def _withdraw_lapsed(self, now: float) -> None:
        """Take out of the resend queue the subscriptions and advertisements whose permit ran
        out while they waited there (``permit_lapsed``: the renewal loop builds a generation
        per key epoch while the broker is away). A broker refuses a client's lapsed permit
        and counts a strike against the link for each, so an honest subscriber with many
        subscriptions could be banned as a flood for reconnecting after a long outage. A
        no-op keeps each withdrawn message's sequence number: the stream stays gapless."""
        lapsed = getattr(self.scheme, "permit_lapsed", None)
        if lapsed is None:
            return
        unacked = self._unacked
        for seq, m in unacked.items():
            if m.get("op") in _PERMITTED:
                meta = m.get("meta")
                if isinstance(meta, dict) and lapsed(meta, now=now):
                    unacked[seq] = _NOOP

    def _drop_connection(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        self._out.clear()  # unacknowledged messages are resent from _unacked on reconnection
        w = self._writer
        self._writer = None
        self._connected.clear()
        if w is not None:
            w.close()

    async def _supervise(self) -> None:
        backoff = BACKOFF_MIN
        while not self._closing:
            try:
                await self._read_loop()
            except (OSError, _ssl.SSLError, PubguardError) as exc:
                log.info("client %s: link lost: %s", self.identity, exc)
            self._drop_connection()
            if self._closing or not self.reconnect:
                self._credit.set()
                for s in self._subs.values():
                    s._close()
                return
            while not self._closing:
                await asyncio.sleep(backoff)
                try:
                    await self._handshake()
                    self.reconnects += 1
                    backoff = BACKOFF_MIN
                    break
                except TransportError as exc:
                    log.info("client %s: reconnect failed: %s", self.identity, exc)
                    backoff = min(backoff * 2, BACKOFF_MAX)

    async def _read_loop(self) -> None:
        conn = self._writer
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
        got = False
        for env in frames:
            t = envelope.check_envelope(env)
            if t == "m":  # (the decoder hands a batch frame out as its m envelopes)
                seq = env["s"]
                if seq <= self._rx_seq:
                    continue  # a resent duplicate: already handed to the application
                if self._rx_seq and seq != self._rx_seq + 1:
                    raise FrameError(f"sequence gap: {seq} after {self._rx_seq}")
                self._rx_seq = seq
                got = True
                self._on_message(env["m"])
            elif t == "a":
                upto = env["u"]
                un = self._unacked
                while un and next(iter(un)) <= upto:
                    un.popitem(last=False)
                self._credit.set()
            elif t == "st":
                fut = self._status.get(env["q"])
                if fut is not None and not fut.done():
                    fut.set_result(env["data"])
            elif t == "bye":
                raise TransportError(f"broker closed the link: {env['reason']}")
            elif t == "hello":
                raise FrameError("unexpected second hello")
        if got and self._writer is not None:
            if self._rx_seq - self._acked_rx >= ACK_EVERY:
                self._send_ack()
            elif self._ack_timer is None:
                self._ack_timer = asyncio.get_running_loop().call_later(ACK_DELAY, self._send_ack)

    def _send_ack(self) -> None:
        """One cumulative ack for every delivery handled so far (delayed, see module doc)."""
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        upto = self._rx_seq if self._hold_from is None else self._hold_from - 1
        if self._writer is not None and upto > self._acked_rx:
            self._acked_rx = upto
            self._write(envelope.ack(upto))

    def _on_message(self, wire: dict[str, Any]) -> None:
        msg = decode_deliver(wire) or decode_message(wire)  # the common delivery: one call
        if isinstance(msg, Deliver):
            self.delivers += 1
            if self._held is not None:
                self._held.append(msg)  # in order, behind the one being opened
                return
            now = time.time()
            if self._open_off_loop(msg, now):
                self._held = deque((msg,))
                self._hold_from = self._rx_seq
                self._held_task = asyncio.get_running_loop().create_task(self._open_held())
                return
            self._hand_over(msg, self._open(msg, now))
        elif isinstance(msg, Error):
            self.errors.append(msg)
            log.warning(
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
        if not blocks_on_io(self.scheme):
            return False
        due = getattr(self.scheme, "open_due", None)
        ev = msg.event
        return due is not None and bool(due(ev.routing, ev.meta, now=now))

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
        held = self._held
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
                self._held = self._hold_from = self._held_task = None
                if self._writer is not None:
                    self._send_ack()

    async def _heartbeats(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.heartbeat_interval)
            w = self._writer
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
