"""The measured-cost simulator behind ``experiments scaling`` (eventguard.txt Fig. 11/12,
psguard.txt Fig. 9/10): one processor per entity, service times measured on the real code.

Theory of operation
-------------------
eventguard.txt §6.2.2 ran "each entity (publisher, subscriber, node, and MS) ... on a separate
processor" with simulated wide-area delays of ~70 ms per hop. :class:`ScalingSim` reproduces
that setting in virtual time on one machine: every broker, the publisher and every subscriber
is a FIFO single-server queue (its own processor), and links add ``latency`` seconds per hop.

What a processor does with a message is the real code, run when the message reaches the head
of its queue:

- a **broker** unpacks the msgpack frame (the wire codec is always on), calls the real
  :meth:`~pubguard.broker.Broker.handle` and packs every frame it emits (forwards to brokers,
  deliveries to clients);
- the **publisher** runs its scheme's ``protect_event`` and packs the publication (with
  ``publisher_batch`` > 1, ``protect_events`` over the offered events already waiting, one
  signature over their Merkle root: amortised signing, batches fill only under load);
- a **subscriber** unpacks the delivery, decodes it and runs ``open_event`` (the event is then
  "available to the subscriber in plain-text", the papers' latency end point).

The CPU time that call took (``time.process_time_ns``) goes through a :class:`CostModel` and
becomes the message's service time, so virtual time advances by measured cost. This is a
*measured-cost simulation*, not wall-clock on separate machines: queueing, hops and
parallelism are simulated, the work per message is real and timed. Tests inject
:class:`FixedCost` to get exact, machine-independent service times.

Saturation (both papers' method): every ``observe`` seconds the outstanding messages (waiting
+ in service) of every broker ("every node", the papers' words) and of the publisher are
sampled (:data:`WATCH`); one whose count increased for :data:`SATURATION_RUN` consecutive
observations is saturated and the run stops there. Subscribers are processors too (their
service times delay deliveries, so they are in the latency) but, as in the papers, their
queues do not define the network's throughput; ``RunStats.busy_per_event`` shows how loaded
they are.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import msgpack

from pubguard.broker.actions import DeliverTo, Drop, Forward, Reply
from pubguard.errors import ValidationError
from pubguard.model.events import Event
from pubguard.overlay.tree import Tree
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.sim.engine import Delivery, DropRecord, Simulator
from pubguard.sim.topology import SimTopology
from pubguard.wire.messages import Deliver, Publish, decode_message

__all__ = [
    "SATURATION_RUN",
    "WATCH",
    "CostModel",
    "FixedCost",
    "MeasuredCost",
    "NoSigEventGuardBroker",
    "RunStats",
    "ScalingSim",
]

SATURATION_RUN: Final = 5  # eventguard.txt §6.2.2: "five consecutive observations"
#: whose queues decide saturation: the papers monitor "every node" (the brokers) and the
#: publisher must sustain the offered rate; subscribers are measured but not watched
WATCH: Final = frozenset({"broker", "publisher"})
_DONE: Final = "\x00done"  # end of a service (no link id contains NUL)
_OFFER: Final = "\x00offer"  # the application hands the publisher an event
_OBSERVE: Final = "\x00observe"


#: (measured CPU ns, frames emitted, what to do when the service ends at virtual time ``done``)
_Work = tuple[int, int, Callable[[float], None]]


class CostModel(Protocol):
    """Service time (virtual seconds) of one message at one processor.

    ``kind``: "broker", "publisher" or "subscriber"; ``measured``: CPU seconds the real call
    took; ``outputs``: frames the processor emitted (forwards and deliveries)."""

    def service(self, kind: str, node: str, measured: float, outputs: int) -> float: ...


@dataclass(frozen=True, slots=True)
class MeasuredCost:
    """The measured CPU time itself (times ``scale``: 1.0 is this machine's core)."""

    scale: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.scale, int | float) and 0 < self.scale <= 1e6):
            raise ValidationError("cost scale must be a positive number")

    def service(self, kind: str, node: str, measured: float, outputs: int) -> float:
        return measured * self.scale


