"""vcaps.txt §6 in the simulator: the 40-broker tree, the five workloads, Figs. 3(b)-7.

Theory of operation
-------------------
§6.1: a 4-level broker tree with fanout 3 (1 + 3 + 9 + 27 = 40 brokers), the publisher P at
the root, subscribers attached at random to the 27 leaves; workloads of 100 / 500 / 1k / 5k /
10k unique ssbg-like filters (:func:`pubguard.sim.workloads.vcaps_filters`), each subscriber
drawing U[1, 200] of them, ``subscriptions / 100`` subscribers (1k ... 100k subscriptions),
200 notifications.

Every profile runs its real cores over the same tree (:class:`VcapsTree` of BFPosets, the
matcher the broker core uses for v-CAPS; :class:`VcapsPublisher`); the baseline is Siena-style
plain routing (per broker: a covering poset deciding what goes upstream and the project's
indexed matcher over the filters it holds: :class:`~pubguard.sim.vcaps_plain.PlainTree`).
Each broker's computation is measured with the
injected ``timer`` around its match; the publisher's around match plus header (RV, 𝓔(RV), or
nonce and codewords). Links have seeded one-way delays (``RTT`` below), so the end-to-end
latency of a delivery is RTT plus the computation on its path (Fig. 4 plots that excess).
Those per-broker timings are one wall-clock pass; the goals' ratios come from the steady figure
(:mod:`pubguard.sim.vcaps_steady`): the broker cores' thread CPU time per
notification, repeated with the profiles interleaved, compared per notification.

Notification classes (Fig. 3(b)): notifications sorted by the number of subscriptions they
match; the top third are *popular*, the middle third *moderate*, the bottom third *esoteric*.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pubguard.crypto import SigningKey
from pubguard.matching.index import IndexedMatcher
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.vcaps import FAST, RV, SRV, VcapsKeyService, VcapsPublisher, VcapsTree
from pubguard.schemes.vcaps.tokens import decode_routing, decode_token
from pubguard.sim.vcaps_plain import PlainTree
from pubguard.sim.vcaps_steady import steady_figure
from pubguard.sim.workloads import VCAPS_MAX_SUBSCRIBER_FILTERS, vcaps_events, vcaps_filters

__all__ = [
    "PAPER",
    "PROFILES",
    "WORKLOADS",
    "Measured",
    "run_srv_sampled",
    "run_workload",
    "tree_40",
]

PLAIN: Final = "plain"
PROFILES: Final = (PLAIN, RV, SRV, FAST)
#: §6.1: (unique filters, subscribers); subscriptions = subscribers x U[1, 200] ~ 1k ... 100k
WORKLOADS: Final = ((100, 10), (500, 50), (1000, 100), (5000, 500), (10_000, 1000))
CLASSES: Final = ("popular", "moderate", "esoteric")
BUCKET: Final = 200  # Fig. 6: existing filters in buckets of 200
#: the paper's values (vcaps.txt §6.1-6.4), printed beside ours
PAPER: Final = {
    "deliveries": {"smallest": 5459, "largest": 125_418},
    "fig4_excess_ms": {"plain": 5.0, "vcaps-rv": 10.0},
    "fig5_rv_minus_plain_ms_at_100k": 3.0,
    "fig5_srv_ms_at_100k": {"popular": 1500.0, "moderate": 560.0, "esoteric": 220.0},
    "fig5_srv_publisher_ms_at_100k": 4.0,
    "fig6_broker_new_filter_ms": {"vcaps-rv": 1.0, "plain": 25.0, "vcaps-srv": 230.0},
    "fig6_publisher_new_filter_ms_at_9200": [100.0, 120.0],
    "fig7_header_bytes_per_subscriber_max": 4.0,
}


def tree_40(levels: int = 4, fanout: int = 3) -> dict[str, str | None]:
    """§6.1's broker tree: ``B0`` at the root (P's broker), ``fanout`` children per inner node."""
    parent: dict[str, str | None] = {"B0": None}
    level = ["B0"]
    n = 1
    for _ in range(levels - 1):
        nxt = []
        for p in level:
            for _ in range(fanout):
                b = f"B{n}"
                n += 1
                parent[b] = p
                nxt.append(b)
        level = nxt
    return parent


@dataclass(slots=True)
class Measured:
    """One profile on one workload."""

    profile: str
    deliveries: int = 0
    equal_reference: bool = True
    publisher_ms: dict[str, list[float]] = field(default_factory=dict)  # class -> per event
    broker_ms: dict[str, list[float]] = field(default_factory=dict)
    excess_ms: dict[str, list[float]] = field(default_factory=dict)  # latency - RTT
    header_bytes: dict[str, int] = field(default_factory=dict)
    class_deliveries: dict[str, int] = field(default_factory=dict)
    new_filter_broker_ms: dict[int, list[float]] = field(default_factory=dict)
    new_filter_publisher_ms: dict[int, list[float]] = field(default_factory=dict)
    setup_s: float = 0.0
    stage_ii: str = "tokens"  # or "poset": run_profile's poset_stage_ii
    new_filter_broker_sampled: int = 1  # 1 in this many new filters timed per broker (Fig. 6)
    #: per notification, a closure routing it again through this profile's broker cores
    #: (header decoded): the steady figure's repetitions (:mod:`pubguard.sim.vcaps_steady`)
    routes: list[Callable[[], set[str]]] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        def mean(d: Mapping[Any, list[float]]) -> dict[str, float]:
            return {str(k): round(statistics.fmean(v), 4) for k, v in d.items() if v}

        per_sub = {  # None: no subscriber received that class
            c: round(self.header_bytes.get(c, 0) / n, 3)
            if (n := self.class_deliveries.get(c))
            else None
            for c in CLASSES
        }
        return {
            "profile": self.profile,
            "deliveries": self.deliveries,
            "equal_reference": self.equal_reference,
            "publisher_ms": mean(self.publisher_ms),
            "broker_ms": mean(self.broker_ms),
            "total_ms": {
                c: round(
                    statistics.fmean(self.publisher_ms[c]) + statistics.fmean(self.broker_ms[c]), 4
                )
                for c in CLASSES
                if self.broker_ms.get(c)
            },
            "excess_ms_mean": mean(self.excess_ms),
            "excess_ms_max": {c: round(max(v), 4) for c, v in self.excess_ms.items() if v},
            "header_bytes_per_subscriber": per_sub,
            "new_filter_broker_ms": mean(self.new_filter_broker_ms),
            "new_filter_broker_sampled": (
                f"1 in {self.new_filter_broker_sampled} new filters per broker"
                if self.new_filter_broker_sampled > 1
                else False
            ),
            "new_filter_publisher_ms": mean(self.new_filter_publisher_ms),
            "setup_s": round(self.setup_s, 2),
            "stage_ii": self.stage_ii,
        }


@dataclass(frozen=True, slots=True)
class Setting:
    filters: list[Filter]
    events: list[Event]
    subs: dict[str, list[int]]  # subscriber -> filter indices
    leaf: dict[str, str]
    delay: dict[str, float]  # node -> one-way delay (ms) of its link to its parent
    parent: dict[str, str | None]


def make_setting(
    n_filters: int, n_subscribers: int, n_events: int, seed: int, tree: dict[str, str | None]
) -> Setting:
    rng = random.Random(seed)
    filters = vcaps_filters(n_filters, random.Random(seed + 1))
    events = vcaps_events(n_events, random.Random(seed + 2))
    leaves = [b for b in tree if not any(p == b for p in tree.values())]
    subs: dict[str, list[int]] = {}
    leaf: dict[str, str] = {}
    delay: dict[str, float] = {b: rng.uniform(1.0, 20.0) for b in tree if tree[b] is not None}
    for i in range(n_subscribers):
        s = f"S{i}"
        k = min(n_filters, rng.randint(1, VCAPS_MAX_SUBSCRIBER_FILTERS))
        subs[s] = rng.sample(range(n_filters), k)
        leaf[s] = rng.choice(leaves)
        delay[s] = rng.uniform(10.0, 100.0)  # a wide-area subscriber (PlanetLab-like) link
    return Setting(filters, events, subs, leaf, delay, tree)


def _path_ms(s: Setting, node: str) -> list[str]:
    out = [node]
    p = s.leaf.get(node) or s.parent.get(node)
    while p is not None:
        out.append(p)
        p = s.parent[p]
    return out  # subscriber, leaf, ..., root


def classes(s: Setting) -> tuple[dict[str, str], list[int]]:
    """Each event's class (by subscriptions matched, in thirds) and the popularity list."""
    m = IndexedMatcher((i, f) for i, f in enumerate(s.filters))
    count = [0] * len(s.filters)
    for fl in s.subs.values():
        for i in fl:
            count[i] += 1
    pop = [sum(count[i] for i in m.match(e)) for e in s.events]  # type: ignore[call-overload]
    order = sorted(range(len(s.events)), key=lambda j: -pop[j])
    third = max(1, len(order) // 3)
    cls = {}
    for rank, j in enumerate(order):
        c = CLASSES[0] if rank < third else CLASSES[1] if rank < 2 * third else CLASSES[2]
        cls[str(s.events[j].id)] = c
    return cls, pop


def reference(s: Setting) -> dict[str, set[str]]:
    m = IndexedMatcher((i, f) for i, f in enumerate(s.filters))
    holders: dict[int, list[str]] = {}
    for sub, fl in s.subs.items():
        for i in fl:
            holders.setdefault(i, []).append(sub)
    out = {}
    for e in s.events:
        out[str(e.id)] = {x for i in m.match(e) for x in holders.get(i, ())}  # type: ignore[call-overload]
    return out


def _bucket(n: int) -> int:
    return (n // BUCKET + 1) * BUCKET


#: with ``poset_stage_ii``, every this-many-th new filter at a broker still runs Stage II's
#: real token tests, timed for Fig. 6 (the rest take the PFPoset's relation, untimed)
STAGE_II_SAMPLE: Final = 20


def run_profile(
    profile: str,
    s: Setting,
    cls: Mapping[str, str],
    ref: Mapping[str, set[str]],
    timer: Callable[[], float],
    *,
    seed: int = 0,
    poset_stage_ii: bool = False,
) -> Measured:
    """Register every subscription, publish every event, measure (see the module docstring).

    ``poset_stage_ii``: SRV and SRV-fast brokers take the covering relation from the
    publisher's PFPoset instead of testing the tokens (``BFPoset.insert``'s ``covering``):
    the same posets, so the same routing and per-notification costs, without Stage II's
    O(held filters) tests per new filter (minutes at 10,000 filters). Fig. 6's broker
    column is then sampled: every :data:`STAGE_II_SAMPLE`-th new filter at each broker runs
    the real token tests, timed (the covering relation is the one the tokens encode, so the
    poset is the same either way, and the scheduled keys are kept as a tested insertion
    keeps them: ``BFPoset.stage_ii_upkeep``)."""
    me = Measured(profile)
    shortcut = poset_stage_ii and profile in (SRV, FAST)
    me.stage_ii = "poset" if shortcut else "tokens"
    if shortcut:
        me.new_filter_broker_sampled = STAGE_II_SAMPLE
    new_at: dict[str, int] = {}  # broker -> new filters it took (poset_stage_ii's sampling)
    t_setup = timer()
    pairs = [(sub, i) for sub, fl in s.subs.items() for i in fl]
    random.Random(seed).shuffle(pairs)  # subscriptions arrive interleaved
    if profile == PLAIN:
        plain = PlainTree(s.parent)
        for sub, i in pairs:
            plain.subscribe(s.leaf[sub], sub, f"f{i}", s.filters[i], lambda _b: None)
        _new_filter_plain(plain, s, timer, me)  # Fig. 6(a)'s baseline

        def publish(e: Event) -> tuple[float, dict[str, Any] | None]:
            return 0.0, None  # the baseline publisher only sends

        def route(e: Event, hdr: Any, c: dict[str, float]) -> set[str]:
            return plain.route(e, timer, c)

        def again(e: Event, hdr: Any) -> Callable[[], set[str]]:
            return lambda: plain.route(e)
    else:
        pub = VcapsPublisher(
            "P",
            profile,
            master=bytes(32),
            signing_key=SigningKey.from_seed(bytes(32)),
            keys=VcapsKeyService(bytes(32)),
            rng=random.Random(seed),
        )
        tree = VcapsTree(s.parent)
        handle: dict[bytes, bytes] = {}  # filter ID -> token handle (poset_stage_ii)
        fid_of: dict[bytes, bytes] = {}

        def covering(h: bytes, pub: VcapsPublisher = pub) -> tuple[list[bytes], list[bytes]]:
            above, below = pub.relations(fid_of[h])
            return [handle[f] for f in above], [handle[f] for f in below]

        for sub, i in pairs:
            existing = len(pub)
            t0 = timer()
            wire = pub.register(s.filters[i], subscriber=sub)
            dt = timer() - t0
            if len(pub) > existing:
                me.new_filter_publisher_ms.setdefault(_bucket(existing), []).append(dt * 1e3)
            tok = decode_token(profile, wire)
            if shortcut:
                fid = pub.filter_id(s.filters[i])
                assert fid is not None
                handle[fid], fid_of[tok.handle] = tok.handle, fid
            at: str | None = s.leaf[sub]
            x = sub
            while at is not None:  # Stage II, timing each broker's insertion of a new filter
                bf = tree.posets[at]
                new = tok.handle not in bf.tokens
                held = len(bf.tokens)
                tested = not shortcut
                if shortcut and new:
                    new_at[at] = new_at.get(at, 0) + 1
                    tested = new_at[at] % STAGE_II_SAMPLE == 0
                    if not tested:
                        bf.stage_ii_upkeep(tok)
                t0 = timer()
                fwd = bf.insert(tok, x, covering=None if tested else covering)
                dt = timer() - t0
                if new and tested:
                    me.new_filter_broker_ms.setdefault(_bucket(held), []).append(dt * 1e3)
                if not fwd:
                    break
                x, at = at, s.parent[at]
        for bf in tree.posets.values():
            bf.prepare()  # each broker's index, before the first notification (RV's: a dict)

        def publish(e: Event) -> tuple[float, dict[str, Any] | None]:
            t0 = timer()
            hdr = pub.routing(pub.match(e))
            return timer() - t0, hdr

        decoded: dict[int, Any] = {}  # id(hdr) -> its decoded header, for again()

        def route(e: Event, hdr: Any, c: dict[str, float]) -> set[str]:
            pe = decoded[id(hdr)] = decode_routing(profile, hdr)
            return tree.route(pe, timer=timer, costs=c)

        def again(e: Event, hdr: Any) -> Callable[[], set[str]]:
            pe = decoded.pop(id(hdr))
            return lambda: tree.route(pe)

    me.setup_s = timer() - t_setup
    for e in s.events:
        eid = str(e.id)
        c = cls[eid]
        dt, hdr = publish(e)
        pms = dt * 1e3
        costs: dict[str, float] = {}
        got = route(e, hdr, costs)
        me.routes.append(again(e, hdr))
        if got != ref[eid]:
            me.equal_reference = False
        me.deliveries += len(got)
        me.class_deliveries[c] = me.class_deliveries.get(c, 0) + len(got)
        me.publisher_ms.setdefault(c, []).append(pms)
        me.broker_ms.setdefault(c, []).append(sum(costs.values()) * 1e3)
        if hdr is not None:
            me.header_bytes[c] = me.header_bytes.get(c, 0) + _header_len(hdr)
        for sub in got:  # Fig. 4: computation on the path = latency - RTT
            path = _path_ms(s, sub)[1:]
            me.excess_ms.setdefault(c, []).append(pms + sum(costs.get(b, 0.0) for b in path) * 1e3)
    return me


def _header_len(hdr: Mapping[str, Any]) -> int:
    n = 16 if "n" in hdr else 0
    for k in ("rv", "srv", "v"):
        if k in hdr:
            n += 16 * len(hdr[k])
    return n


def _new_filter_plain(
    plain: PlainTree, s: Setting, timer: Callable[[], float], me: Measured
) -> None:
    """Fig. 6(a) baseline: one fresh filter inserted at each broker, as a broker does when it
    is new there (covering poset + index), timed against the broker's current size."""
    probes = vcaps_filters(40, random.Random(99))
    for j, b in enumerate(plain.posets):
        f = probes[j % len(probes)]
        key = ("probe", f"p{j}")
        held = len(plain.posets[b])
        t0 = timer()
        plain.posets[b].insert(key, f)
        plain.matchers[b].add(key, f)
        dt = timer() - t0
        plain.posets[b].remove(key)
        plain.matchers[b].remove(key)
        me.new_filter_broker_ms.setdefault(_bucket(held), []).append(dt * 1e3)


def run_workload(
    n_filters: int,
    n_subscribers: int,
    *,
    events: int = 200,
    profiles: Sequence[str] = PROFILES,
    timer: Callable[[], float],
    seed: int = 0,
    tree: dict[str, str | None] | None = None,
    srv_sampled: int = 0,
    poset_stage_ii: bool = False,
    steady_repeats: int = 0,
    cpu_clock: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """All profiles on one workload; JSON-ready rows. ``srv_sampled``: also the faithful SRV
    on that many notifications per class (:func:`run_srv_sampled`), as ``srv_sampled``.
    ``steady_repeats`` with ``cpu_clock``: also the steady broker figure of plain, RV and
    SRV-fast (:func:`~pubguard.sim.vcaps_steady.steady_figure`), as ``steady``."""
    s = make_setting(n_filters, n_subscribers, events, seed, tree or tree_40())
    cls, pop = classes(s)
    ref = reference(s)
    rtt = sorted(
        2 * sum(s.delay[n] for n in _path_ms(s, sub)[:-1]) for sub in s.subs
    )  # subscriber to root and back
    out: dict[str, Any] = {
        "filters": n_filters,
        "subscribers": n_subscribers,
        "subscriptions": sum(len(v) for v in s.subs.values()),
        "events": len(s.events),
        "reference_deliveries": sum(len(v) for v in ref.values()),
        "popularity": {
            c: sorted((pop[j] for j, e in enumerate(s.events) if cls[str(e.id)] == c), reverse=True)
            for c in CLASSES
        },
        "rtt_ms": {
            "min": round(rtt[0], 1),
            "median": round(statistics.median(rtt), 1),
            "max": round(rtt[-1], 1),
        },
        "profiles": {},
    }
    kept: dict[str, Measured] = {}
    for p in profiles:
        m = run_profile(p, s, cls, ref, timer, seed=seed, poset_stage_ii=poset_stage_ii)
        out["profiles"][p] = m.summary()
        if steady_repeats and p in STEADY_PROFILES:
            kept[p] = m
        m.routes = m.routes if p in kept else []  # the others' cores are freed now
    if kept and cpu_clock is not None:
        eids = [str(e.id) for e in s.events]
        order = [p for p in STEADY_PROFILES if p in kept]
        out["steady"], wrong = steady_figure(
            {p: kept[p].routes for p in order},
            [cls[e] for e in eids],
            [ref[e] for e in eids],
            classes_in_order=CLASSES,
            ratios=STEADY_RATIOS,
            repeats=steady_repeats,
            clock=cpu_clock,
        )
        for p, m in kept.items():
            out["profiles"][p]["equal_reference"] = m.equal_reference and p not in wrong
            m.routes = []
    if srv_sampled:
        out["srv_sampled"] = run_srv_sampled(s, cls, ref, timer, per_class=srv_sampled, seed=seed)
    return out


#: the profiles of the steady figure, in this order (the faithful SRV is reported as
#: measured: seconds per notification at 10,000 filters, too slow to repeat)
STEADY_PROFILES: Final = (RV, FAST, PLAIN)
#: (numerator, denominator) of the steady ratios: the issue's two goals
STEADY_RATIOS: Final = ((FAST, RV), (RV, PLAIN))


def run_srv_sampled(
    s: Setting,
    cls: Mapping[str, str],
    ref: Mapping[str, set[str]],
    timer: Callable[[], float],
    *,
    per_class: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The faithful SRV where the full run is infeasible: its per-notification cost on the
    first ``per_class`` notifications of each class, marked ``sampled``.

    Two shortcuts, both outside what is measured: each unique filter is registered once
    (its token then serves every subscriber of it; the brokers' posets are the same), and
    Stage II takes the covering relation from the publisher's PFPoset (``BFPoset.insert``'s
    ``covering``) instead of SRV's pairwise SWP tests, which are O(held filters) HMAC lists
    per new filter at each broker (hours at 10,000 filters). The relation is the one the
    tokens encode, so the posets, and so the routing, are those of the full run. Publisher
    and broker computation per notification are measured as :func:`run_profile` does."""
    pub = VcapsPublisher(
        "P",
        SRV,
        master=bytes(32),
        signing_key=SigningKey.from_seed(bytes(32)),
        keys=VcapsKeyService(bytes(32)),
        rng=random.Random(seed),
    )
    tree = VcapsTree(s.parent)
    t_setup = timer()
    pairs = [(sub, i) for sub, fl in s.subs.items() for i in fl]
    random.Random(seed).shuffle(pairs)
    toks: dict[int, Any] = {}
    for sub, i in pairs:
        if i not in toks:
            toks[i] = decode_token(SRV, pub.register(s.filters[i], subscriber=sub))
    handle = {pub.filter_id(s.filters[i]): t.handle for i, t in toks.items()}
    fid = {h: f for f, h in handle.items()}
    memo: dict[bytes, tuple[list[bytes], list[bytes]]] = {}

    def covering(h: bytes) -> tuple[list[bytes], list[bytes]]:
        if h not in memo:
            above, below = pub.relations(fid[h])  # type: ignore[arg-type]
            memo[h] = ([handle[x] for x in above], [handle[x] for x in below])
        return memo[h]

    for sub, i in pairs:
        at: str | None = s.leaf[sub]
        x = sub
        while at is not None:
            if not tree.posets[at].insert(toks[i], x, covering=covering):
                break
            x, at = at, s.parent[at]
    setup_s = timer() - t_setup
    chosen: dict[str, list[Event]] = {c: [] for c in CLASSES}
    for e in s.events:
        c = cls[str(e.id)]
        if len(chosen[c]) < per_class:
            chosen[c].append(e)
    publisher_ms: dict[str, list[float]] = {}
    broker_ms: dict[str, list[float]] = {}
    equal = True
    for c, es in chosen.items():
        for e in es:
            t0 = timer()
            hdr = pub.routing(pub.match(e))
            publisher_ms.setdefault(c, []).append((timer() - t0) * 1e3)
            costs: dict[str, float] = {}
            got = tree.route(decode_routing(SRV, hdr), timer=timer, costs=costs)
            broker_ms.setdefault(c, []).append(sum(costs.values()) * 1e3)
            equal = equal and got == ref[str(e.id)]
    return {
        "profile": SRV,
        "sampled": True,
        "per_class": {c: len(v) for c, v in chosen.items()},
        "stage_ii": "covering relation from the PFPoset (the tokens' relation)",
        "equal_reference": equal,
        "publisher_ms": {c: round(statistics.fmean(v), 4) for c, v in publisher_ms.items()},
        "broker_ms": {c: round(statistics.fmean(v), 4) for c, v in broker_ms.items()},
        "broker_ms_each": {c: [round(x, 2) for x in v] for c, v in broker_ms.items()},
        "setup_s": round(setup_s, 2),
    }


def histogram(values: Iterable[int], bins: int = 10) -> list[tuple[int, int, int]]:
    """(lo, hi, count) bins of subscriptions matched per notification (Fig. 3(b))."""
    v = sorted(values)
    if not v:
        return []
    hi = v[-1] + 1
    step = max(1, -(-hi // bins))
    out = []
    for lo in range(0, hi, step):
        out.append((lo, lo + step - 1, sum(lo <= x < lo + step for x in v)))
    return out
