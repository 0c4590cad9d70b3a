"""A discrete-event simulator that drives real broker cores in virtual time.

Theory of operation
-------------------
The same :class:`~pubguard.broker.Broker` that runs behind the asyncio transport runs here
(ARCHITECTURE.md: "the same broker core runs over real TCP and inside the simulator, so
experiments measure the real code"). Each broker of a :class:`SimTopology` tree gets a parent
link and child links named after the neighbouring broker; each :class:`SimClient` gets a client
link named after itself. Sending a message schedules its arrival ``latency`` seconds later on a
FIFO link (an arrival is never earlier than the previous one on the same directed link); the
event loop pops arrivals in (time, sequence) order, so a run is a pure function of its inputs
and ``seed``. A broker may be given a ``service_time`` per message, which makes it a
single-server queue (for throughput experiments); the default is zero.

With ``wire=True`` every message crosses the wire codec (``to_wire`` -> msgpack -> dict ->
``handle``), which exercises exactly the decoding path of the transport.

Clients use a :class:`~pubguard.schemes.ClientScheme` (plain by default) to protect filters and
events and to open deliveries; what they received, with the virtual time, is in
``SimClient.deliveries``. Broker-to-broker traffic is counted per op in ``link_messages``.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from random import Random
from typing import Any

import msgpack

from pubguard.broker.actions import DeliverTo, Drop, Forward, Reply
from pubguard.broker.core import Broker
from pubguard.broker.state import BrokerState
from pubguard.errors import StateError, ValidationError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.overlay.tree import Tree
from pubguard.schemes.base import BrokerScheme, ClientScheme, LinkKind, withdrawal_meta
from pubguard.schemes.plain import PlainScheme, new_event_id
from pubguard.sim.topology import SimTopology
from pubguard.wire.messages import (
    Ack,
    Advertise,
    Deliver,
    Error,
    Message,
    Publish,
    Subscribe,
    Unadvertise,
    Unsubscribe,
)

__all__ = ["Delivery", "DropRecord", "SimClient", "Simulator"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event received by a client at virtual time ``time``."""

    time: float
    event_id: str
    sub_ids: tuple[str, ...]
    event: Event
    published_at: float | None = None


@dataclass(frozen=True, slots=True)
class DropRecord:
    time: float
    broker: str
    drop: Drop


@dataclass(slots=True)
class SimClient:
    """A publisher and/or subscriber attached to one broker."""

    client_id: str
    broker_id: str
    scheme: ClientScheme
    deliveries: list[Delivery] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    errors: list[Error] = field(default_factory=list)
    filters: dict[str, Filter] = field(default_factory=dict)  # live subscriptions
    adverts: dict[str, Filter] = field(default_factory=dict)  # live advertisements
    _n: int = 0

    def next_id(self, kind: str) -> str:
        self._n += 1
        return f"{self.client_id}.{kind}{self._n}"

    def received_ids(self) -> list[str]:
        return [d.event_id for d in self.deliveries]


SchemesFor = Callable[[str], Iterable[BrokerScheme]]


