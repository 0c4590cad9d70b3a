"""Multi-path routing over real broker processes (mutual TLS on loopback): one process per
node serves every relabelled spanning tree of G^ind (ops/multipath.py, net/server/multitree.py),
set up from ``[topology] ind`` in the cluster config."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pubguard.matching.reference import ReferenceMatcher
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.config import load_broker_config, parse_cluster_config
from pubguard.ops.keyservice_proc import ENDPOINT_FILE
from pubguard.ops.multipath import MultiPathClient, MultiPathCluster, MultiPathSubscription
from pubguard.schemes.registry import HOSPITAL
from tests.loopback import LoopThread, until

pytestmark = pytest.mark.slow  # two clusters of 7 broker processes, each serving 2-3 trees

#: b1 (depth 1 on T_0) blackholes the topic "dark"; b2 eavesdrops (its counts in its status)
MALICIOUS = (
    '[brokers.b1.malicious]\nmodel = "selective"\ntopics = ["dark"]\n'
    '[brokers.b2.malicious]\nmodel = "eavesdrop"\n'
)

#: ind = 2 on the binary tree of depth 2; ind = 3 on a tree whose inner nodes have 3 children
#: (b1's children b4-b6 reach b0 through b1, b2 and b3 on T_0, T_1 and T_2)
TOPOLOGIES = {
    2: 'kind = "tree"\narity = 2\ndepth = 2\nind = 2\n[broker]\nprofiles = ["plain", "default"]\n'
    # malicious broker processes (net/server/malicious.py), on a topic no other test uses
    + MALICIOUS,
    3: 'kind = "edges"\nind = 3\nedges = [["b0", "b1"], ["b0", "b2"], ["b0", "b3"], '
    '["b1", "b4"], ["b1", "b5"], ["b1", "b6"]]\n',
}


def _cluster(aloop: LoopThread, state: Path, ind: int) -> Iterator[MultiPathCluster]:
    toml = f'host = "127.0.0.1"\n[topology]\n{TOPOLOGIES[ind]}'
    cfg = parse_cluster_config(tomllib.loads(toml), base=state)
    assert cfg.ind == ind
    mp = MultiPathCluster(cfg)
    aloop.run(mp.start(), timeout=120)
    try:
        yield mp
    finally:
        aloop.run(mp.stop(), timeout=60)


@pytest.fixture(scope="module")
def mp2(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiPathCluster]:
    yield from _cluster(aloop, tmp_path_factory.mktemp("mp2"), 2)


@pytest.fixture(scope="module")
def mp3(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiPathCluster]:
    yield from _cluster(aloop, tmp_path_factory.mktemp("mp3"), 3)


def test_one_process_per_node_serves_every_tree(mp3: MultiPathCluster, aloop: LoopThread) -> None:
    """Each node is one process; its T_k server has T_k's parent, and the root-to-leaf paths
    of the trees are the theorem's independent paths."""
    from pubguard.overlay.resilient import independent_paths, is_independent

    assert len({p.pid for p in mp3.procs.values()}) == len(mp3.config.brokers) == 7
    paths = mp3.paths_of("b4")
    assert is_independent([[*p, "S"] for p in paths])
    assert [p[:-1] for p in paths] == [q[:-1] for q in independent_paths(mp3.tree, 3, "b4")]

    async def parents() -> list[str | None]:
        return [(await mp3.view(k).status("b5"))["parent"] for k in range(3)]

    # T_k maps the edge b1 - b4 to sib_k(b1) - sib_k(b4): b5 sits under b1, b2, b3 in turn
    assert aloop.run(parents()) == ["b:b1", "b:b2", "b:b3"]


def test_probabilistic_paths_match_the_reference(mp2: MultiPathCluster, aloop: LoopThread) -> None:
    """psguard.txt §4.2 with the default profile (tokens, permits and sealed bodies on every
    tree, from one key bundle): a token on ind_t trees, each event on one chosen uniformly;
    every subscriber gets exactly what the reference matcher says, once."""
    filters = {"s0": 'topic = "hot"', "s1": 'topic = "cold"', "s2": 'topic = "hot"'}
    ind_t = {"hot": 2, "cold": 1}

    async def scenario() -> tuple[dict[str, list[str]], dict[str, set[str]], set[int], int]:
        subs, clients = {}, []
        ref = ReferenceMatcher()
        for i, (name, f) in enumerate(filters.items()):
            c = await mp2.connect_paths(f"p-{name}", home=mp2.tree.leaves[i], profile="default")
            clients.append(c)
            topic = f.split('"')[1]
            subs[name] = await c.subscribe(f, paths=ind_t[topic])
            ref.add(name, Filter.parse(f))
            await c.flush()
        await mp2.wait_quiescent()
        pub = await mp2.connect_paths("p-pub", seed=3, profile="default")
        clients.append(pub)
        expected: dict[str, set[str]] = {n: set() for n in filters}
        used: set[int] = set()
        for i in range(30):
            topic = "hot" if i % 3 else "cold"
            attrs = {"topic": topic, "age": i, "patientRecord": f"r{i}"}
            ev = Event(attrs, id=f"p{i}", type=HOSPITAL.name)
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
        await mp2.wait_quiescent()
        pend = sum(s.pending for s in subs.values())
        for c in clients:
            await c.close()
        return got, expected, used, pend

    got, expected, used, pend = aloop.run(scenario(), timeout=120)
    assert used == {0, 1}  # hot events took both of its trees
    assert pend == 0
    for n, ids in got.items():
        assert sorted(ids) == sorted(expected[n]) and len(ids) == len(set(ids)), n


