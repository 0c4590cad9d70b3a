"""``pubguard bench network``: maximum sustained throughput and latency of a broker tree.

Method (eventguard.txt §6.2.2): one publisher at the root of a complete binary tree, 32
subscribers spread uniformly over the leaves. The publisher sends at a fixed rate ``q``; every
``OBSERVE_S`` we observe the number of outstanding publications at every node (each broker's
queued + unprocessed messages, and the publisher's unacknowledged ones). If at some node that
number increases for five consecutive observations, the node is saturated. ``q`` is doubled
until saturation, then bisected; the largest unsaturated ``q`` is ``max_throughput_eps``.
Latency (publish to delivery, same process clock) is measured at 80% of that rate, as p50 and
p99, plus at an idle rate for reference.

Each subscriber ``j`` subscribes to ``sym = "s<j>"`` and every event carries one random
symbol, so each event is routed to exactly one of the 32 subscribers (content-based routing
with fan-out one); the payload is ``--payload`` bytes. Everything runs on this machine's
cores: brokers are separate processes (or in-process with ``in_process``) and the publisher
and subscribers share the bench process, so the figures are a floor for a real deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pubguard.model import Event
from pubguard.net.client import Client, Delivery
from pubguard.net.cluster import LocalCluster
from pubguard.net.config import PROFILES, ClusterConfig, tree_edges

__all__ = ["BROKER_COUNTS", "PAPER_NOTE", "measure_network", "run_network_bench"]

BROKER_COUNTS: Final = (1, 3, 7, 15)
SUBSCRIBERS: Final = 32
OBSERVE_S: Final = 0.1
SATURATION_RUN: Final = 5  # consecutive increases (eventguard.txt §6.2.2)
RUN_S: Final = 1.5
TICK_S: Final = 0.005
PAPER_NOTE: Final = (
    "EventGuard Fig. 11 (Siena, 550 MHz PIII, LAN): plain throughput grows with nodes until "
    "subscribers are spread thin; Narada secure 16 KB latency on a LAN: 64.5 ms"
)


def _tree(brokers: int) -> list[tuple[str, str]]:
    depth = {1: 0, 3: 1, 7: 2, 15: 3, 31: 4}.get(brokers)
    if depth is None:
        raise ValueError("brokers must be 1, 3, 7, 15 or 31 (a complete binary tree)")
    return tree_edges(2, depth)


class _Sink:
    """Collects delivery latencies (publish stamp carried in the first 8 payload bytes)."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.count = 0
        self.recording = False

    def __call__(self, d: Delivery) -> None:
        self.count += 1
        if self.recording and len(d.event.payload) >= 8:
            (t0,) = struct.unpack_from(">d", d.event.payload)
            self.lat.append(time.perf_counter() - t0)


class _Net:
    def __init__(self, cluster: LocalCluster, pub: Client, subs: list[Client], sink: _Sink) -> None:
        self.cluster, self.pub, self.subs, self.sink = cluster, pub, subs, sink


async def _setup(cluster: LocalCluster, sink: _Sink, n_subs: int) -> _Net:
    leaves = [b for b in cluster.config.brokers if not cluster.config.children_of(b)]
    subs = []
    for j in range(n_subs):
        c = await cluster.connect(leaves[j % len(leaves)], f"bench-sub{j}", window=8192)
        await c.subscribe(f'sym = "s{j}"', handler=sink, max_pending=1 << 20)
        subs.append(c)
    for c in subs:
        await c.flush()
    pub = await cluster.connect(cluster.config.root, "bench-pub", window=4096)
    await cluster.wait_quiescent()
    return _Net(cluster, pub, subs, sink)


async def _run_at(net: _Net, rate: float, payload: int, seconds: float, rng: random.Random,
                  record: bool = False) -> bool:  # fmt: skip
    """Publish at ``rate`` for ``seconds``; True if some node saturated."""
    pad = b"\0" * max(0, payload - 8)
    syms = [f"s{j}" for j in range(len(net.subs))]
    history: dict[str, list[int]] = {}
    saturated = False
    stop = False

    async def observe() -> None:
        nonlocal saturated
        while not stop:
            await asyncio.sleep(OBSERVE_S)
            st = await net.cluster.statuses()
            obs = {n: s["queue"] for n, s in st.items()}
            # the publisher's outstanding publications: unacknowledged plus due but not sent
            due = int(rate * (time.perf_counter() - t0)) if not stop else sent
            obs["publisher"] = len(net.pub._unacked) + max(0, due - sent)
            for node, v in obs.items():
                h = history.setdefault(node, [])
                h.append(v)
                tail = h[-(SATURATION_RUN + 1) :]
                if len(tail) == SATURATION_RUN + 1 and all(
                    a < b for a, b in zip(tail, tail[1:], strict=False)
                ):
                    saturated = True

    t0 = time.perf_counter()
    sent = 0
    obs_task = asyncio.get_running_loop().create_task(observe())
    net.sink.lat.clear()
    net.sink.recording = True
    try:
        while not saturated:
            now = time.perf_counter() - t0
            if now >= seconds:
                break
            due = int(rate * now) - sent
            for _ in range(max(0, due)):
                ev = Event({"sym": rng.choice(syms)},
                           payload=struct.pack(">d", time.perf_counter()) + pad)  # fmt: skip
                await net.pub.publish(ev)
                sent += 1
                if sent % 64 == 0:
                    await asyncio.sleep(0)  # let the observer and the subscribers run
            if (time.perf_counter() - t0) * rate - sent > rate * 0.5:
                saturated = True  # the publisher cannot even submit at this rate
            await asyncio.sleep(TICK_S)
        t_end = time.perf_counter()
        with contextlib.suppress(TimeoutError):
            await net.pub.flush(timeout=30)
        await net.cluster.wait_quiescent(timeout=60)
        # a backlog that takes longer than five observation periods to drain was growing
        if time.perf_counter() - t_end > SATURATION_RUN * OBSERVE_S + 0.1:
            saturated = True
        if _growing(net.sink.lat):
            saturated = True  # queueing delay rose over six consecutive windows
    finally:
        stop = True
        obs_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await obs_task
        net.sink.recording = False
        if not record:
            net.sink.lat.clear()
    return saturated


