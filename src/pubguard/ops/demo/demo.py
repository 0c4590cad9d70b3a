"""Network scenarios: the secure hospital behind ``make demo`` and the stock-quote market.

:func:`hospital_demo` (in :mod:`pubguard.ops.demo.hospital`) is the secure
multi-domain scenario. :func:`network_demo` starts the embedded 7-broker tree (real processes with mutual TLS, or
in-process brokers), attaches traders (subscribers with quote filters) at the leaves and two
exchanges (publishers) at the root and at a leaf, publishes a seeded stream of quotes, waits
until the network is quiescent, and reports who received what, checked against the reference
matcher. Every broker is torn down at the end, whatever happens.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pubguard.matching.reference import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.net.client.client import Client, Subscription
from pubguard.ops.cluster import run_local_cluster
from pubguard.ops.demo.hospital import hospital_demo

__all__ = ["TRADERS", "NetworkDemoResult", "hospital_demo", "network_demo"]

SYMBOLS: Final = ("IBM", "HPQ", "ORCL", "SUNW", "DELL", "MSFT")
TRADERS: Final = (  # (name, broker, filter)
    ("alice", "b3", 'sym = "IBM" && price > 100'),
    ("bob", "b4", 'sym = "IBM"'),
    ("carol", "b5", "price < 20"),
    ("dave", "b6", 'sym prefix "S" && volume >= 5000'),
    ("erin", "b3", 'sym = "MSFT" && price >= 50 && price <= 60'),
    ("frank", "b6", "volume > 9000"),
    ("grace", "b1", 'sym != "IBM" && price > 150'),
    ("heidi", "b2", 'sym = "ORCL"'),
)
EXCHANGES: Final = (("nyse", "b0"), ("nasdaq", "b5"))


@dataclass
class NetworkDemoResult:
    brokers: int
    events: int
    received: dict[str, list[str]] = field(default_factory=dict)  # trader -> event ids
    expected: dict[str, list[str]] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return all(sorted(self.received[t]) == sorted(self.expected[t]) for t in self.expected)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokers": self.brokers,
            "events": self.events,
            "correct": self.correct,
            "received": {t: len(v) for t, v in self.received.items()},
            "expected": {t: len(v) for t, v in self.expected.items()},
            "forwarded": {b: s["forwarded"] for b, s in self.statuses.items()},
            "drops": {b: s["drops"] for b, s in self.statuses.items()},
        }


def _quote(rng: random.Random, i: int) -> Event:
    sym = rng.choice(SYMBOLS)
    price = round(rng.uniform(5, 200), 2)
    return Event(
        {"sym": sym, "price": price, "volume": rng.randrange(100, 10_000)},
        id=f"q{i}",
        type="quote",
        payload=f"{sym}@{price}".encode(),
    )


async def network_demo(
    state_dir: Path | None = None,
    *,
    events: int = 300,
    seed: int = 2024,
    in_process: bool = False,
    say: Callable[[str], None] | None = None,
) -> NetworkDemoResult:
    """Run the scenario; ``state_dir`` defaults to a temporary folder removed afterwards."""
    say = say or (lambda s: None)
    if state_dir is None:
        with tempfile.TemporaryDirectory(prefix="pubguard-demo-") as tmp:
            return await _run(Path(tmp), events, seed, in_process, say)
    return await _run(state_dir, events, seed, in_process, say)


async def _run(
    state: Path, events: int, seed: int, in_process: bool, say: Callable[[str], None]
) -> NetworkDemoResult:
    rng = random.Random(seed)
    ref = ReferenceMatcher()
    async with run_local_cluster(None, state, in_process=in_process) as cluster:
        say(f"{len(cluster.config.brokers)} brokers up (mutual TLS, CA in {state / 'pki'})")
        clients: list[Client] = []
        subs: dict[str, Subscription] = {}
        try:
            for name, broker, text in TRADERS:
                c = await cluster.connect(broker, name)
                clients.append(c)
                subs[name] = await c.subscribe(text)
                await c.flush()
                ref.add(name, Filter.parse(text))
                say(f"{name} subscribed at {broker}: {text}")
            await cluster.wait_quiescent()
            pubs = [await cluster.connect(b, n) for n, b in EXCHANGES]
            clients += pubs
            result = NetworkDemoResult(len(cluster.config.brokers), events)
            result.expected = {name: [] for name, _, _ in TRADERS}
            for i in range(events):
                ev = _quote(rng, i)
                await pubs[i % len(pubs)].publish(ev)
                for t in ref.match(ev):
                    result.expected[str(t)].append(str(ev.id))
            for p in pubs:
                await p.flush()
            say(f"{events} quotes published by {', '.join(n for n, _ in EXCHANGES)}")
            await cluster.wait_quiescent()
            for name, sub in subs.items():
                got = []
                while sub.pending:
                    got.append(str((await sub.next(timeout=1)).event.id))
                result.received[name] = got
            result.statuses = await cluster.statuses()
            return result
        finally:
            for c in clients:
                await c.close()
