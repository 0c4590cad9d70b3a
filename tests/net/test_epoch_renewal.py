"""Subscriptions outlive key epochs (psguard.txt §3.2, eventguard.txt §4.8; net/renewal.py),
over real broker processes with key epochs of a few seconds.

A subscriber on ``b1`` and a publisher on ``b0`` (mutual TLS) of psguard, default and
eventguard: events published steadily across two epoch changes all arrive, each exactly
once (the old and new generations overlap at each change), the client renewed its
subscription once per change, and once the old generations' grace and leases are over every
broker holds one generation of the subscription (psguard's withdrawn by the client, the
others lapsed at the brokers, ``Broker.expire``). A default subscriber that vanishes without
a withdrawal is forgotten by the broker above when its permit runs out (the test fails with
leases switched off).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from pubguard.broker.core import LEASE_SLACK
from pubguard.model import Event
from pubguard.net.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL

from .conftest import LoopThread, keyed_cluster

pytestmark = pytest.mark.slow

EPOCH = 4.0  # seconds
MAX_DELAY = 1.0  # brokers' timestamp window: leases end one second after the permit
GRACE = 0.5  # the client retires an old generation this long after its epoch
CLUSTER = """
publishers = ["hosp"]
[topology]
kind = "edges"
edges = [["b0", "b1"]]
[broker]
profiles = ["psguard", "eventguard", "default"]
heartbeat_interval = 0.5
"""


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    now = time.time()
    with keyed_cluster(aloop, tmp_path_factory.mktemp("renewal"), CLUSTER, now=now,
                       identities=["hosp"], epoch_length=EPOCH, origin=now - 1.0,
                       max_delay=MAX_DELAY) as c:  # fmt: skip
        yield c


@pytest.mark.parametrize("profile", ["psguard", "default", "eventguard"])
def test_a_subscription_outlives_two_epoch_changes(aloop: LoopThread, cluster: LocalCluster,
                                                   profile: str) -> None:  # fmt: skip
    topic = f"t-{profile}"

    async def scenario() -> tuple[list[str], list[str], int, dict[str, int]]:
        sub = await cluster.connect("b1", f"sub-{profile}", profile=profile, renew_grace=GRACE)
        pub = await cluster.connect("b0", "hosp", profile=profile)
        if profile == "eventguard":
            await pub.advertise(f'topic = "{topic}"')  # eventguard.txt §4.3
        s = await sub.subscribe(f'topic = "{topic}"')
        await sub.flush()
        await pub.flush()
        await cluster.wait_quiescent()
        # the module's cluster is shared: count this test's drops only
        before = {b: (await cluster.status(b))["drops"] for b in ("b0", "b1")}
        start = time.time()
        sent: list[str] = []
        i = 0
        while time.time() < start + 2 * EPOCH + 1.0:  # across two epoch changes
            eid = f"{profile}-{i}"
            await pub.publish(Event({"topic": topic, "age": 30, "patientRecord": f"r{i}"},
                                    id=eid, type=HOSPITAL.name))  # fmt: skip
            sent.append(eid)
            i += 1
            await asyncio.sleep(0.05)
        await pub.flush()
        got: list[str] = []
        while len(got) < len(sent):
            try:
                got.append((await s.next(timeout=5)).event.id)
            except TimeoutError:
                break
        # the last old generation is retired by the client (psguard) or has lapsed at the
        # brokers (leases: the permit's end + MAX_DELAY, swept every 0.25 s) 2.2 s after its
        # epoch ended, and the next ahead renewal comes 3 s after it (EPOCH / 4 before the end)
        ms = cluster.bundle.ms
        at = ms.epoch_end(ms.epoch_at(time.time()) - 1) + 2.2
        at += EPOCH if at < time.time() else 0.0
        await asyncio.sleep(at - time.time())
        tables = {}
        for b in ("b0", "b1"):
            st = await cluster.status(b)
            drops = {r: n - before[b].get(r, 0) for r, n in st["drops"].items()}
            drops = {r: n for r, n in drops.items() if n}
            tables[b] = (st["subscriptions"], drops, st["advertisements"])
        renewals = sub.renewals
        await pub.close()
        await sub.close()
        return sent, got, renewals, tables

    sent, got, renewals, tables = aloop.run(scenario(), timeout=60)
    assert len(sent) > 100
    assert got == sent  # every event, once, in order, across both changes
    assert renewals in (2, 3)  # a third ahead of the next change when the run ended late
    ads = 1 if profile == "eventguard" else 0  # renewed in place each epoch, none lapsed
    assert tables == {"b0": (1, {}, ads), "b1": (1, {}, ads)}, tables


def test_a_vanished_subscriber_is_forgotten_upstream_when_its_permit_runs_out(
    aloop: LoopThread, cluster: LocalCluster
) -> None:
    """A default subscriber whose connection dies without a withdrawal: its broker forgets
    it at once, the broker above refuses that broker's proof-less withdrawal (it could be a
    fake unsubscribe) and keeps the entry, then forgets it by itself when the permit's epoch
    is over (its lease: the permit's end + max_delay + LEASE_SLACK for a child's entry)."""

    async def scenario() -> tuple[int, int, int, int, int]:
        base = (await cluster.status("b0"))["subscriptions"]
        sub = await cluster.connect("b1", "sub-vanish", profile="default", reconnect=False)
        await sub.subscribe('topic = "vanish"')
        await sub.flush()
        await cluster.wait_quiescent()
        held = (await cluster.status("b0"))["subscriptions"]
        assert sub._renew_task is not None and sub._writer is not None
        sub._renew_task.cancel()  # the process "died": nothing more from it
        sub._writer.transport.abort()
        await asyncio.sleep(0.5)
        await cluster.wait_quiescent()
        st = await cluster.status("b0")
        kept = st["subscriptions"]
        refused = st["drops"].get("unauthorised", 0)
        await asyncio.sleep(EPOCH + MAX_DELAY + LEASE_SLACK + 1.0)  # at most, from now
        await cluster.wait_quiescent()
        after = (await cluster.status("b0"))["subscriptions"]
        await sub.close()
        return base, held, kept, refused, after

    base, held, kept, refused, after = aloop.run(scenario(), timeout=60)
    assert held == base + 1
    assert kept == base + 1 and refused >= 1  # the fake-unsubscribe guard held
    assert after == base  # the lease ended: forgotten without the subscriber's proof


def test_a_fresh_session_in_the_ahead_window_re_sends_both_generations(
    aloop: LoopThread, cluster: LocalCluster
) -> None:
    """psguard renews ahead (EPOCH / 4 before the end here): a subscriber whose connection
    breaks in that window and finds a fresh session at its broker re-subscribes the running
    epoch's generation as well as the next one, so this epoch's publications still match
    (before, only the next epoch's was re-sent and they were lost until the epoch ended)."""

    async def scenario() -> list[tuple[str, float, float, float]]:
        sub = await cluster.connect("b1", "sub-fresh", profile="psguard", renew_grace=GRACE)
        pub = await cluster.connect("b0", "hosp", profile="psguard")
        s = await sub.subscribe('topic = "fresh"')
        await sub.flush()
        await cluster.wait_quiescent()
        tries: list[tuple[str, float, float, float]] = []
        for attempt in range(3):  # each epoch once, until the publication lands in the window
            while not [e for _, e in s.old if e > time.time() + 0.2]:
                await asyncio.sleep(0.01)  # the ahead renewal
            end = max(e for _, e in s.old)
            seen = sub.reconnects
            assert sub._writer is not None
            sub._writer.transport.abort()  # the broker drops the non-durable session
            while sub.reconnects == seen:
                await asyncio.sleep(0.01)
            await sub.flush()
            await cluster.wait_quiescent()
            eid, t0 = f"fresh-{attempt}", time.time()
            await pub.publish(Event({"topic": "fresh", "age": 30, "patientRecord": eid},
                                    id=eid, type=HOSPITAL.name))  # fmt: skip
            await pub.flush()
            t1 = time.time()
            try:
                got = (await s.next(timeout=3)).event.id
            except TimeoutError:
                got = "-"
            tries.append((got, t0, t1, end))
            if t1 < end:  # published in the running epoch: the case under test
                break
            while time.time() < end + GRACE:
                await asyncio.sleep(0.05)
        await pub.close()
        await sub.close()
        return tries

    tries = aloop.run(scenario(), timeout=60)
    got, t0, t1, end = tries[-1]
    assert t1 < end, tries  # one attempt was published before its epoch ended
    assert got == f"fresh-{len(tries) - 1}", tries
