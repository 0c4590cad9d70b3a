"""Real broker processes on 127.0.0.1 with mutual TLS: routing, covering, unsubscribe, crash.

One 7-broker binary tree (the embedded default) is shared by the module; each test uses its
own attribute names so the tests do not see each other's traffic.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from pubguard.matching.reference import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.net.client.client import Client, Subscription
from pubguard.ops.cluster import LocalCluster
from tests.loopback import PATIENCE, LoopThread

pytestmark = pytest.mark.slow

SYMS = ["ibm", "hp", "sun", "dell", "acme"]


def _filter(rng: random.Random, tag: str) -> Filter:
    cands = [
        (f"{tag}age", rng.choice([">", "<", ">=", "<=", "="]), rng.randrange(0, 100)),
        (f"{tag}sym", rng.choice(["=", "!=", "prefix"]), rng.choice(SYMS)[: rng.randrange(1, 4)]),
        (f"{tag}price", rng.choice([">", "<"]), rng.uniform(0, 50)),
    ]
    return Filter.of(*rng.sample(cands, rng.randrange(1, 3)))


def _event(rng: random.Random, tag: str, i: int) -> Event:
    attrs: dict[str, Any] = {f"{tag}age": rng.randrange(0, 100), f"{tag}sym": rng.choice(SYMS)}
    if rng.random() < 0.7:
        attrs[f"{tag}price"] = round(rng.uniform(0, 50), 2)
    return Event(attrs, id=f"{tag}e{i}", payload=b"p" * rng.randrange(0, 64))


async def _drain(sub: Subscription) -> list[str]:
    out = []
    while sub.pending:
        d = await sub.next(timeout=1)
        out.append(d.event.id)
    return out


def test_routing_matches_reference_over_7_brokers(
    aloop: LoopThread, cluster7: LocalCluster
) -> None:
    rng = random.Random(11)
    tag = "r_"

    async def scenario() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
        clients: list[Client] = []
        subs: dict[str, Subscription] = {}
        ref = ReferenceMatcher()
        try:
            for i in range(14):
                broker = cluster7.config.brokers[i % 7]
                c = await cluster7.connect(broker, f"rsub{i}")
                clients.append(c)
                f = _filter(rng, tag)
                subs[f"rsub{i}"] = await c.subscribe(f)
                await c.flush()
                ref.add(f"rsub{i}", f)
            await cluster7.wait_quiescent()
            pubs = [await cluster7.connect(b, f"rpub{b}") for b in ("b0", "b2", "b3", "b6")]
            clients += pubs
            expected: dict[str, set[str]] = defaultdict(set)
            for i in range(400):
                ev = _event(rng, tag, i)
                await pubs[i % len(pubs)].publish(ev)
                for key in ref.match(ev):
                    expected[str(key)].add(str(ev.id))
            for p in pubs:
                await p.flush()
            await cluster7.wait_quiescent()
            got = {k: await _drain(s) for k, s in subs.items()}
            return got, expected
        finally:
            for c in clients:
                await c.close()

    got, expected = aloop.run(scenario(), timeout=300)
    assert sum(len(v) for v in expected.values()) > 200  # the workload really exercises routing
    for key, ids in got.items():
        assert len(ids) == len(set(ids)), f"{key} got duplicates"
        assert set(ids) == expected.get(key, set()), key


def test_covering_suppresses_forwarding_and_unsubscribe_stops_delivery(
    aloop: LoopThread, cluster7: LocalCluster
) -> None:
    async def scenario() -> None:
        a = await cluster7.connect("b6", "cov-a")
        b = await cluster7.connect("b6", "cov-b")
        pub = await cluster7.connect("b3", "cov-pub")
        try:
            before = await cluster7.statuses()
            # each broker process tuned its collector once started (net/gc_tuning.py)
            assert all(st["gc"]["tuned"] and st["gc"]["frozen"] > 0 for st in before.values())
            wide = await a.subscribe("cov > 10")
            await a.flush()
            await cluster7.wait_quiescent()
            mid = await cluster7.statuses()
            narrow = await b.subscribe("cov > 20")  # covered by cov > 10: not forwarded
            also = await a.subscribe("cov > 50")
            await a.flush()
            await b.flush()
            await cluster7.wait_quiescent()
            after = await cluster7.statuses()
            for name in ("b6", "b2"):  # the leaf and its parent forwarded one filter each
                assert mid[name]["forwarded"] == before[name]["forwarded"] + 1
                assert after[name]["forwarded"] == mid[name]["forwarded"]
            sub_in = "in.subscribe"
            assert after["b2"]["counters"][sub_in] == mid["b2"]["counters"][sub_in]
            assert after["b0"]["counters"][sub_in] == mid["b0"]["counters"][sub_in]

            await pub.publish(Event({"cov": 60}, id="cov1"))
            await pub.flush()
            await cluster7.wait_quiescent()
            got = [await wide.next(PATIENCE), await narrow.next(PATIENCE)]
            assert [d.event.id for d in got] == ["cov1"] * 2
            assert (await also.next(PATIENCE)).event.id == "cov1"

            await narrow.unsubscribe()
            await wide.unsubscribe()
            await a.flush()
            await b.flush()
            await cluster7.wait_quiescent()
            delivers_b = b.delivers
            await pub.publish(Event({"cov": 30}, id="cov2"))  # only `narrow` and `wide` matched
            await pub.publish(Event({"cov": 70}, id="cov3"))  # `also` still matches
            await pub.flush()
            await cluster7.wait_quiescent()
            assert (await also.next(PATIENCE)).event.id == "cov3"
            assert b.delivers == delivers_b  # nothing reaches the unsubscribed client
            assert also.pending == 0
            st = await cluster7.status("b6")
            assert st["drops"] == {}
        finally:
            for c in (a, b, pub):
                await c.close()

    aloop.run(scenario(), timeout=300)
