"""Security profiles served from configuration by real broker processes (mutual TLS).

One three-broker chain is shared by the module: ``b0`` (the publisher's broker) -> ``b1`` (a
curious broker that records every message it routes, ``record = true``) -> ``b2`` (the
subscribers'). Every broker serves plain, psguard, eventguard, narada and default from the
public key material the cluster wrote beside its CA; clients take their keys from the
cluster's in-process key services. Each test uses its own topic so tests do not see each
other's traffic.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubguard.model import Event
from pubguard.net.client.client import Subscription
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import BrokerKeys
from tests.loopback import LoopThread, keyed_cluster

pytestmark = pytest.mark.slow

SECURE = ("psguard", "eventguard", "narada", "default")
MASTER = bytes(range(32))  # the key services' master secret: must never reach a broker
CLUSTER = """
publishers = ["hosp"]
[topology]
kind = "edges"
edges = [["b0", "b1"], ["b1", "b2"]]
[broker]
profiles = ["plain", "psguard", "eventguard", "narada", "default"]
[brokers.b1]
domain = "cloud"
record = true
"""
RANGE = "age >= 20 && age <= 30"
AGES = (12, 20, 25, 30, 31, 35, 64, 27)


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    policy = {f"sub-{t}": [f'topic = "{_topic(t)}" && {RANGE}'] for t in ("ps", "df")}
    with keyed_cluster(
        aloop,
        tmp_path_factory.mktemp("profiles"),
        CLUSTER,
        master=MASTER,
        subscribers=policy,
        identities=["hosp"],
    ) as c:
        yield c


def _topic(tag: str) -> str:
    return f"cancerTrail{tag.upper()}"


def _event(tag: str, i: int, age: int) -> Event:
    """The short tag as the id (brokers see only its keyed hash), never the topic."""
    return Event(
        {"topic": _topic(tag), "age": age, "patientRecord": f"CANARY-{tag}-{i}-{age}"},
        id=f"{tag}-{i}",
        type="patient",
        payload=f"PAYLOAD-{tag}-{i}".encode(),
    )


async def _drain(sub: Subscription) -> list[Event]:
    out = []
    while sub.pending:
        try:
            out.append((await sub.next(timeout=1)).event)
        except StopAsyncIteration:  # unsubscribed: the queue ends
            break
    return out


def _files(cluster: LocalCluster, name: str) -> list[bytes]:
    d = cluster.broker_dir(name)
    return [p.read_bytes() for p in d.iterdir() if p.is_file()]


def test_brokers_are_configured_with_profiles_and_public_keys_only(cluster: LocalCluster) -> None:
    for name in cluster.config.brokers:
        cfg = tomllib.loads(cluster.config_path(name).read_text())
        assert cfg["profiles"] == ["plain", "psguard", "eventguard", "narada", "default"]
        assert Path(cfg["keys"]) == cluster.keys_path
    assert cluster.keys_path.parent == cluster.pki.root  # beside the CA
    keys = BrokerKeys.load(cluster.keys_path)
    assert set(keys.publishers) == {"hosp"} and keys.ms_key is not None
    assert keys.ca_cert is not None and keys.kmc_certs and keys.authority_key is not None
    raw = cluster.keys_path.read_bytes()
    assert MASTER not in raw and MASTER.hex().encode() not in raw
    assert b"PRIVATE KEY" not in raw


@pytest.mark.parametrize(("profile", "topic"), [("psguard", "ps"), ("default", "df")])
def test_authorised_range_exactly_and_no_plaintext_at_the_curious_broker(
    aloop: LoopThread, cluster: LocalCluster, profile: str, topic: str
) -> None:
    async def scenario() -> tuple[list[Event], dict[str, int], str]:
        sub = await cluster.connect("b2", f"sub-{topic}", profile=profile)
        pub = await cluster.connect("b0", "hosp", profile=profile)
        try:
            s = await sub.subscribe(f'topic = "{_topic(topic)}" && {RANGE}')
            await sub.flush()
            await cluster.wait_quiescent()
            await pub.publish_batch([_event(topic, i, a) for i, a in enumerate(AGES)])
            await pub.flush()
            await cluster.wait_quiescent()
            got = await _drain(s)
            drops = (await cluster.status("b1"))["drops"]
            return got, drops, pub.scheme.wire_id(f"{topic}-1")
        finally:
            await sub.close()
            await pub.close()

    got, drops, wire = aloop.run(scenario())
    assert sorted(e["age"] for e in got) == [20, 25, 27, 30]
    for e in got:  # delivered in plaintext, secret attribute and payload opened
        assert e["patientRecord"] == f"CANARY-{topic}-{AGES.index(e['age'])}-{e['age']}"
        assert e.payload.startswith(f"PAYLOAD-{topic}-".encode())
    assert not drops
    files = _files(cluster, "b1")
    assert any(wire.encode() in b for b in files)  # it recorded the age-20 event (wire id)
    assert not any(f"{topic}-1".encode() in b for b in files)  # not the application's id
    for i, a in enumerate(AGES):
        for needle in (f"CANARY-{topic}-{i}-{a}", f"PAYLOAD-{topic}-{i}", _topic(topic)):
            assert not any(needle.encode() in b for b in files), needle


@pytest.mark.parametrize(("profile", "topic"), [("eventguard", "eg"), ("narada", "nr")])
def test_topic_profiles_deliver_and_withdraw(
    aloop: LoopThread, cluster: LocalCluster, profile: str, topic: str
) -> None:
    async def scenario() -> tuple[list[str], int, dict[str, int]]:
        t = _topic(topic)
        sub = await cluster.connect("b2", f"sub-{topic}", profile=profile, topics=(t,))
        pub = await cluster.connect("b0", "hosp", profile=profile, topics=(t,))
        try:
            if profile == "eventguard":
                await pub.advertise(f'topic = "{t}"')  # eventguard.txt §4.3
            s = await sub.subscribe(f'topic = "{t}"')
            await sub.flush()
            await pub.flush()
            await cluster.wait_quiescent()
            await pub.publish_batch([_event(topic, i, 40) for i in range(3)])
            await pub.flush()
            await cluster.wait_quiescent()
            before = [str(e.id) for e in await _drain(s)]
            await s.unsubscribe()  # carries the scheme's withdrawal proof (usb permit, token)
            await sub.flush()
            await cluster.wait_quiescent()
            seen = sub.delivers
            await pub.publish(_event(topic, 9, 40))
            await pub.flush()
            await cluster.wait_quiescent()
            st = await cluster.status("b2")
            return before, sub.delivers - seen, st["drops"]
        finally:
            await sub.close()
            await pub.close()

    before, after, drops = aloop.run(scenario())
    assert before == [f"{topic}-{i}" for i in range(3)]
    assert after == 0  # nothing reaches the client after the withdrawal
    assert not drops  # the withdrawal was accepted, not refused
    assert not any(f"CANARY-{topic}".encode() in b for b in _files(cluster, "b1"))


def test_status_reports_profiles_and_domain(aloop: LoopThread, cluster: LocalCluster) -> None:
    st = aloop.run(cluster.status("b1"))
    assert st["domain"] == "cloud" and "default" in st["profiles"]
    assert json.dumps(st)  # JSON-serialisable for `pubguard status --json`
