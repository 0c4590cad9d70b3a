"""``pubguard bench network``: maximum sustained throughput and latency of a broker tree.

Method (eventguard.txt §6.2.2): one publisher at the root of a complete binary tree, 32
subscribers spread uniformly over the leaves. The publisher protects each step's events
before the step starts and subscribers take deliveries unopened (in a deployment publishers
and subscribers are other machines; :func:`client_costs` reports what protecting and opening
cost per event), so the figures measure the broker network. It sends at a fixed rate ``q``; every
``OBSERVE_S`` we observe the number of outstanding publications at every node (each broker's
queued + unprocessed messages, and the publisher's unacknowledged ones). If at some node that
number increases for five consecutive observations (and by at least ``GROWTH_MIN`` messages
over them: a queue counts sent but unacknowledged messages, and with acknowledgements delayed
by up to ``ACK_DELAY`` that count jitters by tens of messages at a steady rate), the node is
saturated. ``q`` is doubled
until saturation, then bisected; the largest unsaturated ``q`` is ``max_throughput_eps``. The
paper ran each entity on a processor of its own; here three processes share two cores, and one
scheduling stall can make a queue grow for five observations at a rate the node sustains. So a
saturated step is run once more at the same rate, and the rate counts as saturated only if that
step saturates too (``confirm``; ``saturations_unconfirmed`` counts the steps that did not).
Latency (publish to delivery, same process clock) is measured at 80% of that rate, as p50 and
p99, plus at an idle rate for reference.
On a shared 2-core machine one search swings by up to 2x between runs of the same code
(three processes compete for two cores); ``--repeat N`` runs N searches per configuration,
alternating the profile's and plain's, and reports the median with every run's figure.

Each subscriber ``j`` subscribes to ``topic = "s<j>"`` and every event carries one random
topic, so each event is routed to exactly one of the 32 subscribers (content-based routing
with fan-out one); the payload is ``--payload`` bytes. With ``attribute="numeric"``
(``--attribute numeric``; psguard.txt §5.2.3 measured topic and numeric attributes) subscriber
``j`` holds the range ``n in [8j, 8j + 7]`` and every event a random ``n`` of one range, routed
by psguard and default on tokenized key-tree node ids; eventguard and narada route on topics
only. Everything runs on this machine's
cores: brokers are separate processes (or in-process with ``in_process``), the publisher runs
in the bench process and the subscribers in one forked child process
(:mod:`~pubguard.ops.bench.subs`; before, they shared the publisher's loop, which was then the
bottleneck), so the figures are a floor for a real deployment. Latency joins the publisher's
send time and the subscriber's arrival time by event id; both read ``CLOCK_MONOTONIC``.

Security profiles: the brokers serve ``profile`` from public key
material and the clients take their keys from an in-process
:class:`~pubguard.schemes.registry.KeyBundle` (topics are PSGuard topic-kind attributes,
EventGuard topics with advertisements, Narada KMC topics). A non-plain profile is run beside
plain in the same invocation (``throughput_ratio``, ``latency_p50_ratio``). The signing
profiles (eventguard, default, psguard) are measured twice: one signature per publication
(faithful to the papers) and Merkle batches (one signature over ``merkle_batch``
publications, ``--merkle-batch``, default ``MERKLE_BATCH``, verified once per batch per
broker); the default profile's headline is its
Merkle form (its design signs batches), the others' the single-signed one; psguard also runs
``psguard-paper`` (psguard.txt §2's honest-but-curious brokers, which verify nothing), the
configuration the paper's 2.2% was measured in. Every other run is in ``variants`` with its
own ratios. Because wall-clock throughput on a shared machine swings by several times, each
run also reports ``broker_cpu_us_per_event``: the broker processes' CPU time
(``/proc/<pid>/stat``) per publication at a fixed offered rate (``CPU_RATE``, or 80% of the
run's maximum if lower), and ``broker_cpu_ratio`` against plain's. :func:`validation_cost`
times a broker's per-message work (decode + guards) in process, which is what narada's
Table 2 broker cost and EventGuard's 1.7 ms verify measure; :func:`core_costs` times a whole
broker core per publication (decode, guards, matching 32 subscriptions, routing; CPU time,
in process) for plain, the profile and each Merkle batch size of ``MERKLE_BATCHES`` (and
``merkle_batch``), so the report shows how the ratio to plain moves with the batch size
(``broker_core_us``, ``broker_core_ratio``): a measure that survives a loaded machine.

Which process a publication costs what. Every step reads the CPU time of each process from
``/proc``: the brokers', the publisher's (this process, which also runs the observer; counted
from the first send, so protecting before the clock is not) and the subscriber process's.
``process_cpu_us_per_event`` gives each one's CPU per publication in the fixed-rate run (and
their ``total``; ``process_cpu_ratio`` against plain's), ``saturated_cpu_share`` each one's
share of a core while the step that saturated was sending, ``io_per_publication`` and
``saturated_io_per_publication`` the brokers' transport counters per publication in those
two steps (batches, reads, link writes and their bytes, publications per batch and per core
call: how per-batch and per-write costs were spread), and ``frame_bytes`` the packed
bytes of a publication and of its delivery: a secure publication carries its signature,
Merkle path and permit (default at Merkle 64: 779 bytes against plain's 127) to every
subscriber, which checks them itself. Brokers, publisher and subscribers share this machine's
two cores, so a search's maximum follows the three processes' total CPU per publication, not
the brokers' alone; and the saturation rules are the same for every profile (a broker
acknowledges each processed batch after its commit, whatever the profile, so a publisher
queue that grows is a broker, or a process starved of a core, falling behind). Each broker's
status, polled every ``OBSERVE_S``, once walked its whole frozen heap to count it (3 ms of
broker CPU a poll, the same microseconds added to both sides of every ratio); it is now
counted once (:mod:`pubguard.net.gc_tuning`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pubguard.model import Event
from pubguard.net.client.client import Client
from pubguard.net.config import PROFILES, ClusterConfig, tree_edges
from pubguard.ops.bench.costs import (
    ATTRIBUTES,
    MERKLE_BATCH,
    MERKLE_BATCHES,
    NUMERIC_PROFILES,
    PUBLISHER,
    SHARED_OPEN_PROFILES,
    bench_event,
    bench_filter,
    bench_type,
    client_costs,
    core_costs,
    shared_open_cost,
    validation_cost,
    validation_costs,
)
from pubguard.ops.bench.report import (
    PAPER,
    PAPER_NOTE,
    SHARED_MACHINE,
    _plan,
    _ratio,
    _report,
    goal_verdicts,
)
from pubguard.ops.bench.report import _median_run as _median_run  # tests import it from here
from pubguard.ops.bench.subs import RemoteSubscribers
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.common.merkle import MAX_BATCH
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.registry import KeyBundle
from pubguard.wire.framing import pack
from pubguard.wire.messages import publish_wire

__all__ = [
    "BROKER_COUNTS",
    "PAPER",
    "PAPER_NOTE",
    "Search",
    "check_attribute",
    "client_costs",
    "core_costs",
    "measure_network",
    "run_network_bench",
    "search_rate",
    "validation_cost",
    "validation_costs",
]

BROKER_COUNTS: Final = (1, 3, 7, 15)
SUBSCRIBERS: Final = 32
OBSERVE_S: Final = 0.1
SATURATION_RUN: Final = 5  # consecutive increases (eventguard.txt §6.2.2)
GROWTH_MIN: Final = 100  # ... adding up to at least this many messages (not ack jitter)
RUN_S: Final = 1.5
CPU_RATE: Final = 1000.0  # events/s offered while broker CPU per event is measured
CPU_S: Final = 4.0  # seconds of that run (CPU clock ticks are 10 ms)
TICK_S: Final = 0.005


def _tree(brokers: int) -> list[tuple[str, str]]:
    depth = {1: 0, 3: 1, 7: 2, 15: 3, 31: 4}.get(brokers)
    if depth is None:
        raise ValueError("brokers must be 1, 3, 7, 15 or 31 (a complete binary tree)")
    return tree_edges(2, depth)


class _Sink:
    """Delivery latencies: send time by event id (publisher, this process), arrival time by
    event id (the subscriber process, :mod:`~pubguard.ops.bench.subs`), joined per step."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.sent: dict[str, float] = {}
        self.count = 0
        self.recording = False

    def join(self, arrivals: list[tuple[str, float]]) -> None:
        sent = self.sent
        for eid, t in arrivals:
            t0 = sent.get(eid)
            if t0 is not None:
                self.lat.append(t - t0)


