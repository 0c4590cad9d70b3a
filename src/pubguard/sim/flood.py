"""Flooding attack with and without EventGuard's routing guard (eventguard.txt Fig. 13, Fig. 3).

Theory of operation
-------------------
eventguard.txt §6.2.2: "We picked one of the leaf nodes to flood the pub-sub network. We vary
f_l, the rate at which the malicious node floods messages ... Figure 13 shows the throughput as
f_l increases both in the presence and the absence of routing guard." §4.7 / Fig. 3: with the
routing guard "no flooding attack could propagate beyond one non-malicious node".

One run (:func:`run_point`) is a seeded simulation of a complete a-ary broker tree
(:func:`~pubguard.overlay.ary_tree`) driven by the real broker cores in virtual time: one
publisher at the root broker (§6.2.2: "the publisher as the root of the tree"), subscribers on
every leaf, one topic, real Ed25519 signatures and AES-GCM. The publisher offers ``rate``
publications per second; each malicious broker sends ``flood_rate`` messages per second on
each of its broker links, cycling through three kinds built from the last publication it
routed: a verbatim *replay*, a *forged* copy (fresh identifier, so the signature no longer
fits) and a *bogus* one (fresh identifier and junk ciphertext). Three variants run with the
same inputs:

``guard``     eventguard with the routing guard (§4.7): id dedup, timestamp, permit and
              signature checks, strikes;
``noguard``   the same scheme with the routing guard switched off (:class:`UnguardedEventGuardBroker`
              and no id dedup in the core): brokers route publications by token unchecked,
              subscribers still verify (their drops are counted, not delivered as legitimate);
``plain``     the no-security baseline (the core's id dedup only, which it keeps for hop retries).

Brokers are single-server FIFO queues with a per-message *cost* in virtual time
(:class:`CostModel`): ``route_us`` to route an accepted message, ``check_us`` for a message
dropped by a cheap lookup (duplicate id, banned source, stale, malformed), plus ``verify_us``
whenever the routing guard verifies a signature (every accepted message at a guarded broker
and every FORGED / UNAUTHORISED drop). This is the mechanism the paper describes: the guard
pays a signature check, but the flood stops at the first honest broker, whereas without it every
flood message costs routing work at every broker it reaches. Legitimate throughput is the mean,
over subscribers, of distinct legitimate publications delivered per second inside the
measurement window; the per-broker load is the utilisation (busy time / window) and the flood
messages each broker handled. ``reach_by_hop`` counts the honest brokers that handled any flood
message, by hop distance from the nearest attacker (Fig. 3).

The variants, the cost model and the queueing simulator live in :mod:`pubguard.sim.flood_model`
(re-exported here); this module holds the parameters, one run and the sweep.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from random import Random
from typing import Any, Final

import networkx as nx

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.errors import ValidationError
from pubguard.keys.ms import MetaService
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.overlay.tree import Tree, ary_tree
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.plain import PlainScheme
from pubguard.sim.flood_model import (
    FLOOD_PREFIX,
    CostModel,
    CountingSubscriber,
    FloodSim,
    NoDedup,
    UnguardedEventGuardBroker,
)

__all__ = [
    "FLOOD_KINDS",
    "VARIANTS",
    "CostModel",
    "FloodParams",
    "PointResult",
    "UnguardedEventGuardBroker",
    "run_flood",
    "run_point",
]

VARIANTS: Final = ("guard", "noguard", "plain")
FLOOD_KINDS: Final = ("replay", "forged", "bogus")
TOPIC: Final = "eventguard/fig13"
PAYLOAD_BYTES: Final = 64
SETUP_S: Final = 0.5  # subscriptions and advertisements settle before the first publication
MAX_BROKERS: Final = 1023


@dataclass(frozen=True, slots=True)
class FloodParams:
    """One experiment's inputs. Rates are per second of virtual time."""

    arity: int = 2
    depth: int = 4  # 31 brokers: §6.2.2 used complete binary trees of up to 30 nodes
    subscribers_per_leaf: int = 1  # §6.2.2 had 32 on 16 leaves; per-leaf results are alike
    load: float = 0.8  # offered legitimate rate, as a fraction of a guarded broker's capacity
    rate: float | None = None  # or the offered rate itself (publications per second)
    flood_rates: tuple[float, ...] = (0.0, 25.0, 50.0, 100.0, 200.0, 400.0)  # per link
    attackers: int = 1
    attacker_depth: int | None = None  # None: leaves (§6.2.2 "one of the leaf nodes")
    duration: float = 1.0  # measurement window (virtual seconds)
    warmup: float = 0.3  # publishing (and flooding) starts this long before the window
    latency: float = 0.035  # per broker link: about half the paper's 74 ms mean RTT
    cost: CostModel = field(default_factory=CostModel)
    seed: int = 1

    def __post_init__(self) -> None:
        ints = {
            "arity": self.arity,
            "depth": self.depth,
            "attackers": self.attackers,
            "subscribers_per_leaf": self.subscribers_per_leaf,
            "seed": self.seed,
        }
        for name, v in ints.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValidationError(f"{name} must be an integer")
        if self.arity < 1 or self.depth < 1 or self.subscribers_per_leaf < 1:
            raise ValidationError("arity, depth and subscribers per leaf must be >= 1")
        a, d = self.arity, self.depth
        n = d + 1 if a == 1 else (a ** (d + 1) - 1) // (a - 1)
        if n > MAX_BROKERS:
            raise ValidationError(
                f"a {a}-ary tree of depth {d} has {n} brokers (at most {MAX_BROKERS} here)"
            )
        ad = d if self.attacker_depth is None else self.attacker_depth
        if isinstance(ad, bool) or not isinstance(ad, int) or not 1 <= ad <= d:
            raise ValidationError(f"attacker depth must be between 1 and {d}")
        if not 1 <= self.attackers <= a**ad:
            raise ValidationError(
                f"attackers must be between 1 and {a**ad} (brokers at depth {ad})"
            )
        if ad == d and self.attackers >= a**d:
            raise ValidationError("every leaf would be an attacker: no honest subscriber left")
        checks: list[tuple[str, Any]] = [
            ("load", self.load),
            ("duration", self.duration),
            ("rate", 1.0 if self.rate is None else self.rate),
        ]
        for name, v in checks:
            if not (_num(v) and v > 0):
                raise ValidationError(f"{name} must be a positive number")
        if not (_num(self.warmup) and self.warmup >= 0):
            raise ValidationError("warmup must be >= 0")
        if not (_num(self.latency) and self.latency >= 0):
            raise ValidationError("latency must be >= 0")
        if not self.flood_rates or not all(_num(f) and f >= 0 for f in self.flood_rates):
            raise ValidationError("flood rates must be one or more numbers >= 0")
        if not isinstance(self.cost, CostModel):
            raise ValidationError("cost must be a CostModel")

    @property
    def offered_rate(self) -> float:
        """Legitimate publications per second (``rate``, or ``load`` x guarded capacity)."""
        if self.rate is not None:
            return float(self.rate)
        return self.load / self.cost.publication("guard")

    def tree(self) -> Tree:
        return ary_tree(self.arity, self.depth)

    def attacker_brokers(self) -> list[str]:
        """The attackers: ``attackers`` brokers at ``attacker_depth``, spread evenly from the
        last one (the paper's Fig. 13 picks "one of the leaf nodes")."""
        t = self.tree()
        d = self.depth if self.attacker_depth is None else self.attacker_depth
        level = [n for n in t.nodes if t.depth(n) == d]
        step = len(level) / self.attackers
        return [level[len(level) - 1 - int(i * step)] for i in range(self.attackers)]


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


