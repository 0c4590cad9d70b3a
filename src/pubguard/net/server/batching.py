"""The broker server's batch processing: reliable messages from the links' inboxes through the
sans-IO core, in one SQLite transaction per batch (a mixin of
:class:`~pubguard.net.server.server.BrokerServer`).

Theory of operation
-------------------
A batch runs in one transaction: the core writes its routing tables through, new outgoing
frames of durable links go to their outboxes and each source link's ``rx_seq`` is recorded;
only after the commit are frames written and the batch acknowledged
(``store/broker_state.py``). Hence ``kill -9`` loses no acknowledged message.

A link's new messages go to the core in chunks of at most ``CHUNK`` (``Broker.handle_batch``:
the actions of one ``handle`` per message, with runs of publications matched together, e.g.
one AES call per PSGuard token over a chunk's nonces, psguard.txt §3.1); the actions are
applied in order and congestion is checked between chunks.

Back-pressure: while a broker link's queue exceeds ``max_queue`` it is *congested* and only
its own inbox is processed (in a tree its messages never produce output towards it); a client
link over ``max_queue`` is a slow consumer (a non-durable one is disconnected, a durable one
loses the excess deliveries as ``overload`` drops). See :mod:`pubguard.net.server.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import IO, Any, Final

import msgpack

from pubguard.broker.actions import DeliverTo, Drop, Forward, Reply
from pubguard.broker.core import Broker
from pubguard.errors import DropReason, FrameError, PubguardError
from pubguard.net.config import BrokerConfig
from pubguard.net.server.links import Link
from pubguard.store.broker_state import BrokerStore
from pubguard.wire import envelope
from pubguard.wire.framing import pack
from pubguard.wire.messages import Ack, Deliver, Publish

__all__ = ["BATCH", "CHUNK", "BatchProcessing"]

log = logging.getLogger("pubguard.net.server")

BATCH: Final = 512  # reliable messages processed per link per batch
CHUNK: Final = 64  # messages of one link handed to the core's handle_batch at once


class BatchProcessing:
    """Inbox processing, action application and flushing for a broker server."""

    # provided by BrokerServer
    name: str
    config: BrokerConfig
    core: Broker
    store: BrokerStore | None
    links: dict[str, Link]
    stats: Counter[str]
    _congested: set[str]
    _scheduled: bool
    _closing: bool
    _record: IO[bytes] | None
    _spawn: Callable[[Any], None]

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run_scheduled)

    def _run_scheduled(self) -> None:
        self._scheduled = False
        if not self._closing:
            self._process()

    def _allowed(self, link: Link) -> bool:
        c = self._congested
        return not c or (len(c) == 1 and link.link_id in c)

    def _process(self) -> None:
        """Process the inboxes that back-pressure allows, in one transaction."""
        ready = [lk for lk in self.links.values() if lk.inbox and lk.writer and self._allowed(lk)]
        if not ready:
            return
        now = time.time()
        acks: list[Link] = []
        ctx = self.store.batch() if self.store is not None else contextlib.nullcontext()
        with ctx:
            for link in ready:
                n = 0
                bad: FrameError | None = None
                while bad is None and link.inbox and n < BATCH and self._allowed(link):
                    msgs: list[Any] = []
                    while link.inbox and n < BATCH and len(msgs) < CHUNK:
                        env = link.inbox.popleft()
                        n += 1
                        seq = env["s"]
                        try:
                            fresh = link.accept(seq)
                        except FrameError as exc:
                            bad = exc
                            break
                        if not fresh:
                            self.stats["duplicate_frames"] += 1
                            continue
                        link.rx_seq = seq
                        if self._record is not None:
                            self._record_message(link.link_id, env["m"])
                        msgs.append(env["m"])
                    if msgs:
                        self._apply(self.core.handle_batch(msgs, link.link_id, now))
                if bad is not None:
                    self._close_link(link, bad)
                if n:
                    acks.append(link)
                    if self.store is not None and link.durable:
                        self.store.set_rx(link.link_id, link.rx_seq)
            self._persist_new()
            self.core.before_commit()  # the schemes' replay state commits with the batch
        self._pump_all()
        for link in acks:
            link.send_control(envelope.ack(link.rx_seq))
        if any(lk.inbox and lk.writer and self._allowed(lk) for lk in self.links.values()):
            self._schedule()

    def _record_message(self, link_id: str, m: Any) -> None:
        """A curious broker's log: every message exactly as it arrived (``record = ...``)."""
        assert self._record is not None
        with contextlib.suppress(TypeError, ValueError, OSError):
            self._record.write(msgpack.packb([link_id, m], use_bin_type=True))
            self._record.flush()

    def _apply(self, actions: list[Any]) -> None:
        """Queue the core's send actions on their links; log drops."""
        events: dict[int, bytes] = {}  # one packed form per publication in these actions
        for a in actions:
            if isinstance(a, Drop):
                log.debug(
                    "broker %s: drop %s %s from %s: %s: %s",
                    self.name,
                    a.op or "message",
                    a.message_id,
                    a.link,
                    a.reason.value,
                    a.detail,
                )
                continue
            if isinstance(a, Reply) and isinstance(a.message, Ack):
                continue  # the link-level cumulative ack already confirms acceptance
            link = self.links.get(a.link)
            if link is None:
                continue
            if isinstance(a, DeliverTo | Reply) and link.depth >= self.config.max_queue:
                self.core.drops[DropReason.OVERLOAD] += 1
                if not link.durable and link.writer is not None and not link.slow:
                    link.slow = True
                    log.warning("broker %s: %s is a slow consumer", self.name, a.link)
                    self._spawn(self._kick(link))
                continue
            link.enqueue_packed(_packed(a.message, events))
            if isinstance(a, Forward) and link.depth > self.config.max_queue:
                self._congested.add(link.link_id)

    def _close_link(self, link: Link, exc: PubguardError) -> None:
        """Close one link's connection (it reconnects and resends from our ``rx_seq``)."""
        log.warning("broker %s: closing link %s: %s", self.name, link.link_id, exc)
        self.stats["closed." + type(exc).__name__] += 1
        link.inbox.clear()
        link.send_control(envelope.bye(str(exc)))
        if link.writer is not None:
            link.writer.close()

    async def _kick(self, link: Link) -> None:
        w = link.writer
        if w is not None:
            link.send_control(envelope.bye("slow consumer"))
            w.close()

    def _persist_new(self) -> None:
        for link in self.links.values():
            if link.new_frames:
                new = link.take_new()
                if self.store is not None and link.durable:
                    self.store.outbox_add((link.link_id, s, f) for s, f in new)
                    self.store.set_tx(link.link_id, link.tx_next)

    def _flush_batch(self) -> None:
        """Persist and send what state changes outside ``_process`` queued."""
        if self.store is not None:
            with self.store.batch():
                self._persist_new()
                self.core.before_commit()
        else:
            self._persist_new()
        self._pump_all()

    def _pump_all(self) -> None:
        for link in self.links.values():
            if link.writer is not None and link.outq:
                link.pump()


