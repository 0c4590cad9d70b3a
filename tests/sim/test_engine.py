"""The simulator drives real broker cores: routing correctness against the oracle, covering,
unsubscription, determinism. No sockets."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import DropReason
from pubguard.matching.reference import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.overlay import Tree, ary_tree
from pubguard.schemes import PlainScheme
from pubguard.sim.engine import Simulator
from pubguard.sim.topology import SimTopology, random_tree
from tests.model.strategies import events, filters


class NoCovering(PlainScheme):
    """The plain profile with covering switched off (every subscription is forwarded)."""

    def covers(self, f1: Filter, f2: Filter) -> bool:
        return False


def expected_for(sim: Simulator, client: str, evs: dict[str, Event]) -> dict[str, tuple[str, ...]]:
    """Oracle: event id -> the client's live subscriptions it matches (ReferenceMatcher)."""
    rm = ReferenceMatcher(sim.clients[client].filters)
    out = {}
    for eid, e in evs.items():
        hit = rm.match(e)
        if hit:
            out[eid] = tuple(sorted(hit))  # type: ignore[type-var]
    return out


def received(sim: Simulator, client: str, ids: set[str]) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.event_id, d.sub_ids) for d in sim.clients[client].deliveries if d.event_id in ids]


def assert_exact(sim: Simulator, evs: dict[str, Event]) -> None:
    for name in sim.clients:
        got = received(sim, name, set(evs))
        ids = [eid for eid, _ in got]
        assert len(ids) == len(set(ids)), f"{name} got duplicates"
        assert dict(got) == expected_for(sim, name, evs), name


def satisfying(f: Filter) -> Event | None:
    """An event matching ``f`` built from its constraints, or None if they conflict."""
    attrs: dict[str, object] = {}
    for c in f.constraints:
        v = c.value
        match c.op.value:
            case "=" | "<=" | ">=":
                attrs[c.name] = v
            case "!=":
                attrs[c.name] = (
                    (v + "x") if isinstance(v, str) else (not v) if isinstance(v, bool) else v + 1
                )
            case ">":
                attrs[c.name] = v + "a" if isinstance(v, str) else v + 1
            case "<":
                attrs[c.name] = "" if isinstance(v, str) else v - 1
            case "prefix":
                attrs[c.name] = f"{v}z"
            case "suffix":
                attrs[c.name] = f"z{v}"
            case "substring":
                attrs[c.name] = f"z{v}z"
            case _:
                attrs.setdefault(c.name, 1)
    e = Event(attrs)
    return e if f.matches(e) else None


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    n = draw(st.integers(min_value=1, max_value=15))
    parents = [draw(st.integers(min_value=0, max_value=i - 1)) for i in range(1, n)]
    kids: dict[str, list[str]] = {f"b{i}": [] for i in range(n)}
    for i, p in enumerate(parents, 1):
        kids[f"b{p}"].append(f"b{i}")
    return Tree("b0", {k: tuple(v) for k, v in kids.items()})


@settings(max_examples=60)
@given(
    tree=trees(),
    subs=st.lists(
        st.tuples(st.integers(0, 20), st.integers(0, 2), filters), min_size=1, max_size=16
    ),
    pubs=st.lists(st.tuples(st.integers(0, 14), events), min_size=1, max_size=14),
    drop=st.sets(st.integers(0, 11), max_size=6),
    wire=st.booleans(),
    seed=st.integers(0, 3),
)
def test_every_subscriber_gets_exactly_its_matching_events_once(
    tree: Tree, subs: list, pubs: list, drop: set[int], wire: bool, seed: int
) -> None:
    sim = Simulator(SimTopology(tree), seed=seed, wire=wire, jitter=0.0005)
    n = len(tree)
    sub_ids = []
    for b, k, f in subs:
        b = b % n if b < 15 else (b - 15) % min(n, 3)  # crowd some brokers: covering happens
        name = f"s{b}_{k}"
        if name not in sim.clients:
            sim.add_client(name, f"b{b}")
        sub_ids.append((name, sim.subscribe(name, f)))
    # events built to match each filter, published from elsewhere, make mistakes visible
    for i, (_, _, f) in enumerate(subs):
        e = satisfying(f)
        if e is not None:
            pubs = [*pubs, (i * 7 + len(pubs), e)]
    for b in {b % n for b, _ in pubs}:
        sim.add_client(f"p{b}", f"b{b}")
    sim.run()
    evs = {}
    for i, (b, e) in enumerate(pubs):
        evs[f"e{i}"] = Event(e.attrs, id=f"e{i}")
        sim.publish(f"p{b % n}", evs[f"e{i}"])
    sim.run()
    assert_exact(sim, evs)
    # unsubscribe some: the rest still get exactly their events, the others nothing new
    for i in sorted(drop):
        if i < len(sub_ids):
            sim.unsubscribe(*sub_ids[i])
    sim.run()
    evs2 = {}
    for i, (b, e) in enumerate(pubs):
        evs2[f"f{i}"] = Event(e.attrs, id=f"f{i}")
        sim.publish(f"p{b % n}", evs2[f"f{i}"])
    sim.run()
    assert_exact(sim, evs2)
    assert sim.drops == []
    for b in sim.brokers.values():
        for p in b._profiles.values():
            p.fwd.check_invariant()