class _Unopened:
    """A subscriber's scheme that subscribes with real keys but hands deliveries over
    unopened (the bench times the network; :func:`client_costs` times opening)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.profile = inner.profile

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def open_event(
        self, event_id: str, routing: Any, body: bytes, meta: Any, *, now: float
    ) -> Event:
        # a placeholder carrying only the id (the latency join needs it), copied from a
        # checked template: the subscriber process does not time Event validation either
        e = object.__new__(Event)
        for name in _EVENT_SLOTS:
            object.__setattr__(e, name, getattr(_PLACEHOLDER, name))
        object.__setattr__(e, "id", event_id)
        return e


_PLACEHOLDER: Final = Event({"n": 0})
_EVENT_SLOTS: Final = ("attrs", "id", "type", "payload", "_frozen")


class _Net:
    def __init__(
        self,
        cluster: LocalCluster,
        pub: Client,
        subs: RemoteSubscribers,
        sink: _Sink,
        attribute: str = "topic",
    ) -> None:
        self.cluster, self.pub, self.subs, self.sink = cluster, pub, subs, sink
        self.attribute = attribute  # what the subscriptions and events route on
        self.why = ""  # what declared the last saturated run saturated
        self.sent = 0  # publications the last step sent
        #: the processes whose CPU is counted per role (None: brokers run in this process)
        self.pids: dict[str, list[int]] | None = None
        #: the last step's CPU share of a core per role while it was sending (what was busy)
        self.util: dict[str, float] = {}
        #: the last step's CPU microseconds per publication per role, from the first send to
        #: the last delivery (the publisher's protecting before the clock is not counted)
        self.cpu_us: dict[str, float] = {}
        self.frame_bytes: dict[str, int] = {}  # a publication's and a delivery's message bytes
        #: the last step's broker I/O per publication (``_io_per_publication``)
        self.io: dict[str, float] = {}


async def _setup(
    cluster: LocalCluster, sink: _Sink, n_subs: int, profile: str, attribute: str = "topic"
) -> _Net:
    leaves = [b for b in cluster.config.brokers if not cluster.config.children_of(b)]
    topics = tuple(f"s{j}" for j in range(n_subs))
    specs = []
    for j in range(n_subs):
        name = f"bench-sub{j}"
        inner = (
            PlainScheme()
            if profile == "plain"
            else cluster.bundle.client(profile, name, topics=(topics[j],))
        )
        specs.append((leaves[j % len(leaves)], name, bench_filter(attribute, j), _Unopened(inner)))
    subs = RemoteSubscribers(cluster, specs)
    await subs.start()  # the subscribers run in a process of their own
    try:
        pub = await cluster.connect(
            cluster.config.root, PUBLISHER, window=4096, profile=profile, topics=topics
        )
        if profile == "eventguard":  # eventguard.txt §4.3: advertise before publishing
            for t in topics:
                await pub.advertise(f'topic = "{t}"')
            await pub.flush()
        await cluster.wait_quiescent()
        st = await cluster.statuses()
    except BaseException:
        await subs.close()
        raise
    net = _Net(cluster, pub, subs, sink, attribute)
    brokers = [int(v["pid"]) for v in st.values()]
    if brokers and os.getpid() not in brokers and os.path.exists(f"/proc/{brokers[0]}/stat"):
        net.pids = {"brokers": brokers, "subscribers": [subs.pid]}
    return net


def _cpu_by_role(net: _Net) -> dict[str, float] | None:
    """CPU seconds so far of the brokers, the publisher (this process: it also runs the
    observer) and the subscriber process; None with in-process brokers."""
    if net.pids is None:
        return None
    t = os.times()
    out = {role: sum(_proc_cpu_s(p) for p in pids) for role, pids in net.pids.items()}
    out["publisher"] = t.user + t.system
    return out


#: the brokers' transport counters (``status()["transport"]``, ``net/server``) a step reports
#: per publication: batches (one SQLite transaction, one ack, one write per link with frames
#: due), chunks of reliable messages read, link writes (a TLS record or more and a send
#: each) and the bytes they carried
IO_COUNTERS: Final = ("batches", "reads", "link_writes", "link_write_bytes")


def _transport(st: dict[str, Any]) -> Counter[str]:
    """The brokers' transport counters, summed."""
    out: Counter[str] = Counter()
    for s in st.values():
        out.update({k: v for k, v in (s.get("transport") or {}).items() if type(v) is int})
    return out


