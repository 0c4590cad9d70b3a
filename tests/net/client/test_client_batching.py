"""Client.publish signs the publications of one event-loop iteration under one Merkle root
(amortised signing without the caller batching), over real broker processes.

A two-broker chain (publisher on ``b0``, subscriber on ``b1``, mutual TLS) serving psguard,
default and eventguard. Events published back to back arrive verified, opened and in order;
they share signatures (the subscriber verifies one root per batch, counted by its scheme's
``signature_checks``); one event per iteration is a batch of one; a bad event is refused at
``publish`` with a typed error and leaves the batch untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from pubguard.errors import ValidationError
from pubguard.model import Event
from pubguard.net.client.client import Client, Subscription
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.plain import PlainScheme
from tests.loopback import PATIENCE, LoopThread, keyed_cluster

pytestmark = pytest.mark.slow

PROFILES = ("psguard", "default", "eventguard")
CLUSTER = """
publishers = ["hosp"]
[topology]
kind = "edges"
edges = [["b0", "b1"]]
[broker]
profiles = ["plain", "psguard", "eventguard", "default"]
"""


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with keyed_cluster(
        aloop, tmp_path_factory.mktemp("batching"), CLUSTER, identities=["hosp"]
    ) as c:
        yield c


def _events(topic: str, tag: str, n: int) -> list[Event]:
    return [
        Event(
            {"topic": topic, "age": 20 + i % 50, "patientRecord": f"R-{tag}-{i}"},
            id=f"{tag}-{i}",
            type="patient",
            payload=b"p",
        )
        for i in range(n)
    ]


async def _drain(sub: Subscription, n: int) -> list[Event]:
    return [(await sub.next(timeout=PATIENCE)).event for _ in range(n)]


async def _pair(
    cluster: LocalCluster, profile: str, topic: str, **kw: Any
) -> tuple[Client, Client, Subscription]:
    sub = await cluster.connect("b1", f"sub-{topic}", profile=profile)
    pub = await cluster.connect("b0", "hosp", profile=profile, **kw)
    if profile == "eventguard":
        await pub.advertise(f'topic = "{topic}"')  # eventguard.txt §4.3
    s = await sub.subscribe(f'topic = "{topic}"')
    await sub.flush()
    await pub.flush()
    await cluster.wait_quiescent()
    return pub, sub, s


@pytest.mark.parametrize("profile", PROFILES)
def test_back_to_back_publishes_share_signatures_and_arrive_in_order(
    aloop: LoopThread, cluster: LocalCluster, profile: str
) -> None:
    topic = f"bb{profile}"

    async def scenario() -> tuple[list[Event], int, int, int, dict[str, int]]:
        pub, sub, s = await _pair(cluster, profile, topic, max_batch=8)
        try:
            assert pub.batch_sign  # on by default for a profile that signs Merkle roots
            checks = sub.scheme.signature_checks  # type: ignore[attr-defined]
            drops0 = (await cluster.status("b0"))["drops"]
            for e in _events(topic, profile, 20):  # no yield between them: one loop iteration
                await pub.publish(e)
            await pub.flush()
            got = await _drain(s, 20)
            await cluster.wait_quiescent()
            drops = (await cluster.status("b0"))["drops"]
            drops = {k: v - drops0.get(k, 0) for k, v in drops.items() if v != drops0.get(k, 0)}
            after = sub.scheme.signature_checks  # type: ignore[attr-defined]
            return got, pub.batches, checks, after, drops
        finally:
            await sub.close()
            await pub.close()

    got, batches, before, after, drops = aloop.run(scenario())
    assert [e.id for e in got] == [
        f"{profile}-{i}" for i in range(20)
    ]  # (brokers de-duplicate ids)
    assert [e["patientRecord"] for e in got] == [f"R-{profile}-{i}" for i in range(20)]
    assert batches == 3  # 8 + 8 + 4 under three signatures
    credential = 0 if profile == "psguard" or before else 1  # verified once, then cached
    assert after - before == batches + credential
    assert not drops  # no publication dropped at the first broker


@pytest.mark.parametrize("profile", ["psguard", "default"])
def test_one_event_per_iteration_is_a_batch_of_one(
    aloop: LoopThread, cluster: LocalCluster, profile: str
) -> None:
    """At a low rate nothing waits: every publication is signed in its own iteration."""
    topic = f"low{profile}"

    async def scenario() -> tuple[list[Event], int]:
        pub, sub, s = await _pair(cluster, profile, topic)
        try:
            for e in _events(topic, f"l{profile}", 3):
                await pub.publish(e)
                await asyncio.sleep(0)  # the loop runs: the pending batch is signed and sent
            got = await _drain(s, 3)
            return got, pub.batches
        finally:
            await sub.close()
            await pub.close()

    got, batches = aloop.run(scenario())
    assert [e.id for e in got] == [f"l{profile}-{i}" for i in range(3)] and batches == 3


def test_single_event_and_a_bad_event(aloop: LoopThread, cluster: LocalCluster) -> None:
    """A lone publish arrives; an event outside its key tree's range raises ValidationError
    at publish and neither enters the batch nor spoils the events around it."""
    topic = "single"

    async def scenario() -> tuple[list[Event], int]:
        pub, sub, s = await _pair(cluster, "psguard", topic)
        try:
            await pub.publish(_events(topic, "s", 1)[0])
            bad = Event(
                {"topic": topic, "age": 500, "patientRecord": "x"}, id="bad", type="patient"
            )
            with pytest.raises(ValidationError):
                await pub.publish(bad)
            await pub.publish(_events(topic, "t", 1)[0])
            await pub.flush()
            return await _drain(s, 2), pub.batches
        finally:
            await sub.close()
            await pub.close()

    got, batches = aloop.run(scenario())
    assert [e.id for e in got] == ["s-0", "t-0"] and batches == 1


def test_opt_out_and_refusal(aloop: LoopThread, cluster: LocalCluster) -> None:
    async def scenario() -> tuple[list[Event], int]:
        pub, sub, s = await _pair(cluster, "default", "optout", batch_sign=False)
        try:
            for e in _events("optout", "o", 3):
                await pub.publish(e)
            await pub.flush()
            return await _drain(s, 3), pub.batches
        finally:
            await sub.close()
            await pub.close()

    got, batches = aloop.run(scenario())
    assert [e.id for e in got] == ["o-0", "o-1", "o-2"] and batches == 0
    with pytest.raises(ValidationError):
        Client("127.0.0.1", 1, identity="x", ssl=None, scheme=PlainScheme(), batch_sign=True)
    with pytest.raises(ValidationError):
        Client("127.0.0.1", 1, identity="x", ssl=None, max_batch=0)


@pytest.mark.parametrize("profile", ("default", "eventguard"))
def test_close_withdraws_with_proofs_so_no_broker_keeps_or_refuses(
    aloop: LoopThread, cluster: LocalCluster, profile: str
) -> None:
    """A non-durable subscriber that closes withdraws its subscription with its own proof
    (eventguard.txt §4.5; the default profile's signed withdrawal): the broker above its own
    (which would refuse a withdrawal its broker sends without one, as a fake unsubscribe)
    forgets it, and no broker counts an ``unauthorised`` drop."""

    async def go() -> tuple[int, int, int, dict[str, int]]:
        before = await cluster.statuses()
        sub = await cluster.connect("b1", f"leaver-{profile}", profile=profile)
        await sub.subscribe(f'topic = "leave-{profile}"')
        await sub.flush()
        await cluster.wait_quiescent()
        held = (await cluster.status("b0"))["subscriptions"]
        await sub.close()
        await cluster.wait_quiescent()
        after = await cluster.statuses()
        unauth = {
            b: s["drops"].get("unauthorised", 0) - before[b]["drops"].get("unauthorised", 0)
            for b, s in after.items()
        }
        return before["b0"]["subscriptions"], held, after["b0"]["subscriptions"], unauth

    start, held, end, unauth = aloop.run(go(), timeout=60)
    assert held == start + 1  # b1 forwarded the subscription up to b0
    assert end == start  # ... and the proof-carrying withdrawal took it away again
    assert unauth == {"b0": 0, "b1": 0}
