"""Throughput and latency versus the number of brokers, one processor per entity
(eventguard.txt §6.2.2 Fig. 11/12, psguard.txt §5.2.3 Fig. 9/10).

Theory of operation
-------------------
The papers ran "each entity (publisher, subscriber, node, and MS) on a separate processor",
with the publisher at the root of a complete binary tree, 32 subscribers spread uniformly over
the leaves and simulated wide-area delays of about 70 ms per hop. This machine has two shared
cores, so the real-network bench (``bench network``) cannot show tree growth. This module is a
**measured-cost simulation** of the papers' setting: the real broker cores, schemes and client
code run on every message (wire codec on), the CPU time each call takes becomes that
processor's service time in virtual time (:mod:`pubguard.sim.scaling_sim`), and queueing, hops
and parallelism are simulated. It is not wall-clock on separate machines.

Topology: one publisher on the root broker, complete binary trees of 1, 3, 7, 15, 31 brokers,
``subscribers`` (32) spread round-robin over the leaves, ``latency`` (70 ms) on every hop,
publisher and subscriber access links included.

Workload (:class:`Workload`): ``topics`` topics with Zipf popularity (exponent ``zipf``); each
subscriber subscribes to ``per_subscriber`` distinct topics drawn by popularity, one filter
``topic = "<t>"`` each; every publication carries one topic drawn by the same popularity and a
``payload``-byte payload. So an event reaches several subscribers (``mean_fanout`` in the
result), as the papers' overlapping interests do, and the per-delivery work at the leaves is
what more brokers spread out.

Throughput (both papers' method): the publisher is offered ``q`` publications per second for
``publications`` events; every ``observe_every`` publications' worth of time the outstanding
messages of every broker and of the publisher are sampled; one that grows for five
consecutive observations is saturated and the run is aborted (subscribers are processors too,
in the latency, but as in the papers their queues do not define the throughput;
``subscriber_utilisation`` reports the busiest one at the maximum). A probe run at a low rate
gives a utilisation-law estimate (1 / the largest service time per publication at a watched
processor); ``q`` starts at 80% of it, doubles until saturation and is then bisected
``bisect`` times; the largest unsaturated ``q`` is the maximum throughput. Latency (offered -> opened at the
subscriber, all hops included) is the p50/p99 of a run at 80% of that maximum.

Profiles: ``plain`` (the baseline, run in the same process), ``psguard``, ``eventguard`` (one
Ed25519 signature per publication, verified at every broker: faithful), ``eventguard-nosig``
(the paper's EventGuard-nosig: every guard but the per-node signature check), ``default``
(one signature per publication), ``eventguard-merkle`` / ``default-merkle`` / ``psguard-merkle`` (amortised
signing: the publisher signs one Merkle root over the offered events already waiting, up to
:data:`MERKLE_BATCH`, and brokers verify each root once), ``narada`` and ``psguard-paper`` (psguard.txt §2's
honest-but-curious brokers, which match tokens and verify nothing). Keys come from one in-memory
:class:`~pubguard.schemes.registry.KeyBundle` per profile. Routing is deterministic given
``seed``; the measured costs (and hence the throughput figures) are not.
"""

from __future__ import annotations

import gc
import math
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pubguard.errors import ValidationError
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.overlay.tree import Tree, ary_tree
from pubguard.schemes.base import ClientScheme
from pubguard.schemes.registry import KeyBundle, make_broker_scheme
from pubguard.sim.scaling_sim import (
    CostModel,
    FixedCost,
    MeasuredCost,
    NoSigEventGuardBroker,
    RunStats,
    ScalingSim,
)

__all__ = [
    "BROKER_COUNTS",
    "PROFILES",
    "FixedCost",
    "MeasuredCost",
    "ProfileKit",
    "ScalingParams",
    "ScalingPoint",
    "Workload",
    "max_throughput",
    "run_once",
    "run_scaling",
]

PROFILES: Final = (
    "plain",
    "psguard",
    "psguard-merkle",
    "psguard-paper",
    "eventguard",
    "eventguard-nosig",
    "eventguard-merkle",
    "default",
    "default-merkle",
    "narada",
)
MERKLE_BATCH: Final = 16  # most publications under one signature (``*-merkle`` profiles)
_BASE: Final = {
    "eventguard-nosig": "eventguard",
    "eventguard-merkle": "eventguard",
    "default-merkle": "default",
    "psguard-merkle": "psguard",
}
BROKER_COUNTS: Final = (1, 3, 7, 15, 31)
DEPTHS: Final = {1: 0, 3: 1, 7: 2, 15: 3, 31: 4}
SCALING_TYPE: Final = EventType("scaling", (AttributeSpec("topic", "str", kind="topic"),))
PUBLISHER: Final = "pub"
T0: Final = 1_800_000_000.0  # virtual epoch (seconds): key epochs and certificates use it
SETUP_S: Final = 2.0  # subscriptions and advertisements settle before the first publication
LATENCY_LOAD: Final = 0.8  # latency is measured at 80% of the maximum throughput
MAX_DOUBLINGS: Final = 24
SATURATION_OBS: Final = 5  # eventguard.txt §6.2.2: "five consecutive observations"
START_FRACTION: Final = 0.8  # the search starts at this fraction of the probe's estimate


