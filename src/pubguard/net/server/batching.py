"""The broker server's batch processor: reliable messages from the links' inboxes through the
sans-IO core, in one SQLite transaction per batch.

Theory of operation
-------------------
:class:`BatchProcessor` is a collaborator owned by
:class:`~pubguard.net.server.server.BrokerServer`. It is handed what it works on: the core, the
store (None for a broker without state), the server's links by id, a callback that hangs up a
link's connection, and the server's transport counters. It owns the rest: the back-pressure
state (which links are congested), the scheduling of the next batch, and the curious broker's
record of incoming messages (``record = ...``).

A batch runs in one transaction: the core writes its routing tables through, new outgoing
frames of durable links go to their outboxes, each source link's ``rx_seq`` is recorded and
the schemes' replay state (narada-secure-delivery.txt §V-B) is committed with it
(``Broker.before_commit``); only after the commit are frames written and the batch
acknowledged (``store/broker_state.py``). Hence ``kill -9`` loses no acknowledged message, and
a restarted broker neither loses a routing entry nor reopens a replay window.

A link's new messages go to the core in chunks of at most ``CHUNK`` (``Broker.handle_batch``:
the actions of one ``handle`` per message, with runs of publications matched together, e.g.
one AES call per PSGuard token over a chunk's nonces, psguard.txt §3.1); the actions are
applied in order and congestion is checked between chunks. The server's transport counters
(``pubguard status``) count the batches, the core calls and their messages, and the link
writes and their bytes, so a benchmark can tell per-batch costs from per-message ones.

Back-pressure: while a broker link's queue exceeds ``max_queue`` it is *congested* and only
its own inbox is processed (in a tree its messages never produce output towards it, so no wait
cycle can form); messages from other links wait in their inboxes, bounded by the peers'
windows, which holds back their acknowledgements and so slows the publishers. A link leaves the
congested set when acknowledgements bring its queue down to half of ``max_queue``. A client
link over ``max_queue`` is a slow consumer: a non-durable one is hung up, a durable one loses
the excess deliveries as ``overload`` drops (counted), so one slow subscriber cannot grow the
broker's memory without bound (eventguard.txt §2.2: a subscriber may flood; STYLE.md 7).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeAlias

import msgpack

from pubguard.broker.actions import Action, DeliverTo, Drop, Forward, Reply
from pubguard.broker.core import Broker
from pubguard.errors import DropReason, FrameError
from pubguard.net.server.links import Link
from pubguard.store.broker_state import BrokerStore
from pubguard.wire import envelope
from pubguard.wire.framing import RawMessage, pack
from pubguard.wire.messages import Ack, Deliver, Publish

__all__ = ["BATCH", "CHUNK", "BatchProcessor", "Raws", "pack_message"]

log = logging.getLogger("pubguard.net.server")

BATCH: Final = 512  # reliable messages processed per link per batch
CHUNK: Final = 64  # messages of one link handed to the core's handle_batch at once

#: hangs up a link's connection with a reason (``bye``, then close): the server's to do, as the
#: connection belongs to the task serving it
HangUp = Callable[[Link, str], None]

#: told when a batch raised (a failed commit, a fault in the core): the server stops, so that a
#: restart resumes from the last commit (the batch was never acknowledged, and the links'
#: ``rx_seq`` and the core's state in memory may be ahead of what SQLite holds)
Fail = Callable[[BaseException], None]


class BatchProcessor:
    """Runs batches of the links' inboxes through ``core`` and applies the actions (see the
    module docstring).

    ``links``: the server's links by id (read here, never changed); ``hang_up``: closes a
    link's connection (its peer reconnects and resends from our ``rx_seq``); ``stats``: the
    server's transport counters (``duplicate_frames``, ``closed.<error>``); ``observe``: sees
    every list of actions before it is applied (the server logs ``revoked`` drops there);
    ``record``: a file to append every incoming message to, as it arrived."""

    def __init__(
        self,
        name: str,
        core: Broker,
        store: BrokerStore | None,
        links: Mapping[str, Link],
        *,
        max_queue: int,
        hang_up: HangUp,
        stats: Counter[str],
        observe: Callable[[Sequence[Action]], None] | None = None,
        record: Path | None = None,
        transform: Callable[[Sequence[Action]], Sequence[Action]] | None = None,
        fail: Fail | None = None,
    ) -> None:
        self.name = name
        self.core = core
        self.store = store
        self.links = links
        self.max_queue = max_queue
        self.stats = stats
        self._hang_up = hang_up
        self._observe = observe
        self._transform = transform  # a malicious model's filter (net/server/malicious.py)
        self._fail = fail
        self._record = record.open("ab") if record is not None else None
        self._congested: set[str] = set()
        self._scheduled = False
        self._stopped = False

    # -- back-pressure ---------------------------------------------------------------------

    @property
    def congested(self) -> frozenset[str]:
        """The broker links whose queue is over ``max_queue`` (only their inboxes run)."""
        return frozenset(self._congested)

    def acked(self, link: Link) -> None:
        """``link``'s queue shrank (an acknowledgement): below half of ``max_queue`` a congested
        link is released and the inboxes held back for it are scheduled."""
        if link.link_id in self._congested and link.depth <= self.max_queue // 2:
            self._congested.discard(link.link_id)
            self.schedule()

    def forget(self, link_id: str) -> None:
        """The link is gone: it holds nothing back any more."""
        self._congested.discard(link_id)

    def _allowed(self, link: Link) -> bool:
        c = self._congested
        return not c or (len(c) == 1 and link.link_id in c)

    # -- scheduling ------------------------------------------------------------------------

    def schedule(self) -> None:
        """Run a batch soon (once, however often this is called before it runs)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run_scheduled)

    def _run_scheduled(self) -> None:
        self._scheduled = False
        if self._stopped:
            return
        self.process()

    def process(self) -> None:
        """Process the inboxes that back-pressure allows, in one transaction; if that raises,
        stop (crash-only, below) and tell the server."""
        if self._stopped:
            return
        try:
            self._process()
        except Exception as exc:
            # Crash-only: the transaction rolled back, but the links' rx_seq and the core's
            # tables and replay windows in memory may already hold this batch, so carrying on
            # would count the peers' resends as duplicates. Nothing of the batch was
            # acknowledged; a restart reloads the last commit and the peers resend the rest.
            self._stopped = True
            log.critical(
                "broker %s: a batch failed (%s: %s); stopping, nothing of it was acknowledged",
                self.name,
                type(exc).__name__,
                str(exc)[:200],
            )
            if self._fail is None:
                raise
            self._fail(exc)

    def stop(self) -> None:
        """The server is closing: no scheduled batch runs any more."""
        self._stopped = True

    def close(self) -> None:
        """Close the record and forget the store (its owner, the server, closes it)."""
        self._stopped = True
        self.store = None
        if self._record is not None:
            self._record.close()
            self._record = None

    # -- one batch -------------------------------------------------------------------------

    def _process(self) -> None:
        ready = [lk for lk in self.links.values() if lk.inbox and lk.writer and self._allowed(lk)]
        if not ready:
            return
        now = time.time()
        acks: list[Link] = []
        self.stats["batches"] += 1  # (status: per-batch costs are spread over its messages)
        ctx = self.store.batch() if self.store is not None else contextlib.nullcontext()
        with ctx:
            for link in ready:
                n = 0
                bad: FrameError | None = None
                while bad is None and link.inbox and n < BATCH and self._allowed(link):
                    msgs: list[Any] = []
                    raws: Raws = {}  # the publications' fields as they arrived, when kept
                    while link.inbox and n < BATCH and len(msgs) < CHUNK:
                        env = link.inbox.popleft()
                        n += 1
                        seq = env["s"]
                        m = env["m"]
                        if type(env) is RawMessage and env.fields is not None:
                            raws[id(m)] = (m, env.fields)
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
                            self._record_message(link.link_id, m)
                        msgs.append(m)
                    if msgs:
                        # (status: messages per core call, what per-call costs are spread over)
                        self.stats["core_calls"] += 1
                        self.stats["core_messages"] += len(msgs)
                        self.apply(self.core.handle_batch(msgs, link.link_id, now), raws)
                if bad is not None:
                    self._reject(link, bad)
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
            self.schedule()

    def _record_message(self, link_id: str, m: Any) -> None:
        """A curious broker's log: every message exactly as it arrived (``record = ...``)."""
        assert self._record is not None
        with contextlib.suppress(TypeError, ValueError, OSError):
            self._record.write(msgpack.packb([link_id, m], use_bin_type=True))
            self._record.flush()

    def apply(self, actions: Sequence[Action], raws: Raws | None = None) -> None:
        """Queue the core's send actions on their links; log drops. ``raws``: the packed
        fields of the publications behind these actions, as they arrived (:func:`pack_message`)."""
        if self._transform is not None:
            actions = self._transform(actions)
        if self._observe is not None:
            self._observe(actions)
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
            if isinstance(a, DeliverTo | Reply) and link.depth >= self.max_queue:
                self.core.drops[DropReason.OVERLOAD] += 1
                if not link.durable and link.writer is not None and not link.slow:
                    link.slow = True
                    log.warning("broker %s: %s is a slow consumer", self.name, a.link)
                    # hung up from the event loop, after this batch of actions is applied
                    asyncio.get_running_loop().call_soon(self._hang_up, link, "slow consumer")
                continue
            link.enqueue_packed(pack_message(a.message, events, raws))
            if isinstance(a, Forward) and link.depth > self.max_queue:
                self._congested.add(link.link_id)

    def _reject(self, link: Link, exc: FrameError) -> None:
        """Close one link's connection (it reconnects and resends from our ``rx_seq``)."""
        log.warning("broker %s: closing link %s: %s", self.name, link.link_id, exc)
        self.stats["closed." + type(exc).__name__] += 1
        link.inbox.clear()
        self._hang_up(link, str(exc))

    # -- persistence and sending -----------------------------------------------------------

    def _persist_new(self) -> None:
        for link in self.links.values():
            if link.new_frames:
                new = link.take_new()
                if self.store is not None and link.durable:
                    self.store.outbox_add((link.link_id, s, f) for s, f in new)
                    self.store.set_tx(link.link_id, link.tx_next)

    def flush(self) -> None:
        """Persist and send what state changes outside :meth:`process` queued (a link added
        or removed, a lease ended): in a transaction of their own, with the replay state."""
        if self.store is not None:
            with self.store.batch():
                self._persist_new()
                self.core.before_commit()
        else:
            self._persist_new()
        self._pump_all()

    def _pump_all(self) -> None:
        # (status: one write, a TLS record or more and a send, per link with frames due)
        writes = sent = 0
        for link in self.links.values():
            if link.writer is not None and link.outq:
                n = link.pump()
                if n:
                    writes += 1
                    sent += n
        if writes:
            self.stats["link_writes"] += writes
            self.stats["link_write_bytes"] += sent


