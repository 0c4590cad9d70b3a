"""``pubguard.connect`` (net/client/profiles.py) over real broker processes and the real
key-service process: for each profile, a subscriber receives exactly the events the reference
matcher gives for its filter, opened; a filter outside its policy is refused with a typed
error naming the filter and the identity; what cannot be served is refused before any
connection."""

from __future__ import annotations

import asyncio
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import pubguard
from pubguard.crypto import SecretBytes, random_bytes
from pubguard.matching.reference import ReferenceMatcher
from pubguard.net.config import parse_cluster_config
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL
from tests.loopback import LoopThread

CANARY = "CANARY-connect-3b1e"
CARDIO_20_30 = 'topic = "cardiology" && age >= 20 && age <= 30'
CARDIO_ALL = 'topic = "cardiology" && age >= 0 && age <= 127'
CLUSTER = """
publishers = ["hospital"]
[topology]
kind = "edges"
edges = [["b0", "b1"]]
[broker]
profiles = ["psguard", "default", "eventguard", "plain"]
"""
#: the filter each profile's subscriber uses (eventguard routes on topics only)
FILTERS = {
    "psguard": CARDIO_20_30,
    "default": CARDIO_20_30,
    "eventguard": 'topic = "cardiology"',
    "plain": "age > 20",
}
AGES = (10, 19, 20, 25, 30, 31, 64)


@pytest.fixture(scope="module")
def cluster(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state = tmp_path_factory.mktemp("connect")
    kdc = KdcConfig(
        SecretBytes(random_bytes(32)),
        (HOSPITAL,),
        subscribers={"young-unit": [CARDIO_20_30]},
        publishers={"hospital": ["cardiology", "oncology"]},
    )
    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=state)
    c = LocalCluster(cfg, keyservice=True, kdc=kdc)  # real broker and key-service processes
    try:
        aloop.run(c.start(), timeout=120)
        yield c
    finally:
        aloop.run(c.stop(), timeout=60)


def events(profile: str) -> list[pubguard.Event]:
    out = []
    for topic in ("cardiology", "oncology"):
        for age in AGES:
            out.append(
                pubguard.Event(
                    {"topic": topic, "age": age, "patientRecord": f"{CANARY} {topic} {age}"},
                    id=f"{profile}-{topic[:3]}-{age}",
                    type="patient",
                    payload=CANARY.encode(),
                )
            )
    return out


def _opts(cluster: LocalCluster, profile: str, name: str) -> dict[str, object]:
    assert cluster.keyservice is not None
    return {
        "identity": name,
        "profile": profile,
        "keyservice": None if profile == "plain" else cluster.keyservice.url,
        "ssl": cluster.pki.client_context(name),
    }


@pytest.mark.parametrize("profile", ["default", "psguard", "eventguard", "plain"])
def test_a_subscriber_gets_exactly_the_reference_matchers_events_opened(
    aloop: LoopThread, cluster: LocalCluster, profile: str
) -> None:
    flt = pubguard.Filter.parse(FILTERS[profile])
    published = events(profile)
    want = {e.id for e in published if ReferenceMatcher({"f": flt}).match(e)}
    assert want  # the workload has events on both sides of the filter
    # psguard brokers check records against the publisher keys they were given up front
    signing = cluster.bundle.signing_key("hospital")

    async def scenario() -> tuple[dict[str, pubguard.Event], int, str]:
        async with pubguard.connect(
            cluster.url("b1"), **_opts(cluster, profile, "young-unit")
        ) as sub_client:
            pub = await pubguard.connect(
                cluster.url("b0"), signing_key=signing, **_opts(cluster, profile, "hospital")
            )
            try:
                sub = await sub_client.subscribe(flt)
                await sub_client.confirm()
                if profile == "eventguard":  # eventguard.txt §4.3: publishers advertise
                    for t in ("cardiology", "oncology"):
                        await pub.advertise(f'topic = "{t}"')
                await pub.confirm()
                await cluster.wait_quiescent()
                for e in published:
                    await pub.publish(e)
                await pub.confirm()
                got: dict[str, pubguard.Event] = {}
                async for d in sub:
                    got[d.event.id] = d.event
                    if len(got) == len(want):
                        break
                await cluster.wait_quiescent()
                await asyncio.sleep(0.2)
                return got, sub.pending, type(sub_client.scheme).__name__
            finally:
                await pub.close()

    got, extra, scheme = aloop.run(scenario(), timeout=180)
    assert set(got) == want
    assert extra == 0  # and nothing beyond them
    for e in published:
        if e.id in got:  # opened: the plaintext as published
            assert got[e.id].attrs == e.attrs and got[e.id].payload == e.payload
    assert (
        scheme
        == {
            "default": "DefaultClient",
            "psguard": "PSGuardClient",
            "eventguard": "EventGuardClient",
            "plain": "PlainScheme",
        }[profile]
    )


@pytest.mark.parametrize("profile", ["default", "psguard"])
def test_a_filter_outside_the_policy_is_refused_naming_filter_and_identity(
    aloop: LoopThread, cluster: LocalCluster, profile: str
) -> None:
    async def scenario() -> pubguard.FilterRefusedError:
        nc = await pubguard.connect(cluster.url("b1"), **_opts(cluster, profile, "young-unit"))
        async with nc:
            with pytest.raises(pubguard.FilterRefusedError) as info:
                await nc.subscribe(CARDIO_ALL)
            assert not nc._subs  # nothing kept, nothing sent
            return info.value

    err = aloop.run(scenario(), timeout=120)
    text = str(err)
    assert str(pubguard.Filter.parse(CARDIO_ALL)) in text and "'young-unit'" in text
    assert "\n" not in text and CANARY not in text
    assert err.identity == "young-unit" and err.reason is pubguard.DropReason.UNAUTHORISED
    assert isinstance(err, pubguard.DropError)  # what LocalCluster users caught before


def test_what_cannot_be_served_is_refused_before_any_connection(tmp_path: Path) -> None:
    url = "tls://127.0.0.1:9"  # nothing listens: a connection attempt would fail otherwise
    ctx = object()
    # narada's entity is the identity's TLS certificate and key: both must be given
    with pytest.raises(pubguard.ConfigError, match="narada' needs the identity's TLS") as info:
        pubguard.connect(url, identity="a", profile="narada", keyservice=url, ssl=ctx)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    with pytest.raises(pubguard.ConfigError, match=r"needs a key service \(keyservice="):
        pubguard.connect(url, identity="a", profile="default", ssl=ctx)  # type: ignore[arg-type]
    with pytest.raises(pubguard.ConfigError, match="unknown profile 'hermes'"):
        pubguard.connect(url, identity="a", profile="hermes", keyservice=url, ssl=ctx)  # type: ignore[arg-type]
    with pytest.raises(pubguard.ConfigError, match="mutual TLS only"):
        pubguard.connect(url, identity="a", keyservice="tcp://127.0.0.1:9", ssl=ctx)  # type: ignore[arg-type]
    with pytest.raises(pubguard.ValidationError, match="ssl context"):
        pubguard.connect(url, identity="a", profile="plain")


def test_local_cluster_connect_is_a_pubguard_connect_client(
    aloop: LoopThread, cluster: LocalCluster
) -> None:
    async def scenario() -> tuple[str, str]:
        c = await cluster.connect("b1", "young-unit", profile="default")
        try:
            return type(c).__name__, type(c.scheme.authority).__name__  # type: ignore[attr-defined]
        finally:
            await c.close()

    assert aloop.run(scenario()) == ("KeyedClient", "RemoteAuthority")