@dataclass(frozen=True, slots=True)
class Workload:
    """Zipf topics with overlapping subscriptions (see the module docstring)."""

    topics: int = 16
    per_subscriber: int = 3
    zipf: float = 1.0
    payload: int = 64

    def __post_init__(self) -> None:
        if not (isinstance(self.topics, int) and isinstance(self.per_subscriber, int)):
            raise ValidationError("topics and per-subscriber topics must be integers")
        if not 1 <= self.per_subscriber <= self.topics:
            raise ValidationError("each subscriber needs 1..topics topics")
        if not (isinstance(self.zipf, int | float) and self.zipf >= 0):
            raise ValidationError("the Zipf exponent must be >= 0")
        if not (isinstance(self.payload, int) and 0 <= self.payload <= 1 << 20):
            raise ValidationError("payload must be 0..1 MiB")

    def names(self) -> list[str]:
        return [f"t{k}" for k in range(self.topics)]

    def weights(self) -> list[float]:
        w = [1.0 / (k + 1) ** self.zipf for k in range(self.topics)]
        s = sum(w)
        return [x / s for x in w]

    def interests(self, subscribers: int, rng: random.Random) -> list[list[str]]:
        """Each subscriber's topics: distinct, drawn by popularity."""
        names, w = self.names(), self.weights()
        out = []
        for _ in range(subscribers):
            pool, pw, mine = list(names), list(w), []
            for _ in range(self.per_subscriber):
                i = rng.choices(range(len(pool)), weights=pw)[0]
                mine.append(pool.pop(i))
                pw.pop(i)
            out.append(sorted(mine))
        return out

    def stream(self, n: int, rng: random.Random) -> list[str]:
        return rng.choices(self.names(), weights=self.weights(), k=n)


@dataclass(frozen=True, slots=True)
class ScalingParams:
    """One experiment's inputs (virtual seconds; counts of publications)."""

    brokers: tuple[int, ...] = BROKER_COUNTS
    subscribers: int = 32
    latency: float = 0.070  # per hop, eventguard.txt §6.2.2
    publications: int = 120  # per run
    observe_every: int = 12  # publications' worth of time between observations
    bisect: int = 4
    repeat: int = 1  # searches per (profile, size); the median is reported
    workload: Workload = field(default_factory=Workload)
    cost: Any = field(default_factory=MeasuredCost)  # a CostModel
    seed: int = 1

    def __post_init__(self) -> None:
        if not self.brokers or any(b not in DEPTHS for b in self.brokers):
            raise ValidationError("brokers must be among 1, 3, 7, 15, 31 (complete binary trees)")
        if not (isinstance(self.subscribers, int) and 1 <= self.subscribers <= 1024):
            raise ValidationError("subscribers must be 1..1024")
        if not (isinstance(self.latency, int | float) and 0 <= self.latency <= 10):
            raise ValidationError("latency must be 0..10 seconds")
        if not (isinstance(self.publications, int) and self.publications >= 10):
            raise ValidationError("publications per run must be >= 10")
        if not (isinstance(self.observe_every, int) and self.observe_every >= 1):
            raise ValidationError("observe-every must be >= 1")
        if self.publications < (SATURATION_OBS + 1) * self.observe_every:
            raise ValidationError(
                "a run must span at least six observations (publications >= 6 x observe-every)"
            )
        if not (isinstance(self.bisect, int) and 0 <= self.bisect <= 20):
            raise ValidationError("bisect steps must be 0..20")
        if not (isinstance(self.repeat, int) and 1 <= self.repeat <= 15):
            raise ValidationError("repeat must be 1..15")

    def tree(self, n: int) -> Tree:
        return ary_tree(2, DEPTHS[n])


@dataclass(frozen=True, slots=True)
class ScalingPoint:
    """One profile at one tree size."""

    profile: str
    brokers: int
    max_throughput: float  # publications per second (largest unsaturated q)
    saturated_at: float  # smallest saturated q found
    bottleneck: str | None  # the processor that saturated first at ``saturated_at``
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    mean_fanout: float  # deliveries per publication in the latency run
    runs: int
    busy_us: dict[str, float]  # service microseconds per publication, top processors
    subscriber_utilisation: float  # busiest subscriber's busy fraction at max_throughput
    drops: dict[str, int]
    throughput_runs: tuple[float, ...] = ()  # every search's figure (``repeat``)


