"""What a curious broker learns of a publication's metadata, over real broker processes.

One chain ``b0 - b1 - b2`` of broker processes (mutual TLS, durable SQLite state, every broker
recording every message it receives) serves plain and the four secure profiles; the publisher
is on ``b0``, the subscriber on ``b2``. Per profile, an event whose *application id* and whose
*secret-attribute names* are canaries (a hospital that numbers events by medical record):

- reaches the subscriber with its original id and attribute names;
- appears in no broker's recorded frames, SQLite files or log: brokers see only the opaque
  keyed wire id and keyed labels (``pubguard.schemes.common.wire_id``);
- a re-send of the same frame and a re-publish of the same event (protected again: new
  timestamp, nonce and signature: the keyed wire id is the same) are dropped as ``duplicate``
  (or ``replayed``), also after ``kill -9`` and restart of the publisher's broker, and the
  subscriber holds exactly one copy.

plain is the baseline that keeps the application's id on the wire: the same scan finds its
canary id (the control, so an empty result means something).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pytest

from pubguard.model import AttributeSpec, Event, EventType
from pubguard.net.client.client import Client
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL
from tests.loopback import PATIENCE, LoopThread, keyed_cluster, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ID_CANARY: Final = "MRN-CANARY-3530829"
NAME_CANARY: Final = ("canaryDiagnosisX7", "canaryWardQ4")  # secret-attribute names
#: a schema whose secret attributes carry canary names (only clients hold schemas)
CANARY_TYPE: Final = EventType(
    "ward",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec(NAME_CANARY[0], "str", routable=False),
        AttributeSpec(NAME_CANARY[1], "str", routable=False),
    ),
)
PROFILES: Final = ("psguard", "default", "eventguard", "narada")
CLUSTER: Final = """
publishers = ["hosp", "pub-psguard", "pub-default", "pub-eventguard", "pub-narada"]
[topology]
kind = "edges"
edges = [["b0", "b1"], ["b1", "b2"]]
[broker]
profiles = ["plain", "psguard", "eventguard", "narada", "default"]
durable = true
heartbeat_interval = 0.5
[brokers.b0]
record = true
[brokers.b1]
record = true
[brokers.b2]
record = true
"""


def _topic(profile: str) -> str:
    return f"meta{profile.replace('-', '')}"


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    policy = {f"sub-{p}": [f'topic = "{_topic(p)}"'] for p in PROFILES}
    with keyed_cluster(
        aloop,
        tmp_path_factory.mktemp("metadata"),
        CLUSTER,
        types=(HOSPITAL, CANARY_TYPE),
        subscribers=policy,
        identities=["hosp", *(f"pub-{p}" for p in PROFILES)],
    ) as c:
        yield c


def _event(profile: str) -> Event:
    return Event(
        {"topic": _topic(profile), "age": 40, NAME_CANARY[0]: "stable", NAME_CANARY[1]: "w4"},
        id=f"{ID_CANARY}-{profile}",
        type=CANARY_TYPE.name,
        payload=b"scan.dcm",
    )


def _needles(profile: str) -> dict[str, bytes]:
    return {
        "event id": f"{ID_CANARY}-{profile}".encode(),
        **{f"secret-attribute name {n}": n.encode() for n in NAME_CANARY},
    }


def _found(cluster: LocalCluster, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """broker -> labels of ``needles`` found in any file of its state directory (recorded
    frames, SQLite database with its journal, log)."""
    out: dict[str, list[str]] = {}
    for b in cluster.config.brokers:
        files = [p for p in cluster.broker_dir(b).iterdir() if p.is_file()]
        blobs = [p.read_bytes() for p in files]
        assert any(p.suffix in (".db", ".sqlite") or "sqlite" in p.name for p in files) or any(
            b"SQLite format 3" in x[:16] for x in blobs
        ), f"{b}: no SQLite file"
        assert cluster.record_path(b).exists() and any(p.name == "broker.log" for p in files)
        out[b] = [label for label, n in needles.items() if any(n in x for x in blobs)]
    return out


async def _drops(cluster: LocalCluster) -> int:
    """Publications dropped as ``duplicate`` or ``replayed`` by any broker."""
    n = 0
    for st in (await cluster.statuses()).values():
        n += int(st["drops"].get("duplicate", 0)) + int(st["drops"].get("replayed", 0))
    return n


async def _connect(cluster: LocalCluster, broker: str, who: str, profile: str) -> Client:
    return await cluster.connect(broker, who, profile=profile, topics=(_topic(profile),))


def test_plain_keeps_the_application_id_on_the_wire_the_scan_finds_it(
    aloop: LoopThread, cluster: LocalCluster
) -> None:
    """The baseline (and the scan's control): plain carries the application's id in clear."""

    async def scenario() -> None:
        pub = await _connect(cluster, "b0", "hosp", "plain")
        try:
            # (only the id: plain's routing is the attribute map, names and values in clear)
            await pub.publish(Event({"topic": _topic("plain")}, id=f"{ID_CANARY}-plain"))
            await pub.flush()
            await cluster.wait_quiescent()
        finally:
            await pub.close()

    aloop.run(scenario())
    found = _found(cluster, {"event id": f"{ID_CANARY}-plain".encode()})
    assert found["b0"] == ["event id"], found  # the first broker recorded it in clear


@dataclass
class Run:
    """What one profile's publication did: the subscriber's copies and the wire id."""

    event: Event
    wire: str
    got: list[Event] = field(default_factory=list)
    extra: int = 0  # further copies the subscriber held at the end


@pytest.fixture(scope="module")
def runs(aloop: LoopThread, cluster: LocalCluster) -> dict[str, Any]:
    """Every secure profile at once (one restart for all): publish the canary event, re-send
    its frame and re-publish it, ``kill -9`` and restart ``b0``, re-send and re-publish again.
    The drop counts before and after the restart, and each profile's :class:`Run`."""

    async def scenario() -> dict[str, Any]:
        subs: dict[str, Client] = {}
        pubs: dict[str, Client] = {}
        out: dict[str, Any] = {}
        try:
            live = {}
            for p in PROFILES:
                subs[p] = await _connect(cluster, "b2", f"sub-{p}", p)
                pubs[p] = await _connect(cluster, "b0", f"pub-{p}", p)
                if p == "eventguard":
                    await pubs[p].advertise(f'topic = "{_topic(p)}"')  # eventguard.txt §4.3
                live[p] = await subs[p].subscribe(f'topic = "{_topic(p)}"')
            for c in (*subs.values(), *pubs.values()):
                await c.flush()
            await cluster.wait_quiescent()
            pes = {p: pubs[p].scheme.protect_event(_event(p), now=time.time()) for p in PROFILES}
            for p, pe in pes.items():
                out[p] = Run(_event(p), pe.event_id)
                await pubs[p].publish_protected(pe)
                await pubs[p].flush()
            for p in PROFILES:
                out[p].got.append((await live[p].next(timeout=PATIENCE)).event)

            async def resend() -> None:  # the same frame, and the same event protected again
                for p, pe in pes.items():
                    await pubs[p].publish_protected(pe)
                    await pubs[p].publish(_event(p))
                    await pubs[p].flush()

            n = 2 * len(PROFILES)
            d0 = await _drops(cluster)
            await resend()
            await until(lambda: _at_least(cluster, d0 + n), "the re-sends dropped")
            out["before_restart"] = await _drops(cluster) - d0
            # kill -9 and restart of the publishers' broker: what it forgot (its in-memory id
            # window) the next broker still holds, and default and narada's replay state is
            # in SQLite
            cluster.kill("b0")
            await cluster.restart("b0")
            await cluster.wait_connected()
            await until(lambda: all(c.is_connected for c in pubs.values()), "reconnected")
            d1 = await _drops(cluster)  # (b0's counters restarted from zero)
            await resend()
            await until(lambda: _at_least(cluster, d1 + n), "the re-sends dropped again")
            await cluster.wait_quiescent()
            out["after_restart"] = await _drops(cluster) - d1
            for p in PROFILES:
                out[p].extra = live[p].pending
            return out
        finally:
            for c in (*subs.values(), *pubs.values()):
                await c.close()

    return aloop.run(scenario(), timeout=4 * PATIENCE)


def test_resends_and_republished_events_are_dropped_across_a_restart(runs: dict[str, Any]) -> None:
    n = 2 * len(PROFILES)
    assert runs["before_restart"] >= n and runs["after_restart"] >= n
    assert {p: runs[p].extra for p in PROFILES} == dict.fromkeys(PROFILES, 0)  # one copy each


@pytest.mark.parametrize("profile", PROFILES)
def test_no_broker_learns_the_event_id_or_secret_attribute_names(
    cluster: LocalCluster, runs: dict[str, Any], profile: str
) -> None:
    r: Run = runs[profile]
    (e,) = r.got
    assert e.id == r.event.id and e.type == r.event.type  # the application's id, restored
    assert {k: e[k] for k in NAME_CANARY} == {k: r.event[k] for k in NAME_CANARY}
    assert r.wire != e.id and len(r.wire) == 32 and int(r.wire, 16) >= 0  # opaque
    found = _found(cluster, _needles(profile))
    assert not any(found.values()), found
    recorded = b"".join(cluster.record_path(b).read_bytes() for b in cluster.config.brokers)
    assert r.wire.encode() in recorded  # the brokers routed it, under the wire id


async def _at_least(cluster: LocalCluster, n: int) -> bool:
    return await _drops(cluster) >= n