_PUBLISH_HEAD: Final = pack("op") + pack("publish")
_DELIVER_HEAD: Final = b"\x83" + pack("op") + pack("deliver") + pack("sub_ids")
_EVENT_KEY: Final = pack("event")


def _event_fields(ev: Publish) -> bytes:
    """The packed map of a publication's fields without ``op`` (a delivery's ``event``): from
    the wire dict it arrived as when it is passed on unchanged, else thawed once."""
    w = ev.wire
    if w is None:
        return pack(ev._fields())
    if "op" in w:
        w = {k: v for k, v in w.items() if k != "op"}
    return pack(w)


def _packed(m: Any, events: dict[int, bytes]) -> bytes:
    """``pack(m.to_wire())`` byte for byte (up to the empty ``body`` / ``meta`` a received
    publication may carry), packing each publication's fields once per batch of actions and
    splicing them into its forwards and deliveries (a msgpack map is a count followed by its
    entries, so ``{"op": .., **fields}`` is the fields' entries after a new count)."""
    if isinstance(m, Deliver | Publish):
        ev = m.event if isinstance(m, Deliver) else m
        f = events.get(id(ev))
        if f is None:
            f = events[id(ev)] = _event_fields(ev)
        if isinstance(m, Deliver):
            return b"".join((_DELIVER_HEAD, pack(list(m.sub_ids)), _EVENT_KEY, f))
        n = f[0] & 0x0F  # a publication has at most five fields: always a fixmap
        return b"".join((bytes((0x80 | (n + 1),)), _PUBLISH_HEAD, f[1:]))
    return pack(m.to_wire())
