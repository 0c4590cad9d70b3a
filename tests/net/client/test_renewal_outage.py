"""Subscription generations built while the broker is away (``pubguard.net.client.renewal``).

A durable eventguard subscriber's broker stops for longer than a key epoch. The renewal loop
builds a generation after each change meanwhile; they wait in the client's resend queue. When
the broker comes back and resumes the session, the generations whose epoch is already over
would be refused (a client's permit gets no grace at the brokers) and each refusal is a strike
against the client's link: a subscriber with enough subscriptions would be banned as a flood
for an honest reconnection. Those generations are withdrawn from the resend queue instead (a
no-op keeps the sequence gapless); the current generation goes out and routes the new events.

A broker process over mutual TLS with its state on disk, killed and restarted on the same
port and state directory; the MS behind the cluster's key service, epochs of one second.
"""

from __future__ import annotations

import asyncio
import time
import tomllib
from pathlib import Path

import pytest

from pubguard.net.config import chain_toml, parse_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL, KeyBundle
from tests.loopback import PATIENCE, LoopThread

pytestmark = pytest.mark.slow

EPOCH = 1.0  # seconds: the outage below spans two epoch changes
TOPICS = ("w0", "w1", "w2")


def test_generations_whose_epoch_ended_during_an_outage_are_not_sent(
    aloop: LoopThread, tmp_path: Path
) -> None:
    text = chain_toml(2, ["eventguard"], publishers=["pub"], heartbeat_interval=0.2)
    now = time.time()
    bundle = KeyBundle(
        tmp_path / "keys",
        now=now,
        types=(HOSPITAL,),
        identities=["pub"],
        epoch_length=EPOCH,
        origin=now - EPOCH / 2,
        max_delay=5.0,
    )
    cluster = LocalCluster(parse_cluster_config(tomllib.loads(text), base=tmp_path), bundle=bundle)

    async def scenario() -> tuple[dict[str, int], list[str], int, list[int]]:
        await cluster.start()
        sub = await cluster.connect(
            "b1",
            "sub",
            profile="eventguard",
            durable=True,
            heartbeat_interval=0.2,
            heartbeat_timeout=1.0,
        )
        pub = None
        try:
            subs = [await sub.subscribe(f'topic = "{w}"') for w in TOPICS]
            await sub.flush()
            renewed = sub.renewals
            cluster.kill("b1")  # away for more than two epochs
            t_back = time.time() + 2.6 * EPOCH
            while time.time() < t_back or sub.renewals < renewed + 2 * len(TOPICS):
                await asyncio.sleep(0.05)
            await cluster.restart("b1")  # same port and state: the session resumes
            while sub.reconnects == 0:
                await asyncio.sleep(0.02)
            await sub.flush()
            pub = await cluster.connect("b1", "pub", profile="eventguard")
            for w in TOPICS:
                await pub.advertise(f'topic = "{w}"')
            for i, w in enumerate(TOPICS):
                await pub.publish({"topic": w, "x": i})
            got = [(await s.next(timeout=PATIENCE)).event["x"] for s in subs]
            errors = [f"{e.ref}: {e.reason}" for e in sub.errors]
            drops = (await cluster.status("b1"))["drops"]
            return drops, errors, sub.renewals - renewed, got
        finally:
            if pub is not None:
                await pub.close()
            await sub.close()
            await cluster.stop()

    drops, errors, renewals, got = aloop.run(scenario(), timeout=3 * PATIENCE)
    assert renewals >= 2 * len(TOPICS)  # a generation per topic and change, built while away
    # none refused: no strike against an honest client
    assert errors == [] and not drops, (errors, drops)
    assert got == [0, 1, 2]  # the current generations route the new epoch's events