class ProfileKit:
    """One profile's client and broker faces (keys from one in-memory bundle)."""

    def __init__(self, profile: str, p: ScalingParams, interests: list[list[str]], tmp: str):
        if profile not in PROFILES:
            raise ValidationError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
        base = _BASE.get(profile, profile)
        self.profile, self.base = profile, base
        self.batch = MERKLE_BATCH if profile.endswith("-merkle") else 1
        self.clock = T0  # virtual time at which the next run may start
        rng = random.Random(p.seed)
        self.bundle = KeyBundle(
            tmp,
            now=T0,
            types=(SCALING_TYPE,),
            identities=(PUBLISHER,),
            rng=rng,
            epoch_length=10 * 365 * 86_400.0,
        )
        topics = p.workload.names()
        self.publisher = self.bundle.client(base, PUBLISHER, topics=topics, now=T0)
        self.subs: list[ClientScheme] = [
            self.bundle.client(base, f"s{j}", topics=mine, now=T0)
            for j, mine in enumerate(interests)
        ]
        self.keys = self.bundle.broker_keys(narada=base == "narada")

    def broker_schemes(self, _bid: str) -> list[Any]:
        if self.profile == "eventguard-nosig":
            k = self.keys
            assert k.ms_key is not None
            return [NoSigEventGuardBroker(k.ms_key, max_delay=k.max_delay, revoked=k.revoked)]
        return [make_broker_scheme(self.base, self.keys, now=T0)]


def run_once(
    kit: ProfileKit,
    p: ScalingParams,
    n_brokers: int,
    rate: float,
    interests: list[list[str]],
    *,
    observe: bool = True,
    cost: CostModel | None = None,
    run_seed: int = 0,
) -> RunStats:
    """One run at offered rate ``rate`` (publications per virtual second) on ``n_brokers``."""
    if not (isinstance(rate, int | float) and rate > 0 and math.isfinite(rate)):
        raise ValidationError("rate must be a positive number")
    tree = p.tree(n_brokers)
    sim = ScalingSim(
        tree,
        kit.broker_schemes,
        cost=cost or p.cost,
        latency=p.latency,
        seed=p.seed * 1_000_003 + run_seed,
        publisher_batch=kit.batch,
    )
    # virtual time never goes back for a kit's clients (their permits, replay counters and
    # caches carry timestamps), so each run starts after the previous one ended
    sim.now = kit.clock
    leaves = tree.leaves
    sim.add_client(PUBLISHER, tree.root, kit.publisher)
    sim.add_processor(PUBLISHER, "publisher")
    for j, mine in enumerate(interests):
        name = f"s{j}"
        sim.add_client(name, leaves[j % len(leaves)], kit.subs[j])
        sim.add_processor(name, "subscriber")
        for t in mine:
            sim.subscribe(name, Filter.parse(f'topic = "{t}"'), sub_id=f"{name}.{t}")
    if kit.base == "eventguard":  # eventguard.txt §4.3: advertise before publishing
        for t in p.workload.names():
            sim.advertise(PUBLISHER, Filter.parse(f'topic = "{t}"'))
    start = kit.clock + SETUP_S
    sim.run(until=start)
    # a Merkle publisher serves up to ``batch`` events at once, so its queue is a saw-tooth:
    # an observation spans at least two batches (and a run at least six observations)
    every = max(p.observe_every, 2 * kit.batch)
    n_pubs = max(p.publications, (SATURATION_OBS + 1) * every)
    topics = p.workload.stream(n_pubs, random.Random(p.seed + 7))
    body = b"\x00" * p.workload.payload
    for i, t in enumerate(topics):
        ev = Event({"topic": t}, id=f"e{i}", type=SCALING_TYPE.name, payload=body)
        sim.offer(PUBLISHER, ev, start + i / rate)
    last = start + (n_pubs - 1) / rate
    dt = every / rate if observe else None
    # one heap holds every entity's objects here, whereas each was its own process in the
    # papers: a full collection would land its pause on one random message, so the collector
    # is off while messages are timed (young garbage is collected before)
    gc.collect(1)
    enabled = gc.isenabled()
    gc.disable()
    try:
        sim.run_offered(math.inf, observe=dt, observe_until=last)
    finally:
        if enabled:
            gc.enable()
    kit.clock = sim.now + 1.0
    return sim.stats(rate, n_pubs)