@dataclass(frozen=True, slots=True)
class PointResult:
    """One variant at one flood rate (honest brokers only; attackers are not measured)."""

    variant: str
    flood_rate: float
    offered_rate: float
    throughput: float  # delivered: distinct legitimate publications per subscriber per second
    sustainable: float  # §6.2.2 throughput: highest rate at which no broker saturates
    bottleneck: str | None  # the broker that bounds ``sustainable``
    latency_ms: float  # mean publication-to-delivery time of the counted deliveries
    published: int
    flood_sent: int
    flood_handled: int  # flood messages handled by honest brokers (any outcome)
    flood_delivered: int  # flood messages that reached a subscriber
    refused_by_subscribers: int
    reached: tuple[str, ...]  # honest brokers that handled any flood message
    reach_by_hop: dict[int, int]
    brokers_by_hop: dict[int, int]
    utilisation: dict[str, float]  # busy fraction of the window
    flood_by_broker: dict[str, int]
    drops: dict[str, int]

    @property
    def max_utilisation(self) -> float:
        return max(self.utilisation.values(), default=0.0)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            throughput=round(self.throughput, 3),
            sustainable=round(self.sustainable, 3),
            offered_rate=round(self.offered_rate, 3),
            latency_ms=round(self.latency_ms, 2),
            reached=len(self.reached),
            reached_brokers=list(self.reached),
            reach_by_hop={str(k): v for k, v in self.reach_by_hop.items()},
            brokers_by_hop={str(k): v for k, v in self.brokers_by_hop.items()},
            utilisation={k: round(v, 4) for k, v in self.utilisation.items()},
            max_utilisation=round(self.max_utilisation, 4),
            mean_utilisation=round(
                sum(self.utilisation.values()) / max(1, len(self.utilisation)), 4
            ),
        )
        return d


