"""kill -9 of a broker of a secure profile whose brokers keep replay state (default, narada
§V-B): the restarted broker still refuses replays, and loses no fresh publication its
neighbour re-sends. The replay state commits in the broker's batch transaction
(``ReplayState(deferred=True)``); before, it reserved a second of timestamps ahead on disk, so
every publication signed in the second after the last one accepted before the crash, queued
below while the broker was down, was refused as ``replayed`` after the restart and lost.

A chain ``b0 - b1 - b2`` of real broker processes over mutual TLS; the publisher on the leaf
``b2``, a durable subscriber on ``b0``, so every publication crosses ``b1``, which is killed
while publications stream and restarted 1.5 s later. That the restarted broker still refuses
a replay is tests/security/test_default_network.py's."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from pubguard.model import Event
from pubguard.net.config import chain_toml
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL
from tests.loopback import PATIENCE, LoopThread, keyed_cluster

pytestmark = pytest.mark.slow

CLUSTER = chain_toml(3, ["default"], publishers=["hosp"], heartbeat_interval=0.5)


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with keyed_cluster(
        aloop, tmp_path_factory.mktemp("crash-secure"), CLUSTER, identities=["hosp"], max_delay=30.0
    ) as c:
        yield c


def test_kill_9_of_a_replay_checking_broker_loses_no_fresh_publication(
    aloop: LoopThread, cluster: LocalCluster
) -> None:
    async def scenario() -> tuple[list[str], list[str], dict[str, int]]:
        sub = await cluster.connect("b0", "crash-sub", profile="default", durable=True)
        pub = await cluster.connect("b2", "hosp", profile="default")
        s = await sub.subscribe('topic = "crash"')
        await sub.flush()
        await cluster.wait_quiescent()
        sent: list[str] = []

        async def stream(n: int) -> None:
            for _ in range(n):
                eid = f"c{len(sent)}"
                await pub.publish(
                    Event(
                        {"topic": "crash", "age": 30, "patientRecord": eid},
                        id=eid,
                        type=HOSPITAL.name,
                    )
                )
                sent.append(eid)
                await asyncio.sleep(0.02)

        await stream(40)
        cluster.kill("b1")  # mid-stream: whatever b1 did not commit, b2 re-sends
        await stream(60)  # 1.2 s more, queued at b2
        await asyncio.sleep(0.3)
        await cluster.restart("b1")
        await cluster.wait_connected()
        await stream(20)
        await pub.flush()
        got: list[str] = []
        while len(got) < len(sent):
            try:
                got.append((await s.next(timeout=PATIENCE)).event.id)
            except TimeoutError:  # one lost: none comes (PATIENCE bounds that wait)
                break
        drops = (await cluster.status("b1"))["drops"]
        await pub.close()
        await sub.close()
        return sent, got, drops

    sent, got, drops = aloop.run(scenario(), timeout=300)
    assert got == sent, sorted(set(sent) - set(got))  # each once, in order, none lost
    assert drops.get("replayed", 0) == 0, drops
