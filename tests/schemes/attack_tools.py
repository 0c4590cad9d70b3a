"""Helpers for the eventguard / narada attack tests: a tap that records every message a broker
core handles in the simulator (and what it sends), and wire scanning for canaries."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from pubguard.broker import Broker, DeliverTo, Drop, Forward, Reply
from pubguard.sim.engine import Simulator


@dataclass
class Tap:
    """(broker, from_link, wire dict) for every message handled, and every message sent."""

    handled: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    sent: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    drops: list[tuple[str, Drop]] = field(default_factory=list)

    def wires(self) -> Iterator[bytes]:
        for _, _, w in self.handled + self.sent:
            yield msgpack.packb(w, use_bin_type=True)

    def handled_at(self, broker: str, since: int = 0) -> list[dict[str, Any]]:
        return [w for b, _, w in self.handled[since:] if b == broker]

    def drops_at(self, broker: str, since: int = 0) -> list[Drop]:
        return [d for b, d in self.drops[since:] if b == broker]


def _wire(m: Any) -> dict[str, Any]:
    return m if isinstance(m, dict) else m.to_wire()


def tap(sim: Simulator) -> Tap:
    """Wrap each broker's ``handle`` so every message in and out is recorded."""
    t = Tap()
    for bid, broker in sim.brokers.items():
        inner = broker.handle

        def handle(
            message: Any, from_link: str, now: float, *, _b: str = bid, _inner: Any = inner
        ) -> list[Any]:
            t.handled.append((_b, from_link, _wire(message)))
            actions = _inner(message, from_link, now)
            for a in actions:
                if isinstance(a, Forward | DeliverTo | Reply):
                    t.sent.append((_b, a.link, _wire(a.message)))
                elif isinstance(a, Drop):
                    t.drops.append((_b, a))
            return actions

        broker.handle = handle  # type: ignore[method-assign]
    return t


def scan(t: Tap, needle: bytes) -> int:
    """How many broker-visible messages contain ``needle`` anywhere in their wire bytes."""
    return sum(needle in w for w in t.wires())


def neighbours(sim: Simulator, broker: str) -> set[str]:
    b: Broker = sim.brokers[broker]
    return {lk for lk, info in b.links.items() if lk in sim.brokers}