class Simulator:
    """Drive a tree of broker cores and their clients in virtual time. Deterministic."""

    def __init__(
        self,
        topology: SimTopology | Tree,
        schemes: SchemesFor | Iterable[BrokerScheme] | None = None,
        *,
        seed: int = 0,
        wire: bool = False,
        jitter: float = 0.0,
        service_time: float = 0.0,
        store_for: Callable[[str], BrokerState | None] | None = None,
    ) -> None:
        self.topology = topology if isinstance(topology, SimTopology) else SimTopology(topology)
        if schemes is None:
            schemes = [PlainScheme()]
        if not callable(schemes):
            fixed = list(schemes)
            schemes = lambda _bid: fixed  # noqa: E731
        self.rng = Random(seed)
        self.wire = wire
        self.jitter = jitter
        self.service_time = service_time
        self.now = 0.0
        self.brokers: dict[str, Broker] = {}
        self.clients: dict[str, SimClient] = {}
        self.link_messages: Counter[str] = Counter()  # broker-to-broker messages per op
        self.drops: list[DropRecord] = []
        self.processed = 0
        self._queue: list[tuple[float, int, str, str, Any]] = []
        self._seq = 0
        self._last_arrival: dict[tuple[str, str], float] = {}
        self._busy_until: dict[str, float] = {}
        self._published_at: dict[str, float] = {}
        tree = self.topology.tree
        for b in tree.nodes:
            store = store_for(b) if store_for is not None else None
            self.brokers[b] = Broker(b, schemes(b), store=store)
        for p, c in tree.edges:
            self._enqueue_actions(p, self.brokers[p].add_link(c, LinkKind.CHILD))
            self._enqueue_actions(c, self.brokers[c].add_link(p, LinkKind.PARENT))

    # -- clients ----------------------------------------------------------------------------
    def add_client(
        self, client_id: str, broker_id: str, scheme: ClientScheme | None = None
    ) -> SimClient:
        if client_id in self.clients or client_id in self.brokers:
            raise ValidationError(f"name {client_id!r} is already used")
        if broker_id not in self.brokers:
            raise ValidationError(f"no broker {broker_id!r}")
        self.brokers[broker_id].add_link(client_id, LinkKind.CLIENT)
        c = SimClient(client_id, broker_id, scheme or PlainScheme())
        self.clients[client_id] = c
        return c

    def subscribe(
        self, client_id: str, f: Filter | str, *, sub_id: str | None = None, at: float | None = None
    ) -> str:
        c = self._client(client_id)
        flt = Filter.parse(f) if isinstance(f, str) else f
        sid = sub_id or c.next_id("s")
        t = self._at(at)
        pf = c.scheme.protect_filter(flt, now=t, rng=self.rng)
        c.filters[sid] = flt
        self._send_from_client(c, Subscribe(sid, c.scheme.profile, pf.filter, pf.meta), t)
        return sid

    def unsubscribe(self, client_id: str, sub_id: str, *, at: float | None = None) -> None:
        c = self._client(client_id)
        flt = c.filters.pop(sub_id, None)
        t = self._at(at)
        meta = withdrawal_meta(c.scheme, "unsubscribe_meta", flt, now=t, rng=self.rng)
        self._send_from_client(c, Unsubscribe(sub_id, c.scheme.profile, meta), t)

    def advertise(
        self, client_id: str, f: Filter | str, *, adv_id: str | None = None, at: float | None = None
    ) -> str:
        c = self._client(client_id)
        flt = Filter.parse(f) if isinstance(f, str) else f
        aid = adv_id or c.next_id("a")
        t = self._at(at)
        pf = c.scheme.protect_advertisement(flt, now=t, rng=self.rng)
        c.adverts[aid] = flt
        self._send_from_client(c, Advertise(aid, c.scheme.profile, pf.filter, pf.meta), t)
        return aid

    def unadvertise(self, client_id: str, adv_id: str, *, at: float | None = None) -> None:
        c = self._client(client_id)
        flt = c.adverts.pop(adv_id, None)
        t = self._at(at)
        meta = withdrawal_meta(c.scheme, "unadvertise_meta", flt, now=t, rng=self.rng)
        self._send_from_client(c, Unadvertise(adv_id, c.scheme.profile, meta), t)

    def publish(self, client_id: str, event: Event, *, at: float | None = None) -> str:
        """Publish ``event``; returns its (application's) id, drawn if it has none. The wire
        carries ``scheme.wire_id(id)``, opaque under the secure profiles."""
        c = self._client(client_id)
        t = self._at(at)
        if event.id is None:
            event = Event(
                event.attrs, id=new_event_id(self.rng), type=event.type, payload=event.payload
            )
        pe = c.scheme.protect_event(event, now=t, rng=self.rng)
        msg = Publish(pe.event_id, c.scheme.profile, pe.routing, pe.body, pe.meta)
        self._published_at.setdefault(pe.event_id, t)
        self._send_from_client(c, msg, t)
        return str(event.id)

    def send_raw(self, src: str, broker_id: str, raw: Any, *, at: float | None = None) -> None:
        """Inject an arbitrary (possibly malformed) wire value on the link ``src -> broker``."""
        if broker_id not in self.brokers:
            raise ValidationError(f"no broker {broker_id!r}")
        self._schedule(self._at(at), broker_id, src, ("raw", raw))

    # -- running ----------------------------------------------------------------------------
    def run(self, until: float | None = None) -> int:
        """Process arrivals in time order (up to ``until``); returns how many were processed."""
        n = 0
        q = self._queue
        while q and (until is None or q[0][0] <= until):
            t, _, dst, src, payload = heapq.heappop(q)
            self.now = max(self.now, t)
            if dst in self.brokers:
                start = max(t, self._busy_until.get(dst, 0.0))
                if start > t:
                    self._schedule(start, dst, src, payload, fifo=False)
                    continue
                self._busy_until[dst] = t + self.service_time
                self._at_broker(dst, src, payload, t + self.service_time)
            else:
                self._at_client(self.clients[dst], payload, t)
            n += 1
        if until is not None:
            self.now = max(self.now, until)
        self.processed += n
        return n

    def messages(self, op: str | None = None) -> int:
        """Broker-to-broker messages sent so far (of one op, or all)."""
        if op is None:
            return sum(self.link_messages.values())
        return self.link_messages[op]

    # -- internals --------------------------------------------------------------------------
    def _client(self, client_id: str) -> SimClient:
        c = self.clients.get(client_id)
        if c is None:
            raise StateError(f"no client {client_id!r}")
        return c

    def _at(self, at: float | None) -> float:
        return self.now if at is None else max(at, self.now)

    def _send_from_client(self, c: SimClient, msg: Message, t: float) -> None:
        arrival = t + self.topology.client_latency
        self._schedule(arrival, c.broker_id, c.client_id, self._encode(msg))

    def _encode(self, msg: Message) -> Any:
        if not self.wire:
            return msg
        return ("raw", msgpack.unpackb(msgpack.packb(msg.to_wire()), raw=False))

    def _schedule(self, t: float, dst: str, src: str, payload: Any, *, fifo: bool = True) -> None:
        if fifo:
            t = max(t, self._last_arrival.get((src, dst), t))
            self._last_arrival[(src, dst)] = t
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, dst, src, payload))

    def _at_broker(self, bid: str, src: str, payload: Any, now: float) -> None:
        raw = payload[1] if isinstance(payload, tuple) and payload[:1] == ("raw",) else payload
        actions = self.brokers[bid].handle(raw, src, now)
        self._enqueue_actions(bid, actions, now)

    def _enqueue_actions(self, bid: str, actions: list[Any], now: float | None = None) -> None:
        t = self.now if now is None else now
        for a in actions:
            if isinstance(a, Forward):
                self.link_messages[a.message.op] += 1
                lat = self.topology.latency(bid, a.link)
                if self.jitter:
                    lat += self.rng.uniform(0.0, self.jitter)
                self._schedule(t + lat, a.link, bid, self._encode(a.message))
            elif isinstance(a, DeliverTo | Reply):
                self._schedule(t + self.topology.client_latency, a.link, bid, a.message)
            elif isinstance(a, Drop):
                self.drops.append(DropRecord(t, bid, a))

    def _at_client(self, c: SimClient, msg: Any, t: float) -> None:
        match msg:
            case Deliver(event=ev, sub_ids=sids):
                opened = c.scheme.open_event(ev.event_id, ev.routing, ev.body, ev.meta, now=t)
                sent = self._published_at.get(ev.event_id)  # the application's id, restored:
                c.deliveries.append(Delivery(t, opened.id or ev.event_id, sids, opened, sent))
            case Ack():
                c.acks.append(msg)
            case Error():
                c.errors.append(msg)