_PUBLISH_HEAD: Final = pack("op") + pack("publish")
_DELIVER_HEAD: Final = b"\x83" + pack("op") + pack("deliver") + pack("sub_ids")
_EVENT_KEY: Final = pack("event")

#: by ``id`` of a publication's wire dict: that dict and its packed fields without ``op`` as
#: they arrived (``wire/framing.py`` ``RawMessage``); the dict is kept so the ``id`` stays its
Raws: TypeAlias = dict[int, tuple[dict[str, Any], bytes]]


def _event_fields(ev: Publish, raws: Raws | None = None) -> bytes:
    """The packed map of a publication's fields without ``op`` (a delivery's ``event``): from
    the wire dict it arrived as when it is passed on unchanged (those bytes as they arrived
    when ``raws`` has them, else the dict packed), else thawed once."""
    w = ev.wire
    if w is None:
        return pack(ev._fields())
    if raws:
        got = raws.get(id(w))
        if got is not None and got[0] is w:
            return got[1]
    if "op" in w:
        w = {k: v for k, v in w.items() if k != "op"}
    return pack(w)


def pack_message(m: Any, events: dict[int, bytes], raws: Raws | None = None) -> bytes:
    """``pack(m.to_wire())`` byte for byte (up to the empty ``body`` / ``meta`` a received
    publication may carry), packing each publication's fields once per batch of actions and
    splicing them into its forwards and deliveries (a msgpack map is a count followed by its
    entries, so ``{"op": .., **fields}`` is the fields' entries after a new count). A
    publication passed on unchanged whose fields are in ``raws`` is not packed at all: they
    are ``pack`` of its wire dict's fields, sliced from the bytes it arrived as
    (``FrameDecoder(raw=True)``)."""
    if isinstance(m, Deliver | Publish):
        ev = m.event if isinstance(m, Deliver) else m
        f = events.get(id(ev))
        if f is None:
            f = events[id(ev)] = _event_fields(ev, raws)
        if isinstance(m, Deliver):
            return b"".join((_DELIVER_HEAD, pack(list(m.sub_ids)), _EVENT_KEY, f))
        n = f[0] & 0x0F  # a publication has at most five fields: always a fixmap
        return b"".join((bytes((0x80 | (n + 1),)), _PUBLISH_HEAD, f[1:]))
    return pack(m.to_wire())
