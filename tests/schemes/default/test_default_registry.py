"""Every profile by name from one key bundle (schemes/registry.py): broker keys round-trip
through JSON, each profile routes a hospital event to its subscriber over broker cores, and the
secure profiles keep the canary off the wire."""

from __future__ import annotations

import json

import pytest

from pubguard.errors import ConfigError, DropReason
from pubguard.model import Event
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes.registry import (
    PROFILES,
    BrokerKeys,
    KeyBundle,
    build_registry,
    make_broker_scheme,
    make_profile,
)
from pubguard.sim.engine import Simulator
from pubguard.store import Database
from tests.schemes.attack_tools import scan, tap

NOW = 1_735_689_600.0
CANARY = "CANARY-registry-0b7e"
TREE = [("r", "a"), ("r", "b")]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> KeyBundle:
    return KeyBundle(tmp_path_factory.mktemp("bundle"), now=NOW, identities=["hospital"])


def event() -> Event:
    return Event(
        {"topic": "cardio", "age": 25, "patientRecord": CANARY},
        type="patient",
        payload=CANARY.encode(),
    )


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_end_to_end(bundle: KeyBundle, profile: str, tmp_path) -> None:
    pub = bundle.client(profile, "hospital", topics=["cardio"])
    sub = bundle.client(profile, "nurse", topics=["cardio"])
    keys = BrokerKeys.from_json(json.loads(json.dumps(bundle.broker_keys(narada=True).to_json())))
    sim = Simulator(
        tree_from_edges(TREE),
        lambda b: build_registry([profile, "plain"], keys, now=NOW, state_dir=tmp_path / b),
        wire=True,
        seed=1,
    )
    t = tap(sim)
    sim.add_client("hospital", "a", pub)
    sim.add_client("nurse", "b", sub)
    sim.advertise("hospital", 'topic = "cardio"', at=NOW)
    sim.subscribe("nurse", 'topic = "cardio"', at=NOW)
    sim.run()
    sim.publish("hospital", event(), at=NOW + 1)
    sim.run()
    (d,) = sim.clients["nurse"].deliveries
    assert d.event["patientRecord"] == CANARY and d.event.payload == CANARY.encode()
    assert not sim.drops
    assert (scan(t, CANARY.encode()) == 0) == (profile != "plain")


def test_broker_keys_hold_no_secret_and_round_trip(bundle: KeyBundle, tmp_path) -> None:
    keys = bundle.broker_keys()
    keys.save(tmp_path / "keys.json")
    back = BrokerKeys.load(tmp_path / "keys.json")
    assert back.to_json() == keys.to_json()
    text = (tmp_path / "keys.json").read_text()
    assert (
        "PRIVATE" not in text and bundle.signing_key("hospital").private_bytes().hex() not in text
    )
    with pytest.raises(ConfigError):
        BrokerKeys.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"publishers": {"x": "@@"}}')
    with pytest.raises(ConfigError):
        BrokerKeys.load(tmp_path / "bad.json")
    with pytest.raises(ConfigError):
        make_broker_scheme("nope", keys, now=NOW)
    with pytest.raises(ConfigError):
        make_broker_scheme("eventguard", BrokerKeys(), now=NOW)


def test_revocation_reaches_brokers_through_broker_keys(tmp_path) -> None:
    b = KeyBundle(tmp_path / "b", now=NOW, identities=["hospital"])
    client, _ = make_profile("default", b, "hospital", now=NOW)
    pe = client.protect_event(event(), now=NOW)
    b.revoke("hospital")
    broker = make_broker_scheme("default", b.broker_keys(), now=NOW, db=Database(tmp_path / "r.db"))
    from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
    from pubguard.wire.messages import Publish

    msg = Publish(pe.event_id, "default", pe.routing, pe.body, pe.meta)
    ctx = CheckContext(NOW, LinkInfo("c", LinkKind.CLIENT), "a")
    assert broker.broker_check(msg, ctx) is DropReason.REVOKED
