"""The flood simulation's machinery (eventguard.txt Fig. 13, Fig. 3): the broker variants, the
per-message cost model and the queueing simulator; :mod:`pubguard.sim.flood` drives them.

Theory of operation
-------------------
Variants: ``guard`` is eventguard with the routing guard (§4.7); ``noguard`` the same scheme
with the routing guard switched off (:class:`UnguardedEventGuardBroker`, and :class:`NoDedup`
in place of the core's id window); ``plain`` the no-security baseline. Subscribers
(:class:`CountingSubscriber`) count what they refuse instead of raising.

Brokers are single-server FIFO queues (:class:`FloodSim`) with a per-message *cost* in virtual
time (:class:`CostModel`): ``route_us`` to route an accepted message, ``check_us`` for a
message dropped by a cheap lookup (duplicate id, banned source, stale, malformed), plus
``verify_us`` whenever the routing guard verifies a signature. The first copy of an id at a
broker is the legitimate one (on a tree it always arrives first); identifiers starting with
``FLOOD_PREFIX`` and later copies are flood messages.

The cheap cost matches what the core does: a replayed publication (its id in the duplicate
window) is dropped before it is decoded (``Broker._seen_wire`` in ``broker/core.py``), and a
banned source is refused by the guard before any signature check (``schemes/common/guard_check.py``).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pubguard.broker.actions import Drop
from pubguard.broker.dedup import DedupWindow
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.model.events import Event
from pubguard.overlay.tree import Tree
from pubguard.schemes.base import CheckContext
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.sim.engine import Simulator
from pubguard.sim.topology import SimTopology

__all__ = [
    "FLOOD_PREFIX",
    "CostModel",
    "CountingSubscriber",
    "FloodSim",
    "NoDedup",
    "UnguardedEventGuardBroker",
]

FLOOD_PREFIX: Final = "flood-"
_DONE: Final = "\x00done"  # marks the end of a broker's service (no link id contains NUL)
_CHEAP: Final = frozenset(
    {
        DropReason.DUPLICATE,
        DropReason.FLOOD,
        DropReason.STALE,
        DropReason.MALFORMED,
        DropReason.UNKNOWN_TYPE,
    }
)


class UnguardedEventGuardBroker(EventGuardBroker):
    """eventguard with the routing guard (eventguard.txt §4.7) switched off: publications are
    routed by token with no timestamp, permit or signature check. The subscribe, advertise and
    withdrawal guards (§4.2-4.6) stay; subscribers still verify what they receive."""

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        if message.op == "publish":
            return None
        return super().broker_check(message, ctx)


class NoDedup(DedupWindow):
    """The core's id window with nothing remembered (the routing guard's first step, off)."""

    def seen(self, key: str, now: float) -> bool:
        return False

    def record(self, key: str, now: float) -> None:
        return None


class CountingSubscriber(EventGuardClient):
    """An eventguard subscriber that counts (instead of raising on) deliveries it refuses."""

    rejected: int = 0

    def open_event(
        self, event_id: str, routing: Any, body: bytes, meta: Any, *, now: float
    ) -> Event:
        try:
            return super().open_event(event_id, routing, body, meta, now=now)
        except InvalidToken:
            self.rejected += 1
            return Event({"refused": True}, id=event_id)


@dataclass(frozen=True, slots=True)
class CostModel:
    """Virtual service time per message at a broker (see the module docstring).

    The defaults are this implementation's own per-message costs (broker core, median, one
    core): routing an accepted publication 80 us, refusing one by a lookup (duplicate id,
    banned source) 55 us, one Ed25519 verification 110 us (the paper's ElGamal-512: 1700 us,
    Table 1). ``scale`` dilates them all alike, so that a run needs few real messages (with
    ``scale=100`` a broker routes 125 publications per virtual second); ratios, hence the
    shape of the curves, do not depend on it.
    """

    route_us: float = 80.0
    check_us: float = 55.0
    verify_us: float = 110.0
    scale: float = 100.0

    def __post_init__(self) -> None:
        vals = (self.route_us, self.check_us, self.verify_us, self.scale)
        if not all(isinstance(x, int | float) and math.isfinite(x) and x >= 0 for x in vals):
            raise ValidationError("costs and scale must be numbers >= 0")
        if self.route_us <= 0 or self.scale <= 0:
            raise ValidationError("route cost and scale must be positive")

    def verifies(self, variant: str, op: str | None) -> bool:
        return variant == "guard" or (variant == "noguard" and op != "publish")

    def publication(self, variant: str) -> float:
        """Seconds a broker spends on one accepted legitimate publication."""
        v = self.verify_us if self.verifies(variant, "publish") else 0.0
        return (self.route_us + v) * self.scale * 1e-6

    def cost(self, variant: str, op: str | None, actions: Sequence[Any]) -> float:
        drop = next((a for a in actions if isinstance(a, Drop)), None)
        verifies = self.verifies(variant, op)
        if drop is None:
            us = self.route_us + (self.verify_us if verifies else 0.0)
        elif drop.reason in _CHEAP or not verifies:
            us = self.check_us
        else:  # FORGED / UNAUTHORISED / REVOKED: the signature was checked
            us = self.check_us + self.verify_us
        return us * self.scale * 1e-6


class FloodSim(Simulator):
    """The simulator with brokers as FIFO single-server queues whose service time depends on
    what the core did with each message (:class:`CostModel`), with per-broker accounting of
    legitimate and flood messages (the first copy of an id at a broker is the legitimate one:
    on a tree it always arrives first; a replay comes later)."""

    def __init__(
        self,
        tree: Tree,
        schemes: Any,
        *,
        variant: str,
        cost: CostModel,
        window: tuple[float, float],
        seed: int,
        latency: float,
    ) -> None:
        super().__init__(SimTopology(tree, default_latency=latency), schemes, seed=seed, wire=True)
        self.variant = variant
        self.cost_model = cost
        self.window = window
        self._waiting: dict[str, deque[tuple[str, Any]]] = {b: deque() for b in self.brokers}
        self._busy: set[str] = set()
        self._seen: dict[str, set[str]] = {b: set() for b in self.brokers}
        self._arrived: dict[str, set[str]] = {b: set() for b in self.brokers}
        self.arrivals: Counter[tuple[str, bool]] = Counter()  # (broker, flood) in the window
        self.busy: dict[tuple[str, bool], float] = defaultdict(float)  # busy seconds
        self.served: Counter[tuple[str, bool]] = Counter()
        self.flood_handled: Counter[str] = Counter()  # over the whole run
        self.captured: dict[str, dict[str, Any]] = {}  # attacker -> last publication routed
        self.drop_reasons: Counter[str] = Counter()

    def run(self, until: float | None = None) -> int:
        n = 0
        q = self._queue
        while q and (until is None or q[0][0] <= until):
            t, _, dst, src, payload = heapq.heappop(q)
            self.now = max(self.now, t)
            if dst not in self.brokers:
                self._at_client(self.clients[dst], payload, t)
            elif src == _DONE:
                self._busy.discard(dst)
                if self._waiting[dst]:
                    self._serve(dst, *self._waiting[dst].popleft(), t)
            else:
                self._arrive(dst, payload, t)
                if dst in self._busy:
                    self._waiting[dst].append((src, payload))
                else:
                    self._serve(dst, src, payload, t)
            n += 1
        if until is not None:
            self.now = max(self.now, until)
        self.processed += n
        return n

    def _classify(self, seen: set[str], raw: Any) -> tuple[str | None, bool]:
        op, eid = _op_and_id(raw)
        if op != "publish" or eid is None:
            return op, False
        flood = eid.startswith(FLOOD_PREFIX) or eid in seen
        seen.add(eid)
        return op, flood

    def _arrive(self, bid: str, payload: Any, t: float) -> None:
        _, flood = self._classify(self._arrived[bid], _unwrap(payload))
        if self.window[0] <= t < self.window[1]:
            self.arrivals[(bid, flood)] += 1

    def _serve(self, bid: str, src: str, payload: Any, t: float) -> None:
        raw = _unwrap(payload)
        op, flood = self._classify(self._seen[bid], raw)
        if op == "publish" and not flood and bid in self.captured and isinstance(raw, dict):
            self.captured[bid] = raw  # what a malicious broker replays and tampers with
        actions = self.brokers[bid].handle(raw, src, t)
        dt = self.cost_model.cost(self.variant, op, actions)
        for a in actions:
            if isinstance(a, Drop):
                self.drop_reasons[a.reason.value] += 1
        if flood:
            self.flood_handled[bid] += 1
        lo, hi = self.window
        if lo <= t < hi:
            self.busy[(bid, flood)] += min(dt, hi - t)
            self.served[(bid, flood)] += 1
        self._busy.add(bid)
        self._enqueue_actions(bid, actions, t + dt)
        self._schedule(t + dt, bid, _DONE, None, fifo=False)


def _unwrap(payload: Any) -> Any:
    return payload[1] if isinstance(payload, tuple) and payload[:1] == ("raw",) else payload


def _op_and_id(raw: Any) -> tuple[str | None, str | None]:
    if isinstance(raw, dict):
        op, eid = raw.get("op"), raw.get("event_id")
    else:
        op, eid = getattr(raw, "op", None), getattr(raw, "event_id", None)
    return (op if isinstance(op, str) else None), (eid if isinstance(eid, str) else None)