def _flood_message(kind: str, tpl: dict[str, Any], n: int, rng: Random) -> dict[str, Any]:
    if kind == "replay":
        return dict(tpl)  # verbatim: same identifier, valid signature
    msg = {**tpl, "event_id": f"{FLOOD_PREFIX}{n}"}  # forged: the signature no longer fits
    if kind == "bogus":
        msg["body"] = rng.randbytes(len(tpl.get("body", b"")) or PAYLOAD_BYTES)
    return msg


def _hops(tree: Tree, attackers: Sequence[str]) -> dict[str, int]:
    g = tree.to_networkx().to_undirected()
    return {n: int(d) for n, d in nx.multi_source_dijkstra_path_length(g, set(attackers)).items()}


def _build(p: FloodParams, variant: str, rng: Random) -> tuple[FloodSim, MetaService]:
    ms = MetaService(SecretBytes(rng.randbytes(32)), epoch_length=3600.0)
    if variant == "plain":
        schemes: Any = [PlainScheme()]
    else:
        cls = EventGuardBroker if variant == "guard" else UnguardedEventGuardBroker
        schemes = lambda _b: [cls(ms.public_key)]  # noqa: E731  (one instance per broker)
    lo = SETUP_S + p.warmup
    sim = FloodSim(
        p.tree(),
        schemes,
        variant=variant,
        cost=p.cost,
        window=(lo, lo + p.duration),
        seed=p.seed,
        latency=p.latency,
    )
    if variant == "noguard":
        for b in sim.brokers.values():
            # the routing guard's id window, off (Broker takes dedup options; Simulator does
            # not pass any, so the window is replaced after construction)
            b._dedup = NoDedup()
    return sim, ms


def run_point(p: FloodParams, variant: str, flood_rate: float) -> PointResult:
    """Simulate ``variant`` under one flood rate (see the module docstring)."""
    if variant not in VARIANTS:
        raise ValidationError(f"variant must be one of {', '.join(VARIANTS)}")
    if not (_num(flood_rate) and flood_rate >= 0):
        raise ValidationError("flood rate must be a number >= 0")
    tree, attackers, rate = p.tree(), p.attacker_brokers(), p.offered_rate
    rng = Random(p.seed)
    sim, ms = _build(p, variant, rng)
    for a in attackers:
        sim.captured[a] = {}

    def client(name: str, broker: str, signing: SigningKey | None = None) -> Any:
        scheme = (
            PlainScheme()
            if variant == "plain"
            else CountingSubscriber(name, ms, signing_key=signing)
        )
        return sim.add_client(name, broker, scheme)

    flt = Filter.parse(f'topic = "{TOPIC}"')
    client("pub", tree.root, SigningKey.from_seed(rng.randbytes(32)))
    sim.advertise("pub", flt, at=0.0)
    subs = []
    for a in attackers:  # a malicious broker subscribes, so it sees publications to copy
        client(f"spy-{a}", a)
        sim.subscribe(f"spy-{a}", flt, at=0.0)
    for leaf in tree.leaves:
        if leaf in attackers:
            continue  # subscribers behind a malicious broker are not the honest network's
        for i in range(p.subscribers_per_leaf):
            subs.append(client(f"s-{leaf}-{i}", leaf))
            sim.subscribe(subs[-1].client_id, flt, at=0.0)
    sim.run(until=SETUP_S)

    # the schedule: legitimate publications evenly spaced, flood evenly spaced on every link
    lo, hi = sim.window
    plan: list[tuple[float, int, str, str]] = []
    plan += [(SETUP_S + i / rate, 0, "pub", "") for i in range(math.ceil((hi - SETUP_S) * rate))]
    for a in attackers if flood_rate > 0 else ():
        for nb in sorted(lk for lk in sim.brokers[a].links if lk in sim.brokers):
            phase = rng.random() / flood_rate
            k_max = math.ceil((hi - SETUP_S) * flood_rate)
            plan += [(SETUP_S + phase + k / flood_rate, 1, a, nb) for k in range(k_max)]
    plan.sort()
    legit: set[str] = set()
    flood_sent = 0
    frng = Random(p.seed + 1)
    for t, kind, a, nb in plan:
        if t >= hi:
            break
        sim.run(until=t)
        if kind == 0:
            ev = Event({"topic": TOPIC, "n": len(legit)}, payload=b"\x00" * PAYLOAD_BYTES)
            legit.add(sim.publish("pub", ev, at=t))
        elif sim.captured[a]:  # nothing to copy before the first publication passed
            kind_name = FLOOD_KINDS[flood_sent % len(FLOOD_KINDS)]
            sim.send_raw(a, nb, _flood_message(kind_name, sim.captured[a], flood_sent, frng), at=t)
            flood_sent += 1
    sim.run(until=hi)
    return _result(p, variant, flood_rate, sim, subs, legit, flood_sent, attackers)