def _io_per_publication(t0: Counter[str], t1: Counter[str], sent: int) -> dict[str, float]:
    """Broker I/O per publication between two readings of :func:`_transport`, and the
    messages per core call (``Broker.handle_batch``: what per-call costs are spread over)."""
    d = t1 - t0
    n = max(1, sent)
    out = {k: round(d[k] / n, 3) for k in IO_COUNTERS}
    if d["core_calls"]:
        out["messages_per_core_call"] = round(d["core_messages"] / d["core_calls"], 1)
    if d["batches"]:
        out["messages_per_batch"] = round(d["core_messages"] / d["batches"], 1)
    return out


def _frame_bytes(pe: Any, profile: str) -> dict[str, int]:
    """The packed message bytes of publication ``pe`` as the publisher sends it and as a
    subscriber receives it (a delivery carries the publication's fields, signature, Merkle
    path and permit included, under one subscription id of the bench's length)."""
    w = publish_wire(pe.event_id, profile, pe.routing, pe.body, pe.meta)
    fields = {k: v for k, v in w.items() if k != "op"}
    deliver = {"op": "deliver", "sub_ids": ["s1-00000000"], "event": fields}
    return {"publish": len(pack(w)), "deliver": len(pack(deliver))}


async def _run_at(
    net: _Net,
    rate: float,
    payload: int,
    seconds: float,
    rng: random.Random,
    record: bool = False,
    batch: int = 1,
) -> bool:
    """Publish at ``rate`` for ``seconds``; True if some node saturated (what did: ``net.why``)."""
    net.why = ""
    n_subs = len(net.subs.specs)
    # the publisher protects this step's events before the clock starts (publishers are
    # other machines in a deployment; client_costs() reports what protecting costs)
    todo = [
        bench_event(net.attribute, rng.randrange(n_subs), rng, payload)
        for _ in range(int(rate * seconds) + 1)
    ]
    protect = net.pub.scheme.protect_events if net.pub.scheme.merkle_batches else None
    pes: list[Any] = []
    for i in range(0, len(todo), batch):
        chunk = todo[i : i + batch]
        if batch > 1 and protect is not None:
            pes += protect(chunk, now=time.time())
        else:
            pes += [net.pub.scheme.protect_event(e, now=time.time()) for e in chunk]
    pool = iter(pes)
    if pes and not net.frame_bytes:
        net.frame_bytes = _frame_bytes(pes[0], net.pub.scheme.profile)
    # the pre-protected events stand for what another machine would send: move them out of
    # the cyclic collector's reach, so its full collections (which grow with the live heap:
    # secure events are several objects each) do not pause the publisher mid-run
    gc.collect()
    gc.freeze()
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
                if (
                    len(tail) == SATURATION_RUN + 1
                    and all(a < b for a, b in zip(tail, tail[1:], strict=False))
                    and tail[-1] - tail[0] >= GROWTH_MIN
                ):
                    saturated = True
                    net.why = net.why or f"queue of {node} grew {SATURATION_RUN} times"

    await net.subs.begin()
    io0 = _transport(await net.cluster.statuses())
    c0 = _cpu_by_role(net)
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
                pe = next(pool, None)
                if pe is None:
                    break
                net.sink.sent[pe.event_id] = time.perf_counter()
                await net.pub.publish_protected(pe)
                sent += 1
                if sent % 64 == 0:
                    await asyncio.sleep(0)  # let the observer and the subscribers run
            if (time.perf_counter() - t0) * rate - sent > rate * 0.5:
                saturated = True  # the publisher cannot even submit at this rate
                net.why = net.why or "publisher fell behind the offered rate"
            await asyncio.sleep(TICK_S)
        t_end = time.perf_counter()
        c_end = _cpu_by_role(net)
        with contextlib.suppress(TimeoutError):
            await net.pub.flush(timeout=30)
        await net.cluster.wait_quiescent(timeout=60)
        net.sink.join(await net.subs.collect(sent, timeout=10))
        net.sink.count += net.subs.count
        c_done = _cpu_by_role(net)
        net.io = _io_per_publication(io0, _transport(await net.cluster.statuses()), sent)
        if c0 is not None and c_end is not None and c_done is not None:
            wall = max(t_end - t0, 1e-3)
            net.util = {r: round((c_end[r] - c0[r]) / wall, 2) for r in c0}
            net.cpu_us = {r: round((c_done[r] - c0[r]) / max(1, sent) * 1e6, 1) for r in c0}
            net.cpu_us["total"] = round(sum(net.cpu_us.values()), 1)
        # a backlog that takes longer than five observation periods to drain was growing
        drain = time.perf_counter() - t_end
        if drain > SATURATION_RUN * OBSERVE_S + 0.1:
            saturated = True
            net.why = net.why or f"backlog took {drain:.2f} s to drain"
        if _growing(net.sink.lat):
            saturated = True  # queueing delay rose over six consecutive windows
            net.why = net.why or "latency rose over six consecutive windows"
    finally:
        gc.unfreeze()
        stop = True
        obs_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await obs_task
        net.sink.recording = False
        net.sink.sent.clear()
        if not record:
            net.sink.lat.clear()
    net.sent = sent
    return saturated


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat``, Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _broker_cpu_per_event(
    net: _Net, rate: float, payload: int, seconds: float, rng: random.Random, batch: int
) -> float | None:
    """CPU microseconds the broker processes spend per publication at a fixed offered
    ``rate`` (below saturation): a figure that survives the machine's load far better than
    wall-clock throughput. None for in-process brokers or without ``/proc``.

    Counted from the first send to the last delivery (``_Net.cpu_us``), not from before the
    publisher protects the step's events: an idle broker still spends about 1 % of a core
    (heartbeats, its timers), and a profile that signs each publication protects for longer
    (psguard's signed records: about 150 us an event, 12 s before a 4 s step at 20,000
    events/s), so counting that wait billed it 1-2 us of idle broker CPU per publication
    that plain, which protects nothing, was not."""
    if net.pids is None:
        return None
    await _run_at(net, rate, payload, seconds, rng, batch=batch)
    return net.cpu_us.get("brokers")


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