def stock_workload(rng: random.Random, n_subs: int, n_events: int) -> tuple[list, list]:
    syms = ["IBM", "MSFT", "ORCL", "SAP"]
    fs = []
    for _ in range(n_subs):
        roll = rng.random()
        if roll < 0.4:
            fs.append(Filter.parse(f'sym = "{rng.choice(syms)}"'))
        elif roll < 0.8:
            fs.append(Filter.parse(f'sym = "{rng.choice(syms)}" && price > {rng.randint(0, 100)}'))
        else:
            fs.append(Filter.parse(f"price > {rng.randint(50, 100)}"))
    evs = [
        Event({"sym": rng.choice(syms), "price": rng.randint(0, 120)}, id=f"q{i}")
        for i in range(n_events)
    ]
    return fs, evs


def run_stock(scheme: PlainScheme, seed: int = 7) -> tuple[Simulator, dict[str, Event]]:
    rng = random.Random(seed)
    tree = ary_tree(2, 2)  # 7 brokers
    sim = Simulator(tree, [scheme], seed=seed, wire=True)
    fs, evs = stock_workload(rng, 80, 200)
    leaves = tree.leaves
    for i in range(16):
        sim.add_client(f"sub{i}", leaves[i % len(leaves)])
    for i, f in enumerate(fs):
        sim.subscribe(f"sub{i % 16}", f)
    for b in tree.nodes:
        sim.add_client(f"pub_{b}", b)
    sim.run()
    for i, e in enumerate(evs):
        sim.publish(f"pub_{tree.nodes[i % len(tree)]}", e, at=0.01 + i * 1e-4)
    sim.run()
    return sim, {e.id: e for e in evs}  # type: ignore[misc]


def test_seven_broker_tree_matches_the_reference_and_covering_saves_forwarding() -> None:
    covered, evs = run_stock(PlainScheme())
    uncovered, evs2 = run_stock(NoCovering())
    assert_exact(covered, evs)
    assert_exact(uncovered, evs2)
    # identical deliveries, far fewer forwarded subscriptions with covering
    for name in covered.clients:
        assert covered.clients[name].received_ids() == uncovered.clients[name].received_ids()
    with_cov, without = covered.messages("subscribe"), uncovered.messages("subscribe")
    assert without == 80 * 2  # every subscription climbs two levels from a leaf
    assert with_cov < without / 2
    assert covered.messages("publish") <= uncovered.messages("publish")


def test_unsubscribe_stops_delivery_and_reforwards_uncovered_filters() -> None:
    sim = Simulator(ary_tree(2, 1))  # b0 with children b1, b2
    sim.add_client("pub", "b2")
    sim.add_client("sub", "b1")
    wide = sim.subscribe("sub", "price > 10")
    sim.subscribe("sub", "price > 50")
    sim.run()
    assert sim.messages("subscribe") == 1  # the narrow one is covered at b1
    sim.unsubscribe("sub", wide)
    sim.run()
    assert sim.link_messages["unsubscribe"] == 1 and sim.messages("subscribe") == 2
    sim.publish("pub", Event({"price": 20}, id="low"))
    sim.publish("pub", Event({"price": 60}, id="high"))
    sim.run()
    assert sim.clients["sub"].received_ids() == ["high"]


def test_runs_are_deterministic_from_the_seed() -> None:
    def trace(seed: int) -> list:
        sim = Simulator(random_tree(9, random.Random(seed)), seed=seed, jitter=0.002)
        rng = random.Random(seed)
        for i in range(9):
            sim.add_client(f"c{i}", f"b{i}")
            sim.subscribe(f"c{i}", f"x > {rng.randint(0, 9)}")
        sim.run()
        for i in range(30):
            sim.publish(f"c{i % 9}", Event({"x": rng.randint(0, 9)}))  # ids from sim.rng
        sim.run()
        return [(c, d.time, d.event_id) for c, cl in sim.clients.items() for d in cl.deliveries]

    assert trace(3) == trace(3)
    assert trace(3) != trace(4)


def test_links_are_fifo_and_service_time_queues() -> None:
    sim = Simulator(ary_tree(1, 1), service_time=0.01)  # b0 - b1, 10 ms per message
    sim.add_client("s", "b0")
    sim.add_client("p", "b1")
    sim.subscribe("s", "x exists")
    sim.run()
    for i in range(5):
        sim.publish("p", Event({"x": i}, id=f"e{i}"), at=1.0)
    sim.run()
    d = sim.clients["s"].deliveries
    assert [x.event_id for x in d] == [f"e{i}" for i in range(5)]
    gaps = [round(b.time - a.time, 6) for a, b in zip(d, d[1:], strict=False)]
    assert gaps == [0.01] * 4  # queued behind each other at the brokers
    assert d[0].published_at == 1.0


def test_raw_garbage_is_dropped_and_counted() -> None:
    sim = Simulator(ary_tree(2, 1), wire=True)
    sim.add_client("c", "b1")
    sim.send_raw("c", "b1", {"op": "subscribe", "sub_id": 1})
    sim.send_raw("b0", "b1", {"op": "teleport"})
    sim.run()
    assert Counter(r.drop.reason for r in sim.drops) == {
        DropReason.MALFORMED: 1,
        DropReason.UNKNOWN_TYPE: 1,
    }
    assert [e.reason for e in sim.clients["c"].errors] == [DropReason.MALFORMED]


def test_advertisements_reach_every_broker() -> None:
    sim = Simulator(ary_tree(2, 2))
    sim.add_client("p", "b3")
    aid = sim.advertise("p", 'sym = "IBM"')
    sim.run()
    assert all(len(b.routing_snapshot()["advertisements"]) == 1 for b in sim.brokers.values())
    sim.unadvertise("p", aid)
    sim.run()
    assert all(not b.routing_snapshot()["advertisements"] for b in sim.brokers.values())
    assert [a.of for a in sim.clients["p"].acks] == ["advertise", "unadvertise"]
