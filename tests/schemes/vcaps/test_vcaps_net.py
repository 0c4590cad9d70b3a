"""The three v-CAPS profiles on real broker processes (mutual TLS on loopback, durable SQLite,
every broker recording what it sees): per-subscription deliveries equal the reference
matcher's, a canary filter value is in no broker's log, database or recorded frames, and bad
tokens are dropped with their reason at the first broker. One cluster for the module."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from random import Random
from typing import Any

import msgpack
import pytest

from pubguard.errors import RefusedError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.base import ClientScheme, ProtectedFilter
from pubguard.schemes.vcaps import FAST, PROFILES, RV, SRV
from pubguard.sim.workloads import vcaps_events, vcaps_filters
from tests.loopback import PATIENCE, LoopThread, keyed_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CANARY = 987_654_321
CANARY_FILTER = f"a1 = {CANARY}"
RECORD = "".join(f"[brokers.{b}]\nrecord = true\n" for b in ("b0", "b1", "b2", "b3"))
CLUSTER = f"""
publishers = ["publisher"]
[topology]
kind = "edges"
edges = [["b0", "b1"], ["b0", "b2"], ["b1", "b3"]]
[broker]
profiles = ["plain", "vcaps-rv", "vcaps-srv", "vcaps-srv-fast"]
{RECORD}"""
AT = {"s0": "b3", "s1": "b3", "s2": "b2", "s3": "b1"}


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with keyed_cluster(
        aloop, tmp_path_factory.mktemp("vcaps"), CLUSTER, identities=["publisher"]
    ) as c:
        yield c


class Canned(ClientScheme):
    """An attacker's client: subscribes with exactly the wire filter it is handed."""

    def __init__(self) -> None:
        self.profile = RV
        self.next: dict[str, Any] = {}

    def protect_filter(self, f: Filter, *, now: float, rng: Any = None) -> ProtectedFilter:
        return ProtectedFilter(self.next)

    protect_advertisement = protect_filter

    def protect_event(self, e: Event, *, now: float, rng: Any = None) -> Any:
        raise NotImplementedError

    def open_event(self, *a: Any, **kw: Any) -> Event:
        raise NotImplementedError


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
def test_deliveries_equal_the_reference_matcher(
    aloop: LoopThread, cluster: LocalCluster, profile: str
) -> None:
    rng = Random(PROFILES.index(profile))
    filters = [*vcaps_filters(12, rng), Filter.parse(CANARY_FILTER)]
    events = [*vcaps_events(12, rng, start=100 * (1 + PROFILES.index(profile)))]
    events.append(Event({"a1": CANARY}, id=f"canary-{profile}"))

    async def scenario() -> dict[tuple[str, int], set[str]]:
        bundle = cluster.bundle
        pub = await cluster.connect("b0", "publisher", scheme=bundle.client(profile, "publisher"))
        subs = {
            s: await cluster.connect(b, s, scheme=bundle.client(profile, s)) for s, b in AT.items()
        }
        live: dict[tuple[str, int], Any] = {}
        try:
            for i, flt in enumerate(filters):
                s = f"s{i % len(AT)}"
                live[(s, i)] = await subs[s].subscribe(flt)
            for c in subs.values():
                await c.flush()
            await cluster.wait_quiescent()
            for e in events:
                await pub.publish(e)
            await pub.flush()
            await cluster.wait_quiescent()
            got: dict[tuple[str, int], set[str]] = {}
            for k, sub in live.items():
                got[k] = set()
                while sub.pending:
                    d = await sub.next(timeout=PATIENCE)
                    got[k].add(str(d.event.id))
            return got
        finally:
            await pub.close()
            for c in subs.values():
                await c.close()

    got = aloop.run(scenario())
    want = {
        (f"s{i % len(AT)}", i): {str(e.id) for e in events if flt.matches(e)}
        for i, flt in enumerate(filters)
    }
    assert got == want and any(want.values())
    assert got[(f"s{(len(filters) - 1) % len(AT)}", len(filters) - 1)] == {f"canary-{profile}"}


def test_canary_filter_value_in_no_broker_file(aloop: LoopThread, cluster: LocalCluster) -> None:
    aloop.run(cluster.wait_quiescent())
    files = {
        p: p.read_bytes()
        for b in cluster.config.brokers
        for p in cluster.broker_dir(b).rglob("*")
        if p.is_file()
    }
    names = {p.name for p in files}
    assert {"broker.log", "broker.db", "seen.msgpack"} <= names
    assert sum(b"canary-vcaps" in data for data in files.values()) >= 3  # the events were seen
    needles = (str(CANARY).encode(), msgpack.packb(CANARY), msgpack.packb(str(CANARY)))
    assert [str(p) for p, data in files.items() if any(n in data for n in needles)] == []


def test_bad_tokens_are_dropped_at_the_first_broker(
    aloop: LoopThread, cluster: LocalCluster
) -> None:
    bundle = cluster.bundle

    async def drops() -> dict[str, dict[str, int]]:
        return {n: dict(s["drops"]) for n, s in (await cluster.statuses()).items()}

    async def scenario() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]], list[str]]:
        canned = Canned()
        mallory = await cluster.connect("b3", "mallory", scheme=canned)
        pub = await cluster.connect("b3", "mallory-pub", scheme=bundle.client(RV, "mallory-pub"))
        try:
            before = await drops()
            reg = bundle.vcaps.publisher(RV)
            good = reg.register(Filter.parse("a2 = 5"), subscriber="mallory")
            for wire in ({**good, "sig": bytes(64)}, {**good, "pub": "nobody"}):
                canned.next = wire
                await mallory.subscribe("a2 = 5")
                with contextlib.suppress(RefusedError):
                    await mallory.flush()
            pe = reg.publish(Event({"a2": 5}, id="tampered"), now=0.0)
            routing = {**pe.routing, "rv": [*pe.routing["rv"], bytes(16)]}
            await pub.publish_protected(type(pe)(pe.event_id, routing, pe.body, pe.meta))
            with contextlib.suppress(RefusedError):
                await pub.flush()
            deadline = asyncio.get_running_loop().time() + PATIENCE
            while len(mallory.errors) + len(pub.errors) < 3:  # the replies name the reason
                assert asyncio.get_running_loop().time() < deadline, await drops()
                await asyncio.sleep(0.05)
            await cluster.wait_quiescent()
            errors = sorted(str(e.reason) for e in [*mallory.errors, *pub.errors])
            return before, await drops(), errors
        finally:
            await mallory.close()
            await pub.close()

    before, after, errors = aloop.run(scenario())
    diff = {
        b: {r: n - before[b].get(r, 0) for r, n in d.items() if n != before[b].get(r, 0)}
        for b, d in after.items()
    }
    assert diff == {b: ({"forged": 2, "unauthorised": 1} if b == "b3" else {}) for b in after}
    assert errors == ["forged", "forged", "unauthorised"]