def test_dropping_broker_other_tree_still_delivers(
    mp2: MultiPathCluster, aloop: LoopThread
) -> None:
    """eventguard.txt §5 / §5.2: b1, the depth-1 broker on the T_0 path of a subscriber at b3,
    is a live blackhole for topic "dark" (links up, frames acknowledged, publications
    silently dropped: ``[brokers.b1.malicious]``). Sent down both trees, every event still
    reaches every subscriber exactly once, as the reference matcher says, via T_1. With one
    path only (T_0, i.e. ind = 1) the same broker silences "dark" for the subscriber behind
    it, while the one at b5 (T_0 path through b2) gets it; b2, an eavesdropper, counts the
    topics it routed."""
    assert mp2.paths_of("b3")[0] == ["b0", "b1", "b3"] and "b1" not in mp2.paths_of("b3")[1]
    assert "b1" not in mp2.paths_of("b5")[0]
    f = 'topic != "none"'
    homes = {"all": ("b3", None), "t0": ("b3", 1), "far": ("b5", 1)}  # name: (home, trees)
    ref = ReferenceMatcher()
    for name in homes:
        ref.add(name, Filter.parse(f))
    events = [Event({"topic": "dark" if i % 2 else "lit", "i": i}, id=f"mal{i}") for i in range(16)]
    want = {n: [e.id or "" for e in events if n in {str(k) for k in ref.match(e)}] for n in homes}
    want["t0"] = [i for i in want["t0"] if int(i[3:]) % 2 == 0]  # the blackhole's effect

    def topics(st: dict[str, Any]) -> dict[str, int]:
        return {t: st["malicious"]["tokens"].get(t, 0) for t in ("dark", "lit")}

    async def scenario() -> tuple[dict[str, list[str]], dict[str, int], int, dict[str, int]]:
        clients: list[MultiPathClient] = []
        try:
            dropped0 = (await mp2.status("b1"))["malicious"]["dropped"]
            seen0 = topics(await mp2.status("b2"))
            subs = {}
            for name, (home, trees) in homes.items():
                c = await mp2.connect_paths(f"mal-{name}", home=home)
                clients.append(c)
                subs[name] = await c.subscribe(f, paths=trees)
                await c.flush()
            await mp2.wait_quiescent()
            pub = await mp2.connect_paths("mal-pub")
            clients.append(pub)
            for ev in events:
                await pub.publish(ev)  # on both trees
            await pub.flush()
            got = {
                n: [(await s.next(timeout=20)).event.id or "" for _ in want[n]]
                for n, s in subs.items()
            }
            await mp2.wait_quiescent()
            pending = {n: s.pending for n, s in subs.items()}
            dropped = (await mp2.status("b1"))["malicious"]["dropped"] - dropped0
            seen = {t: n - seen0[t] for t, n in topics(await mp2.status("b2")).items()}
            return got, pending, dropped, seen
        finally:
            for c in clients:
                await c.close()

    got, pending, dropped, seen = aloop.run(scenario(), timeout=120)
    for name, ids in got.items():
        assert sorted(ids) == sorted(want[name]) and len(set(ids)) == len(ids), name
        assert pending[name] == 0, name  # no second copy; nothing "dark" reached t0
    assert len(want["all"]) == 16 and len(want["t0"]) == 8
    assert dropped == 8  # each "dark" event once, on its way to b3 on T_0
    assert seen == {"dark": 8, "lit": 8}  # b2 routed each to b5 on T_0
    log = (mp2.broker_dir("b1") / "broker.log").read_text()
    assert "MALICIOUS model 'selective'" in log


TOPICS = ("w", "x", "y")


def _filters(leaves: list[str]) -> dict[str, str]:
    """One subscriber per leaf position, with overlapping topic filters."""
    return {
        leaf: (f'topic = "{TOPICS[i % 3]}"' if i % 2 == 0 else f'topic != "{TOPICS[i % 3]}"')
        for i, leaf in enumerate(leaves)
    }