@dataclass(frozen=True, slots=True)
class Search:
    """What :func:`search_rate` found: the largest rate that did not saturate (0: none did),
    the lowest that did (None: none up to ``max_rate``) and the saturated steps a second step
    at the same rate did not confirm."""

    good: float
    bad: float | None
    unconfirmed: int


async def search_rate(
    step: Callable[[float, bool], Awaitable[bool]],
    *,
    max_rate: float,
    bisections: int,
    confirm: bool = True,
    start: float = 1000.0,
) -> Search:
    """eventguard.txt §6.2.2's search for the maximum throughput: ``step(q, again)`` runs one
    step at rate ``q`` and says whether some node saturated (``again``: it repeats a
    saturated step). The rate doubles from ``start`` until a step saturates, then
    ``bisections`` bisections narrow it. With ``confirm`` a saturated step is run once more,
    and the rate counts as saturated only if that step saturates too: the paper gave every
    entity a processor, and on a shared machine one scheduling stall can make a queue grow
    for five observations at a rate the node sustains (a real overload saturates both)."""
    unconfirmed = 0

    async def saturates(q: float) -> bool:
        nonlocal unconfirmed
        if not await step(q, False):
            return False
        if not confirm or await step(q, True):
            return True
        unconfirmed += 1
        return False

    good, bad, rate = 0.0, None, start
    while bad is None and rate <= max_rate:  # doubling phase
        if await saturates(rate):
            bad = rate
        else:
            good, rate = rate, rate * 2
    hi = bad if bad is not None else max_rate
    for _ in range(bisections):
        if good >= hi:  # max_rate reached unsaturated: nothing left to bisect
            break
        mid = (good + hi) / 2
        if await saturates(mid):
            hi = bad = mid
        else:
            good = mid
    return Search(good, bad, unconfirmed)


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
    batch: int = 1,
    run_s: float = RUN_S,
    bisections: int = 4,
    cpu_rate: float | None = CPU_RATE,
    attribute: str = "topic",
    confirm: bool = True,
) -> dict[str, Any]:
    """Max sustained throughput and latency for one (profile, tree size, payload); ``batch``:
    publications per signature (Merkle batches) for profiles that sign batches;
    ``attribute``: what subscriptions and events route on (``topic`` or ``numeric``);
    ``confirm``: a saturated step counts only if a second step at its rate saturates too."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}")
    check_attribute(profile, attribute)
    edges = _tree(brokers)
    names = ["b0"] + [c for _, c in edges]
    cfg = ClusterConfig(
        state_dir,
        tuple(edges),
        tuple(names),
        "127.0.0.1",
        {"profiles": [profile]},
        publishers=(PUBLISHER,),
    )
    bundle = None
    if profile != "plain":
        bundle = KeyBundle(
            state_dir / "keys",
            now=time.time(),
            types=(bench_type(attribute),),
            identities=(PUBLISHER,),
            rng=random.Random(seed),
        )
    cluster = LocalCluster(cfg, in_process=in_process, bundle=bundle)
    rng = random.Random(seed)
    sink = _Sink()
    clients: list[Client] = []
    net: _Net | None = None
    try:
        await cluster.start()
        net = await _setup(cluster, sink, subscribers, profile, attribute)
        clients = [net.pub]
        say = on_step or (lambda s: None)
        run = profile if batch == 1 else f"{profile} (Merkle root per {batch})"
        why = ""  # what saturated the lowest saturated rate
        busy: dict[str, float] = {}  # each process's share of a core in that run
        sat_io: dict[str, float] = {}  # the brokers' I/O per publication in that run

        async def step(q: float, again: bool) -> bool:
            nonlocal why, busy, sat_io
            assert net is not None
            note = f" again ({net.why})" if again else ""
            say(f"{run}: {brokers} brokers, {payload} B: {q:.0f} ev/s{note}")
            if not await _run_at(net, q, payload, run_s, rng, batch=batch):
                return False
            if again or not confirm:  # a saturated rate: the search's last is its lowest
                why, busy, sat_io = net.why, net.util, net.io
            return True

        found = await search_rate(step, max_rate=max_rate, bisections=bisections, confirm=confirm)
        good = found.good
        await _run_at(
            net, max(good * 0.8, 10), payload, run_s * 4 / 3, rng, record=True, batch=batch
        )
        lat = sorted(sink.lat)
        await _run_at(net, 100, payload, run_s * 2 / 3, rng, record=True, batch=batch)
        idle = sorted(sink.lat)
        cpu = None
        procs: dict[str, float] = {}
        fixed_io: dict[str, float] = {}
        if cpu_rate:
            cpu = await _broker_cpu_per_event(
                net, min(cpu_rate, max(good * 0.8, 10)), payload, CPU_S, rng, batch
            )
            procs = net.cpu_us
            fixed_io = net.io
        drops = await cluster.statuses()
        frames = net.frame_bytes
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                await c.close()
        if net is not None:
            await net.subs.close()
        await cluster.stop()
    return {
        "profile": profile,
        "attribute": attribute,
        "brokers": brokers,
        "payload": payload,
        "subscribers": subscribers,
        "max_throughput_eps": round(good, 1),
        "latency_p50_ms": _pct(lat, 0.50),
        "latency_p99_ms": _pct(lat, 0.99),
        "latency_idle_p50_ms": _pct(idle, 0.50),
        "latency_samples": len(lat),
        "in_process": in_process,
        "drops": {n: st["drops"] for n, st in drops.items() if st["drops"]},
        "broker_cpu_us_per_event": cpu,
        "process_cpu_us_per_event": procs or None,
        "frame_bytes": frames or None,
        "saturated_by": why or None,
        "saturations_unconfirmed": found.unconfirmed,
        "saturated_cpu_share": busy or None,
        "io_per_publication": fixed_io or None,
        "saturated_io_per_publication": sat_io or None,
    }


def check_attribute(profile: str, attribute: str) -> None:
    """ValueError unless ``profile`` routes on ``attribute`` (eventguard's tokens ``T(w)`` and
    narada's topics are equality-only: no numeric ranges)."""
    if attribute not in ATTRIBUTES:
        raise ValueError(f"attribute is one of {', '.join(ATTRIBUTES)}, not {attribute!r}")
    if attribute == "numeric" and profile not in NUMERIC_PROFILES:
        raise ValueError(
            f"{profile} routes on topics only; numeric ranges: {', '.join(NUMERIC_PROFILES)}"
        )


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
    validation_messages: int = 300,
    quick: bool = False,
    repeat: int = 1,
    merkle_batch: int = MERKLE_BATCH,
    attribute: str = "topic",
    on_searches: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Every (brokers, payload) combination; a non-plain profile also runs plain for ratios,
    the signing profiles also with Merkle batches, and every secure profile reports its
    per-message broker validation time. ``repeat``: run each search that many times and
    report the run with the median ``max_throughput_eps`` (all of them in
    ``max_throughput_runs_eps``); the profile's and plain's searches alternate, so a change in
    the machine's load falls on both sides of a ratio. ``merkle_batch``: publications under
    one signature in the Merkle runs (2..``MAX_BATCH``). ``attribute``: ``topic`` (every
    profile) or ``numeric`` (plain, psguard, default: psguard.txt §5.2.3 measured both).
    ``on_step`` hears each step (a rate tried, a cost probe); ``on_searches`` hears
    ``(searches done, searches in all)`` before the first search and after each one. Each
    report carries ``goals``: every goal of the profile, met or missed
    (:func:`~pubguard.ops.bench.report.goal_verdicts`)."""
    check_attribute(profile, attribute)
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    if not 2 <= merkle_batch <= MAX_BATCH:
        raise ValueError(f"merkle_batch must be 2..{MAX_BATCH}")
    out = []
    say = on_step or (lambda s: None)
    searches = len(brokers) * len(payloads) * len(_plan(profile, merkle_batch)) * repeat
    done = 0
    if on_searches is not None:
        on_searches(done, searches)
    valid: dict[str, Any] = {}
    clients: dict[str, Any] = {}
    shared: dict[str, float] = {}
    if profile != "plain":
        say(f"{profile}: broker validation and client costs per message")
        batches = tuple(sorted({*MERKLE_BATCHES, merkle_batch}))
        valid = validation_costs(
            profile,
            30 if quick else validation_messages,
            merkle_batches=batches,
            attribute=attribute,
        )
        say(f"{profile}: broker core CPU per publication (plain alongside)")
        core = core_costs(
            profile, 48 if quick else 768, merkle_batches=batches, attribute=attribute
        )
        clients = client_costs(profile, 30 if quick else 200, attribute=attribute)
        if profile in SHARED_OPEN_PROFILES:
            say(f"{profile}: opening in one process of {subscribers} subscribers")
            shared = shared_open_cost(
                profile,
                subscribers,
                batch=merkle_batch,
                batches=1 if quick else 4,
                attribute=attribute,
            )
    knobs: dict[str, Any] = (
        {"max_rate": 2000, "run_s": 0.3, "bisections": 1, "cpu_rate": None, "confirm": False}
        if quick
        else {}
    )
    with tempfile.TemporaryDirectory(prefix="pubguard-bench-") as tmp:
        for n in brokers:
            for size in payloads:

                def run(prof: str, tag: str, batch: int = 1, n: int = n, size: int = size) -> Any:
                    return measure_network(
                        prof,
                        n,
                        size,
                        state_dir=Path(tmp) / f"{tag}-{n}-{size}",
                        in_process=in_process,
                        subscribers=subscribers,
                        on_step=lambda s: say(f"[{tag}] {s}"),
                        batch=batch,
                        attribute=attribute,
                        **knobs,
                    )

                series: dict[str, list[dict[str, Any]]] = {}
                plan = _plan(profile, merkle_batch)
                for i in range(repeat):  # interleaved: profile, plain, merkle, profile, ...
                    for prof, tag, batch in plan:
                        suffix = f"-r{i}" if repeat > 1 else ""
                        series.setdefault(tag, []).append(await run(prof, tag + suffix, batch))
                        done += 1
                        if on_searches is not None:
                            on_searches(done, searches)
                r = _report(profile, series, merkle_batch)
                if profile != "plain":
                    r["broker_validation_us"] = valid
                    r["broker_core_us"] = core
                    r["broker_core_ratio"] = {
                        k: _ratio(v, core["plain"]) for k, v in core.items() if k != "plain"
                    }
                    r["client_cost_us"] = clients
                    if shared:
                        r["subscriber_process_open"] = {
                            "subscribers": subscribers,
                            "merkle_batch": merkle_batch,
                            **shared,
                        }
                r.update(PAPER[profile])
                r["goals"] = goal_verdicts(profile, r)
                r["machine"] = SHARED_MACHINE
                out.append(r)
    return out