def max_throughput(
    run: Callable[[float], RunStats], *, bisect: int, q0: float = 1.0
) -> tuple[float, float, RunStats | None, int]:
    """Both papers' search: a probe at ``q0`` gives a utilisation-law estimate; ``q`` starts at
    80% of it, doubles until some processor saturates (halves while it does), then ``bisect``
    steps. Returns (largest unsaturated q, smallest saturated q, that run, runs made)."""
    probe = run(q0)
    runs = 1
    lo, hi, hi_run = 0.0, math.inf, None
    if probe.saturated:  # halve until unsaturated
        hi, hi_run, q = q0, probe, q0 / 2
        for _ in range(MAX_DOUBLINGS):
            r = run(q)
            runs += 1
            if not r.saturated:
                lo = q
                break
            hi, hi_run, q = q, r, q / 2
    else:  # double until saturated, from just under the utilisation-law estimate
        lo, est = q0, probe.capacity_estimate()
        q = max(2 * q0, START_FRACTION * est) if math.isfinite(est) else 2 * q0
        for _ in range(MAX_DOUBLINGS):
            r = run(q)
            runs += 1
            if r.saturated:
                hi, hi_run = q, r
                break
            lo, q = q, 2 * q
    if not (lo > 0 and math.isfinite(hi)):
        return lo, hi, hi_run, runs  # pathological: nothing found within the doublings
    for _ in range(bisect):
        mid = (lo + hi) / 2
        r = run(mid)
        runs += 1
        if r.saturated:
            hi, hi_run = mid, r
        else:
            lo = mid
    return lo, hi, hi_run, runs


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _ms(x: float | None) -> float | None:
    return None if x is None else round(1000 * x, 2)


def run_scaling(
    p: ScalingParams,
    profiles: Sequence[str] = PROFILES,
    *,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, list[ScalingPoint]]:
    """Every profile at every tree size, in one process: profile -> points by tree size."""
    for prof in profiles:
        if prof not in PROFILES:
            raise ValidationError(f"unknown profile {prof!r} (known: {', '.join(PROFILES)})")
    interests = p.workload.interests(p.subscribers, random.Random(p.seed))
    out: dict[str, list[ScalingPoint]] = {prof: [] for prof in profiles}
    with tempfile.TemporaryDirectory(prefix="pubguard-scaling-") as tmp:
        kits = {prof: ProfileKit(prof, p, interests, f"{tmp}/{prof}") for prof in profiles}
        # tree size outermost: every profile's search at one size runs close together in
        # time, so a change in the machine's load falls on both sides of a ratio to plain
        for n in p.brokers:
            found: dict[str, list[ScalingPoint]] = {prof: [] for prof in profiles}
            for r in range(p.repeat):  # interleaved: plain, profile, ..., plain, profile, ...
                for prof in profiles:
                    if on_step is not None:
                        rep = f" ({r + 1}/{p.repeat})" if p.repeat > 1 else ""
                        on_step(f"{prof} / {n} brokers{rep}")
                    found[prof].append(_point(kits[prof], p, n, interests))
            for prof, pts in found.items():
                med = sorted(pts, key=lambda x: x.max_throughput)[len(pts) // 2]
                runs = tuple(round(x.max_throughput, 1) for x in pts)
                out[prof].append(replace(med, throughput_runs=runs))
    return out


def _point(kit: ProfileKit, p: ScalingParams, n: int, interests: list[list[str]]) -> ScalingPoint:
    counter = iter(range(1, 1 << 30))

    def run(q: float) -> RunStats:
        return run_once(kit, p, n, q, interests, run_seed=next(counter))

    lo, hi, hi_run, runs = max_throughput(run, bisect=p.bisect)
    lat = (
        run_once(kit, p, n, LATENCY_LOAD * lo, interests, observe=False, run_seed=next(counter))
        if lo > 0
        else None
    )
    busy = lat.busy_per_event if lat else {}
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:4]
    subs = [v for k, v in busy.items() if k.startswith("s")]  # subscriber names: s<j>
    delivered = sum(len(v) for v in lat.deliveries.values()) if lat else 0
    offered = lat.offered if lat else 1
    return ScalingPoint(
        profile=kit.profile,
        brokers=n,
        max_throughput=lo,
        saturated_at=hi,
        bottleneck=hi_run.saturated if hi_run else None,
        latency_p50_ms=_ms(_pct(lat.latencies, 0.5)) if lat else None,
        latency_p99_ms=_ms(_pct(lat.latencies, 0.99)) if lat else None,
        mean_fanout=delivered / offered,
        runs=runs + (1 if lat else 0),
        busy_us={k: round(v * 1e6, 1) for k, v in top},
        subscriber_utilisation=round(lo * max(subs, default=0.0), 3),
        drops=dict(lat.drops) if lat else {},
    )