@pytest.mark.parametrize("which", ["mp2", "mp3"])
def test_killed_brokers_every_event_arrives_once(
    which: str, request: pytest.FixtureRequest, aloop: LoopThread
) -> None:
    """eventguard.txt §5.2: each event is multicast down every tree and deduplicated by the
    subscriber. With the depth-1 broker of the first subscriber's path killed on every tree
    but one (a killed process leaves every tree), every subscriber still gets exactly the
    events the reference matcher gives it, each once. Restarted (ind = 2), the killed broker
    catches up on every tree from its durable state: each subscriber then has had exactly one
    copy per tree, and the dedup dropped all but the first."""
    mp: MultiPathCluster = request.getfixturevalue(which)
    ind = mp.ind
    leaves = [n for n in mp.tree.leaves if mp.tree.parent[n] != mp.tree.root]
    filters = _filters(leaves)
    ref = ReferenceMatcher()
    for leaf, f in filters.items():
        ref.add(leaf, Filter.parse(f))

    async def scenario() -> tuple[
        dict[str, list[str]], dict[str, list[str]], dict[str, int], list[str], dict[str, int]
    ]:
        clients: list[MultiPathClient] = []
        subs: dict[str, MultiPathSubscription] = {}
        try:
            for leaf, f in filters.items():
                c = await mp.connect_paths(f"{which}-{leaf}", home=leaf)
                clients.append(c)
                subs[leaf] = await c.subscribe(f)
                await c.flush()
            await mp.wait_quiescent()
            pub = await mp.connect_paths(f"{which}-pub")
            clients.append(pub)
            killed = [mp.paths_of(leaves[0])[k][1] for k in range(ind - 1)]
            for b in killed:
                mp.kill(b)
            events = [Event({"topic": TOPICS[i % 3], "i": i}, id=f"{which}-{i}") for i in range(24)]
            for ev in events:
                assert await pub.publish(ev) == list(range(ind))
            await pub.flush()
            want = {
                leaf: [e.id or "" for e in events if leaf in {str(k) for k in ref.match(e)}]
                for leaf in filters
            }
            got = {
                leaf: [(await s.next(timeout=20)).event.id or "" for _ in want[leaf]]
                for leaf, s in subs.items()
            }
            await mp.wait_quiescent()  # the live brokers: every copy delivered
            pending = {leaf: s.pending for leaf, s in subs.items()}
            # durability and catch-up per tree: restarted, the killed brokers pass on what
            # was parked for them on every tree, and those copies are the duplicates dropped
            # (on ind = 2 only: one restart is enough to show it, and each costs seconds)
            back = killed if ind == 2 else []
            for b in back:
                await mp.restart(b)
            copies = {leaf: len(want[leaf]) * len(back) for leaf in filters}
            await until(
                lambda: all(subs[leaf].duplicates >= copies[leaf] for leaf in filters),
                "every tree's copies caught up",
            )
            await mp.wait_quiescent()
            dups = {leaf: s.duplicates - copies[leaf] for leaf, s in subs.items()}
            extra = {leaf: s.pending for leaf, s in subs.items()}
            return got, want, pending | {f"{k}:extra": v for k, v in extra.items()}, killed, dups
        finally:
            for c in clients:
                await c.close()

    got, want, pending, killed, dups = aloop.run(scenario(), timeout=180)
    assert len(killed) == ind - 1 and all(want.values())
    for leaf, ids in got.items():
        assert sorted(ids) == sorted(want[leaf]) and len(set(ids)) == len(ids), leaf
        assert pending[leaf] == 0, leaf  # no second copy, no stray event
        assert pending[f"{leaf}:extra"] == 0 and dups[leaf] == 0, leaf  # each tree's copy once


def test_every_tree_polls_the_key_services_revocation_list(tmp_path: Path) -> None:
    """A revoked key is refused on every path: the brokers of ``T_1 ..`` poll the same
    revocation list as ``T_0`` (the key service's, whose address sits in ``T_0``'s state)."""
    toml = (
        'host = "127.0.0.1"\n[topology]\nkind = "tree"\narity = 2\ndepth = 1\nind = 2\n'
        '[broker]\nprofiles = ["default"]\n'
    )
    mp = MultiPathCluster(parse_cluster_config(tomllib.loads(toml), base=tmp_path), keyservice=True)
    assert mp.bundle is not None  # the KDC the key service serves (and revokes from)
    mp.write_configs()
    assert mp.revocation_wired
    for k in range(2):
        tree = mp.view(k)
        for name in mp.config.brokers:
            rev = load_broker_config(tree.config_path(name)).revocation
            assert rev is not None and rev.endpoint_file == mp.state_dir / ENDPOINT_FILE, (k, name)
