"""Multi-path routing over real brokers (mutual TLS on loopback): one cluster per relabelled
spanning tree of G^ind (ops/multipath.py)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubguard.matching.reference import ReferenceMatcher
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.config import parse_cluster_config
from pubguard.ops.multipath import MultiPathCluster
from tests.loopback import LoopThread

pytestmark = pytest.mark.slow  # 39 + 14 in-process brokers with TLS (~25 s)


def _cluster(aloop: LoopThread, state: Path, arity: int, ind: int) -> Iterator[MultiPathCluster]:
    toml = f'host = "127.0.0.1"\n[topology]\nkind = "tree"\narity = {arity}\ndepth = 2\n'
    mp = MultiPathCluster(
        parse_cluster_config(tomllib.loads(toml), base=state), ind, in_process=True
    )
    aloop.run(mp.start(), timeout=120)
    try:
        yield mp
    finally:
        aloop.run(mp.stop(), timeout=60)


@pytest.fixture(scope="module")
def mp2(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiPathCluster]:
    yield from _cluster(aloop, tmp_path_factory.mktemp("mp2"), 2, 2)


@pytest.fixture(scope="module")
def mp3(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiPathCluster]:
    yield from _cluster(aloop, tmp_path_factory.mktemp("mp3"), 3, 3)


def test_trees_are_the_theorem_paths(mp3: MultiPathCluster) -> None:
    from pubguard.overlay.resilient import independent_paths, is_independent

    leaf = mp3.tree.leaves[4]
    paths = mp3.paths_of(leaf)
    assert is_independent([[*p, "S"] for p in paths])
    assert [p[:-1] for p in paths] == [q[:-1] for q in independent_paths(mp3.tree, 3, leaf)]


def test_probabilistic_paths_match_the_reference(mp2: MultiPathCluster, aloop: LoopThread) -> None:
    """psguard.txt §4.2: a token on ind_t trees, each event on one chosen uniformly; every
    subscriber gets exactly what the reference matcher says, once."""
    filters = {"s0": 'topic = "hot"', "s1": 'topic = "cold"', "s2": 'topic = "hot"'}
    ind_t = {"hot": 2, "cold": 1}

    async def scenario() -> tuple[dict[str, list[str]], dict[str, set[str]], set[int]]:
        subs, clients = {}, []
        ref = ReferenceMatcher()
        for i, (name, f) in enumerate(filters.items()):
            c = await mp2.connect(f"p-{name}", home=mp2.tree.leaves[i])
            clients.append(c)
            topic = f.split('"')[1]
            subs[name] = await c.subscribe(f, paths=ind_t[topic])
            ref.add(name, Filter.parse(f))
            await c.flush()
        await mp2.wait_quiescent()
        pub = await mp2.connect("p-pub", seed=3)
        clients.append(pub)
        expected: dict[str, set[str]] = {n: set() for n in filters}
        used: set[int] = set()
        for i in range(30):
            topic = "hot" if i % 3 else "cold"
            ev = Event({"topic": topic, "i": i}, id=f"p{i}")
            trees = await pub.publish(ev, paths=ind_t[topic])
            if topic == "hot":
                used |= set(trees)
            for key in ref.match(ev):
                expected[str(key)].add(f"p{i}")
        await pub.flush()
        got = {
            n: [(await s.next(timeout=20)).event.id or "" for _ in expected[n]]
            for n, s in subs.items()
        }
        pend = sum(s.pending for s in subs.values())
        for c in clients:
            await c.close()
        assert pend == 0
        return got, expected, used

    got, expected, used = aloop.run(scenario(), timeout=120)
    assert used == {0, 1}  # hot events took both of its trees
    for n, ids in got.items():
        assert sorted(ids) == sorted(expected[n]) and len(ids) == len(set(ids)), n


@pytest.mark.parametrize("which", ["mp2", "mp3"])
def test_flooded_events_arrive_exactly_once_with_one_tree_left(
    which: str, request: pytest.FixtureRequest, aloop: LoopThread
) -> None:
    """eventguard.txt §5.2: sent down every tree, deduplicated by the subscriber; with one
    broker of the subscriber's path blackholed on every tree but one, every event still
    arrives, once."""
    mp: MultiPathCluster = request.getfixturevalue(which)
    ind = mp.ind

    async def scenario() -> tuple[list[str], list[str], int, int]:
        leaf = mp.tree.leaves[-1]
        sub = await mp.connect(f"{which}-sub", home=leaf)
        pub = await mp.connect(f"{which}-pub")
        try:
            s = await sub.subscribe('topic = "w"')
            await sub.flush()
            await mp.wait_quiescent()
            for i in range(5):
                await pub.publish(Event({"topic": "w", "i": i}, id=f"{which}-a{i}"))
            first = [(await s.next(timeout=20)).event.id or "" for _ in range(5)]
            paths = mp.paths_of(leaf)
            for k in range(ind - 1):  # the depth-1 broker of Q_k, only on T_k
                await mp.blackhole(k, paths[k][1])
            for i in range(20):
                await pub.publish(Event({"topic": "w", "i": i}, id=f"{which}-b{i}"))
            await pub.flush()
            second = [(await s.next(timeout=20)).event.id or "" for _ in range(20)]
            return first, second, s.duplicates, s.pending
        finally:
            await sub.close()
            await pub.close()

    first, second, dups, pending = aloop.run(scenario(), timeout=120)
    assert sorted(first) == sorted(f"{which}-a{i}" for i in range(5))
    assert sorted(second) == sorted(f"{which}-b{i}" for i in range(20))
    assert pending == 0
    assert dups >= 5 * (ind - 1) - (ind - 1)  # copies of the first batch, dropped