def _result(
    p: FloodParams,
    variant: str,
    flood_rate: float,
    sim: FloodSim,
    subs: list[Any],
    legit: set[str],
    flood_sent: int,
    attackers: list[str],
) -> PointResult:
    lo, hi = sim.window
    counted, lat, n_lat, flood_delivered = 0, 0.0, 0, 0
    for c in subs:
        got: set[str] = set()
        for d in c.deliveries:
            if d.event_id not in legit or d.event_id in got:
                flood_delivered += 1  # forged, bogus or a replayed copy
                continue
            got.add(d.event_id)
            if lo <= d.time < hi:
                counted += 1
                if d.published_at is not None:
                    lat += d.time - d.published_at
                    n_lat += 1
    tree, rate = sim.topology.tree, p.offered_rate
    hops = _hops(tree, attackers)
    honest = [b for b in tree.nodes if b not in attackers]
    reached = tuple(b for b in honest if sim.flood_handled[b] > 0)
    by_hop: Counter[int] = Counter(hops[b] for b in honest)
    reach: Counter[int] = Counter(hops[b] for b in reached)
    # §6.2.2 throughput (highest rate with no broker saturated), by the utilisation law: a
    # broker saturates when legit work per second plus flood work per second reaches 1
    c_legit = p.cost.publication(variant)
    sustainable, bottleneck = math.inf, None
    for b in honest:
        per_pub = sim.arrivals[(b, False)] / (rate * p.duration)
        if per_pub <= 0:
            continue
        served = sim.served[(b, True)]
        c_flood = sim.busy[(b, True)] / served if served else p.cost.cost(variant, "publish", [])
        flood_work = sim.arrivals[(b, True)] / p.duration * c_flood
        cap = max(0.0, 1.0 - flood_work) / (per_pub * c_legit)
        if cap < sustainable:
            sustainable, bottleneck = cap, b
    return PointResult(
        variant=variant,
        flood_rate=float(flood_rate),
        offered_rate=rate,
        throughput=counted / (len(subs) * p.duration),
        sustainable=0.0 if bottleneck is None else sustainable,
        bottleneck=bottleneck,
        latency_ms=1000 * lat / n_lat if n_lat else 0.0,
        published=len(legit),
        flood_sent=flood_sent,
        flood_handled=sum(sim.flood_handled[b] for b in honest),
        flood_delivered=flood_delivered,
        refused_by_subscribers=sum(
            c.scheme.rejected for c in subs if isinstance(c.scheme, CountingSubscriber)
        ),
        reached=reached,
        reach_by_hop={h: reach[h] for h in sorted(by_hop)},
        brokers_by_hop=dict(sorted(by_hop.items())),
        utilisation={b: (sim.busy[(b, False)] + sim.busy[(b, True)]) / p.duration for b in honest},
        flood_by_broker={b: sim.flood_handled[b] for b in reached},
        drops=dict(sorted(sim.drop_reasons.items())),
    )


def run_flood(
    p: FloodParams,
    *,
    variants: Sequence[str] = VARIANTS,
    on_point: Callable[[PointResult], None] | None = None,
) -> dict[str, list[PointResult]]:
    """Every variant at every flood rate, in the same process: variant -> points by rate."""
    for v in variants:
        if v not in VARIANTS:
            raise ValidationError(f"variant must be one of {', '.join(VARIANTS)}")
    out: dict[str, list[PointResult]] = {v: [] for v in variants}
    for f in p.flood_rates:
        for v in variants:
            r = run_point(p, v, f)
            out[v].append(r)
            if on_point is not None:
                on_point(r)
    return out