@dataclass(frozen=True, slots=True)
class FixedCost:
    """Fixed service times (seconds), independent of the machine: a broker spends ``broker``
    per message plus ``per_output`` per frame it emits; the publisher ``publisher`` per event;
    a subscriber ``subscriber`` per delivery."""

    broker: float = 0.001
    per_output: float = 0.0
    publisher: float = 0.0
    subscriber: float = 0.0

    def __post_init__(self) -> None:
        vals = (self.broker, self.per_output, self.publisher, self.subscriber)
        if not all(isinstance(v, int | float) and v >= 0 for v in vals) or self.broker <= 0:
            raise ValidationError("fixed costs must be >= 0 and the broker cost > 0")

    def service(self, kind: str, node: str, measured: float, outputs: int) -> float:
        if kind == "broker":
            return self.broker + self.per_output * outputs
        return self.publisher if kind == "publisher" else self.subscriber


class _NoSignatureCheck:
    """Stands in for the routing guard's signature verifier: accepts every signature."""

    def verify(self, *args: Any, **kwargs: Any) -> None:
        return None


class NoSigEventGuardBroker(EventGuardBroker):
    """EventGuard-nosig (eventguard.txt §6.2.2, Fig. 11): every guard (tokens, permits,
    timestamps, duplicates) but the publisher-signature verification at each node, which the
    paper switched off to show that ElGamal's 1.7 ms verify was the overhead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.roots = _NoSignatureCheck()  # type: ignore[assignment]


@dataclass(slots=True)
class _Proc:
    kind: str
    waiting: deque[tuple[str, Any]] = field(default_factory=deque)
    busy: bool = False
    busy_time: float = 0.0  # virtual seconds of service
    served: int = 0
    in_service: int = 0  # messages (or offered events of a Merkle batch) being served
    last: int = 0  # outstanding at the previous observation
    rising: int = 0  # consecutive increases

    def outstanding(self) -> int:
        return len(self.waiting) + (self.in_service if self.busy else 0)


@dataclass(frozen=True, slots=True)
class RunStats:
    """What one offered-rate run saw."""

    rate: float
    offered: int
    saturated: str | None  # the first processor found saturated (the run stopped there)
    busy_per_event: dict[str, float]  # service seconds per offered publication, per processor
    latencies: list[float]  # offered -> opened at the subscriber, seconds
    deliveries: dict[str, list[str]]  # subscriber -> event ids, in order
    drops: dict[str, int]

    watched: frozenset[str] = frozenset()  # processors whose queues decide saturation

    def capacity_estimate(self) -> float:
        """Utilisation law: 1 / the largest service seconds per publication at a watched
        processor."""
        worst = max((v for k, v in self.busy_per_event.items() if k in self.watched), default=0.0)
        return 1.0 / worst if worst > 0 else float("inf")

    def bottleneck(self) -> str | None:
        if not self.busy_per_event:
            return None
        return max(self.busy_per_event, key=lambda n: self.busy_per_event[n])


class ScalingSim(Simulator):
    """The engine's broker tree with every broker, the publisher and each subscriber as a
    FIFO single-server processor whose service time is the measured cost of the real code
    (see the module docstring). Set-up (subscriptions, advertisements) uses the engine's own
    zero-cost loop (:meth:`run`); publications go through :meth:`run_offered`."""

    def __init__(
        self,
        tree: Tree,
        schemes: Any,
        *,
        cost: CostModel,
        latency: float,
        seed: int,
        clock: Callable[[], int] = time.process_time_ns,
        publisher_batch: int = 1,
        watch: frozenset[str] = WATCH,
    ) -> None:
        topo = SimTopology(tree, default_latency=latency, client_latency=latency)
        super().__init__(topo, schemes, seed=seed, wire=True)
        self.cost = cost
        self.clock = clock
        self.publisher_batch = publisher_batch
        self.watch = watch
        self.procs: dict[str, _Proc] = {b: _Proc("broker") for b in self.brokers}
        self.offered_at: dict[str, float] = {}
        self.latencies: list[float] = []
        self.saturated: str | None = None

    # -- the wire codec: frames travel as msgpack bytes ----------------------------------------
    def _encode(self, msg: Any) -> Any:
        return ("wire", msgpack.packb(msg.to_wire()))

    def _at_broker(self, bid: str, src: str, payload: Any, now: float) -> None:
        self._enqueue_actions(bid, self.brokers[bid].handle(_unwire(payload), src, now), now)

    def _at_client(self, c: Any, msg: Any, t: float) -> None:
        if isinstance(msg, tuple) and msg[:1] == ("wire",):
            msg = decode_message(msgpack.unpackb(msg[1], raw=False))
        super()._at_client(c, msg, t)

    # -- processors ------------------------------------------------------------------------------
    def add_processor(self, client_id: str, kind: str) -> None:
        """Make a client a processor ("publisher" or "subscriber")."""
        self._client(client_id)
        self.procs[client_id] = _Proc(kind)

    def offer(self, client_id: str, event: Event, at: float) -> None:
        """The application hands ``event`` to publisher ``client_id`` at ``at`` (it queues)."""
        self._seq += 1
        heapq.heappush(self._queue, (at, self._seq, client_id, _OFFER, (event, at)))

    def run_offered(self, until: float, *, observe: float | None, observe_until: float) -> None:
        """Process arrivals up to ``until`` with measured service times; sample outstanding
        counts every ``observe`` seconds (up to ``observe_until`` and then while any message is
        in flight) and stop at saturation."""
        q = self._queue
        if observe:
            self._seq += 1
            heapq.heappush(q, (self.now + observe, self._seq, _OBSERVE, "", None))
        while q and q[0][0] <= until and self.saturated is None:
            t, _, dst, src, payload = heapq.heappop(q)
            self.now = max(self.now, t)
            if dst == _OBSERVE:
                self._observe()
                if observe and (t + observe <= observe_until or q):  # until all work is done
                    self._seq += 1
                    heapq.heappush(q, (t + observe, self._seq, _OBSERVE, "", None))
                continue
            proc = self.procs.get(dst)
            if proc is None or (src != _DONE and not _is_work(proc.kind, src, payload)):
                self._at_client(self.clients[dst], payload, t)  # acks and errors: no cost
            elif src == _DONE:
                proc.busy, proc.in_service = False, 0
                if proc.waiting:
                    self._serve(dst, proc, *proc.waiting.popleft(), t)
            elif proc.busy:
                proc.waiting.append((src, payload))
            else:
                self._serve(dst, proc, src, payload, t)

    def _observe(self) -> None:
        for name, p in self.procs.items():
            if p.kind not in self.watch:
                continue
            n = p.outstanding()
            p.rising = p.rising + 1 if n > p.last else 0
            p.last = n
            if p.rising >= SATURATION_RUN and self.saturated is None:
                self.saturated = name

    def _serve(self, node: str, proc: _Proc, src: str, payload: Any, t: float) -> None:
        """Run the real code for one message, time it, and finish it ``service`` later."""
        work = {"broker": self._broker_work, "publisher": self._publisher_work}.get(
            proc.kind, self._subscriber_work
        )
        measured_ns, outputs, finish = work(node, src, payload, t)
        dt = self.cost.service(proc.kind, node, measured_ns / 1e9, outputs)
        done = t + dt
        proc.busy, proc.busy_time, proc.served = True, proc.busy_time + dt, proc.served + 1
        proc.in_service = max(1, outputs) if proc.kind == "publisher" else 1
        self._seq += 1
        heapq.heappush(self._queue, (done, self._seq, node, _DONE, None))
        finish(done)

    def _broker_work(self, node: str, src: str, payload: Any, t: float) -> _Work:
        clock = self.clock
        t0 = clock()
        actions = self.brokers[node].handle(_unwire(payload), src, t)
        frames = [_frame(a) for a in actions]
        measured = clock() - t0
        return measured, len(frames), lambda done: self._emit(node, actions, frames, done)

    def _publisher_work(self, node: str, src: str, payload: Any, t: float) -> _Work:
        """Protect the offered event; with ``publisher_batch`` > 1 also the events already
        waiting (up to the batch size), under one signature over their Merkle root: batches
        fill only when the publisher falls behind, so a light load is still single-signed."""
        c, clock, waiting = self.clients[node], self.clock, self.procs[node].waiting
        items = [payload]
        while len(items) < self.publisher_batch and waiting and c.scheme.merkle_batches:
            items.append(waiting.popleft()[1])
        events = [e for e, _ in items]
        t0 = clock()
        batch_protect = c.scheme.protect_events if c.scheme.merkle_batches else None
        if len(events) > 1 and batch_protect is not None:
            pes = batch_protect(events, now=t, rng=self.rng)
        else:
            pes = [c.scheme.protect_event(events[0], now=t, rng=self.rng)]
        profile = c.scheme.profile
        frames = [
            msgpack.packb(Publish(pe.event_id, profile, pe.routing, pe.body, pe.meta).to_wire())
            for pe in pes
        ]
        measured = clock() - t0
        for pe, (_, offered) in zip(pes, items, strict=True):
            self.offered_at.setdefault(pe.event_id, offered)
        lat = self.topology.client_latency

        def finish(done: float) -> None:
            for fr in frames:
                self._schedule(done + lat, c.broker_id, node, ("wire", fr))

        return measured, len(frames), finish

    def _subscriber_work(self, node: str, src: str, payload: Any, t: float) -> _Work:
        c, clock = self.clients[node], self.clock
        t0 = clock()
        msg = decode_message(msgpack.unpackb(payload[1], raw=False))
        if not isinstance(msg, Deliver):
            return clock() - t0, 0, lambda done: None
        ev = msg.event
        opened = c.scheme.open_event(ev.event_id, ev.routing, ev.body, ev.meta, now=t)
        measured = clock() - t0

        def finish(done: float) -> None:
            sent = self.offered_at.get(ev.event_id)
            eid = opened.id or ev.event_id  # the application's id, restored by the subscriber
            c.deliveries.append(Delivery(done, eid, msg.sub_ids, opened, sent))
            if sent is not None:
                self.latencies.append(done - sent)

        return measured, 0, finish

    def _emit(self, bid: str, actions: list[Any], frames: list[Any], t: float) -> None:
        for a, fr in zip(actions, frames, strict=True):
            if isinstance(a, Forward):
                self.link_messages[a.message.op] += 1
                self._schedule(t + self.topology.latency(bid, a.link), a.link, bid, fr)
            elif isinstance(a, DeliverTo | Reply):
                self._schedule(t + self.topology.client_latency, a.link, bid, fr)
            elif isinstance(a, Drop):
                self.drops.append(DropRecord(t, bid, a))

    def stats(self, rate: float, offered: int) -> RunStats:
        drops: dict[str, int] = {}
        for d in self.drops:
            drops[d.drop.reason.value] = drops.get(d.drop.reason.value, 0) + 1
        return RunStats(
            rate=rate,
            offered=offered,
            saturated=self.saturated,
            busy_per_event={n: p.busy_time / max(1, offered) for n, p in self.procs.items()},
            latencies=list(self.latencies),
            deliveries={
                n: c.received_ids()
                for n, c in self.clients.items()
                if self.procs.get(n, _Proc("")).kind == "subscriber"
            },
            drops=drops,
            watched=frozenset(n for n, p in self.procs.items() if p.kind in self.watch),
        )


def _is_work(kind: str, src: str, payload: Any) -> bool:
    """Whether a processor spends measured time on this arrival (a broker on every frame, the
    publisher on offered events, a subscriber on delivery frames)."""
    if kind == "publisher":
        return src == _OFFER
    if kind == "subscriber":
        return isinstance(payload, tuple) and payload[:1] == ("wire",)
    return True


def _unwire(payload: Any) -> Any:
    if isinstance(payload, tuple) and payload[:1] in (("wire",), ("raw",)):
        return msgpack.unpackb(payload[1], raw=False) if payload[0] == "wire" else payload[1]
    return payload


def _frame(a: Any) -> Any:
    """The frame a broker writes for one action (forwards and deliveries are packed)."""
    if isinstance(a, Forward | DeliverTo):
        return ("wire", msgpack.packb(a.message.to_wire()))
    return a.message if isinstance(a, Reply) else None
