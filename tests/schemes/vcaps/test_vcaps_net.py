"""The three v-CAPS profiles on real broker processes (mutual TLS on loopback, durable SQLite,
every broker recording what it sees): per-subscription deliveries equal the reference
matcher's, a canary filter value is in no broker's log, database or recorded frames, and bad
tokens are dropped with their reason at the first broker. One cluster for the module."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from random import Random
from typing import Any

import msgpack
import pytest

from pubguard.crypto.x509 import Role, client_ssl_context, server_ssl_context
from pubguard.errors import RefusedError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.tls import tls_password
from pubguard.net.vcaps_registrar import RemoteRegistrar, VcapsRegistrarServer, return_ciphertexts
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.base import ClientScheme, ProtectedFilter
from pubguard.schemes.vcaps import FAST, PROFILES, RV, SRV, VcapsClient
from pubguard.schemes.vcaps.registrar import VcapsRegistrar
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


def _canary_id(profile: str) -> str:
    return f"canary-event-{CANARY}-{profile}"


@dataclass(frozen=True)
class Run:
    """One profile's scenario: deliveries by (subscriber, filter index), what the reference
    matcher wants, and the wire id of the canary event."""

    got: dict[tuple[str, int], set[str]]
    want: dict[tuple[str, int], set[str]]
    canary_wire_id: str


@pytest.fixture(scope="module")
def runs(aloop: LoopThread, cluster: LocalCluster) -> dict[str, Run]:
    """Every profile's subscriptions and publications, once for the module (the canary test
    reads the brokers' files these leave, so it does not depend on test order)."""
    return {p: _scenario(aloop, cluster, p) for p in (RV, SRV, FAST)}


def _scenario(aloop: LoopThread, cluster: LocalCluster, profile: str) -> Run:
    rng = Random(PROFILES.index(profile))
    filters = [*vcaps_filters(12, rng), Filter.parse(CANARY_FILTER)]
    events = [*vcaps_events(12, rng, start=100 * (1 + PROFILES.index(profile)))]
    events.append(Event({"a1": CANARY}, id=_canary_id(profile)))
    bundle = cluster.bundle
    pub_scheme = bundle.client(profile, "publisher")

    async def scenario() -> dict[tuple[str, int], set[str]]:
        pub = await cluster.connect("b0", "publisher", scheme=pub_scheme)
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
    return Run(got, want, pub_scheme.wire_id(_canary_id(profile)))


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
def test_deliveries_equal_the_reference_matcher(runs: dict[str, Run], profile: str) -> None:
    r = runs[profile]
    assert r.got == r.want and any(r.want.values())
    # the subscriber gets the application's id back from inside E_KN(N)
    last = len(r.want) - 1
    assert r.got[(f"s{last % len(AT)}", last)] == {_canary_id(profile)}


def test_canary_filter_value_and_event_id_in_no_broker_file(
    aloop: LoopThread, cluster: LocalCluster, runs: dict[str, Run]
) -> None:
    aloop.run(cluster.wait_quiescent())
    files = {
        p: p.read_bytes()
        for b in cluster.config.brokers
        for p in cluster.broker_dir(b).rglob("*")
        if p.is_file()
    }
    names = {p.name for p in files}
    assert {"broker.log", "broker.db", "seen.msgpack"} <= names
    for r in runs.values():  # the canary events were routed, under their opaque wire ids
        assert sum(r.canary_wire_id.encode() in data for data in files.values()) >= 2
    needles = (str(CANARY).encode(), msgpack.packb(CANARY), msgpack.packb(str(CANARY)))
    needles += tuple(_canary_id(p).encode() for p in runs)
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