def _growing(lat: list[float]) -> bool:
    """Latencies (in arrival order) whose medians over six consecutive windows rise five
    times in a row and at least double: the queues in front of them were growing."""
    k = SATURATION_RUN + 1
    if len(lat) < 10 * k:
        return False
    n = len(lat) // k
    meds = [statistics.median(lat[i * n : (i + 1) * n]) for i in range(k)]
    return (
        all(a < b for a, b in zip(meds, meds[1:], strict=False)) and meds[-1] > 2 * meds[0] + 0.001
    )


async def measure_network(
    profile: str,
    brokers: int,
    payload: int,
    *,
    state_dir: Path,
    in_process: bool = False,
    seed: int = 1,
    max_rate: float = 200_000,
    subscribers: int = SUBSCRIBERS,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Max sustained throughput and latency for one (profile, tree size, payload)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}")
    edges = _tree(brokers)
    names = ["b0"] + [c for _, c in edges]
    cfg = ClusterConfig(state_dir, tuple(edges), tuple(names), "127.0.0.1",
                        {"profile": profile})  # fmt: skip
    cluster = LocalCluster(cfg, in_process=in_process)
    rng = random.Random(seed)
    sink = _Sink()
    clients: list[Client] = []
    try:
        await cluster.start()
        net = await _setup(cluster, sink, subscribers)
        clients = [net.pub, *net.subs]
        say = on_step or (lambda s: None)
        good, bad, rate = 0.0, None, 1000.0
        while bad is None and rate <= max_rate:  # doubling phase
            say(f"{brokers} brokers, {payload} B: {rate:.0f} ev/s")
            if await _run_at(net, rate, payload, RUN_S, rng):
                bad = rate
            else:
                good, rate = rate, rate * 2
        hi = bad if bad is not None else max_rate
        for _ in range(4):  # bisection
            mid = (good + hi) / 2
            say(f"{brokers} brokers, {payload} B: {mid:.0f} ev/s")
            if await _run_at(net, mid, payload, RUN_S, rng):
                hi = mid
            else:
                good = mid
        await _run_at(net, max(good * 0.8, 10), payload, 2.0, rng, record=True)
        lat = sorted(sink.lat)
        await _run_at(net, 100, payload, 1.0, rng, record=True)
        idle = sorted(sink.lat)
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                await c.close()
        await cluster.stop()
    return {
        "profile": profile,
        "brokers": brokers,
        "payload": payload,
        "subscribers": subscribers,
        "max_throughput_eps": round(good, 1),
        "latency_p50_ms": _pct(lat, 0.50),
        "latency_p99_ms": _pct(lat, 0.99),
        "latency_idle_p50_ms": _pct(idle, 0.50),
        "latency_samples": len(lat),
        "in_process": in_process,
    }


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return round(xs[0] * 1000, 3)
    return round(statistics.quantiles(xs, n=1000, method="inclusive")[int(q * 1000) - 1] * 1000, 3)


async def run_network_bench(
    profile: str,
    brokers: list[int],
    payloads: list[int],
    *,
    in_process: bool = False,
    subscribers: int = SUBSCRIBERS,
    on_step: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every (brokers, payload) combination; a non-plain profile also runs plain for ratios."""
    out = []
    with tempfile.TemporaryDirectory(prefix="pubguard-bench-") as tmp:
        for n in brokers:
            for size in payloads:
                r = await measure_network(profile, n, size, state_dir=Path(tmp) / f"{profile}-{n}-{size}",
                                          in_process=in_process, subscribers=subscribers,
                                          on_step=on_step)  # fmt: skip
                if profile != "plain":
                    base = await measure_network("plain", n, size,
                                                 state_dir=Path(tmp) / f"plain-{n}-{size}",
                                                 in_process=in_process, subscribers=subscribers,
                                                 on_step=on_step)  # fmt: skip
                    r["baseline_max_throughput_eps"] = base["max_throughput_eps"]
                    r["throughput_ratio"] = _ratio(
                        r["max_throughput_eps"], base["max_throughput_eps"]
                    )
                    r["latency_p50_ratio"] = _ratio(r["latency_p50_ms"], base["latency_p50_ms"])
                out.append(r)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return round(a / b, 3)