def test_stage1_over_mutual_tls_and_recovery_from_broker_state(
    aloop: LoopThread, cluster: LocalCluster, runs: dict[str, Run]
) -> None:
    """Stage I (§4.1) as requests to the publisher's registrar over mutual TLS, ``K_N`` from
    it, and §8: a restarted publisher (empty PFPoset) delivers nothing until the brokers'
    stored ``E_ks(F)`` come back over the same channel; then deliveries are the reference's
    again."""
    pki, bundle, profile = cluster.pki, cluster.bundle, FAST
    ident = pki.identity("publisher-registrar", Role.KDC)
    server_ctx = server_ssl_context(
        ident.cert_path, ident.key_path, ident.ca_path, password=tls_password()
    )
    texts = ("a1 > 10", "a1 > 20", "a1 > 20 && a2 = 3", "a2 = 3", "a1 < 5", "a3 = 7")
    filters = [Filter.parse(t) for t in texts]  # with coverings: F_pred / F_succ not empty
    attrs: list[dict[str, int]] = [
        {"a1": 25, "a2": 3},
        {"a1": 2},
        {"a3": 7, "a1": 15},  # before the restart
        {"a1": 30},
        {"a2": 3},  # after it, before recovery
        {"a1": 22, "a2": 3, "a3": 7},
        {"a1": 4, "a2": 3},
        {"a1": 11},  # after recovery
    ]
    events = [Event(a, id=f"reg-{i}") for i, a in enumerate(attrs)]
    subs = {"r0": "b3", "r1": "b2"}
    regloop = LoopThread()  # the publisher's process: its registrar runs apart from the clients

    def restart_publisher() -> tuple[VcapsRegistrarServer, Any]:
        bundle.vcaps.publishers.pop((profile, "publisher"), None)  # a fresh core, same keys
        core = VcapsRegistrar([bundle.vcaps.publisher(profile)])
        server = VcapsRegistrarServer(core, server_ctx)
        regloop.run(server.start())
        return server, core

    def remote(port: int, ctx: Any) -> RemoteRegistrar:
        return RemoteRegistrar("127.0.0.1", port, ctx, publisher="publisher", profile=profile)

    def broker_ctx(b: str) -> Any:
        i = pki.identity(b, Role.BROKER)
        return client_ssl_context(i.cert_path, i.key_path, i.ca_path, password=tls_password())

    async def publish_and_collect(
        subscriptions: dict[tuple[str, int], Any], evs: list[Event]
    ) -> dict[tuple[str, int], set[str]]:
        pub = await cluster.connect("b0", "publisher", scheme=bundle.client(profile, "publisher"))
        try:
            for e in evs:
                await pub.publish(e)
            await pub.flush()
        finally:
            await pub.close()
        await cluster.wait_quiescent()
        got: dict[tuple[str, int], set[str]] = {}
        for k, sub in subscriptions.items():
            got[k] = set()
            while sub.pending:
                got[k].add(str((await sub.next(timeout=PATIENCE)).event.id))
        return got

    server, core = restart_publisher()
    proxies = {s: remote(server.port, pki.client_context(s)) for s in subs}

    async def scenario() -> tuple[dict[Any, set[str]], dict[Any, set[str]], dict[Any, set[str]]]:
        clients = {
            s: await cluster.connect(b, s, scheme=VcapsClient(s, proxies[s], registrar=proxies[s]))
            for s, b in subs.items()
        }
        try:
            live = {}
            for i, flt in enumerate(filters):
                s = f"r{i % 2}"
                live[(s, i)] = await clients[s].subscribe(flt)
            for c in clients.values():
                await c.flush()
            await cluster.wait_quiescent()
            first = await publish_and_collect(live, events[:3])
            nonlocal server, core
            await asyncio.to_thread(regloop.run, server.stop())
            server, core = await asyncio.to_thread(restart_publisher)
            forgot = await publish_and_collect(live, events[3:5])  # empty PFPoset: no RV
            for b in cluster.config.brokers:  # §8: each broker returns what it holds
                r = remote(server.port, broker_ctx(b))
                try:
                    await asyncio.to_thread(
                        return_ciphertexts, cluster.broker_dir(b) / "broker.db", r
                    )
                finally:
                    r.close()
            again = await publish_and_collect(live, events[5:])
            return first, forgot, again
        finally:
            for c in clients.values():
                await c.close()

    try:
        first, forgot, again = aloop.run(scenario(), timeout=120)
    finally:
        for p in proxies.values():
            p.close()
        regloop.run(server.stop())
        regloop.close()

    def want(evs: list[Event]) -> dict[tuple[str, int], set[str]]:
        return {
            (f"r{i % 2}", i): {str(e.id) for e in evs if flt.matches(e)}
            for i, flt in enumerate(filters)
        }

    assert first == want(events[:3]) and any(first.values())
    assert not any(forgot.values()) and any(want(events[3:5]).values())
    assert again == want(events[5:]) and any(again.values())
    assert core.counts.get("vcaps_recover", 0) >= 1 and len(core.publishers[profile]) >= 6
