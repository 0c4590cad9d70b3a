"""The narada profile end to end in the simulator: KMC tokens on every action, encrypted and
signed payloads, the verified-token cache, expiring subscriptions, replay state that survives a
broker restart (narada-secure-delivery.txt §IV-VI)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pubguard.crypto import KemPrivateKey, SecretBytes
from pubguard.crypto.x509 import CertificateAuthority, Role
from pubguard.errors import DropReason, InvalidToken, StateError, ValidationError
from pubguard.keys.kmc import KMC, Authorize, RegisterTopic, Rights
from pubguard.model import Event
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes import SchemeRegistry
from pubguard.schemes.common.replay import ReplayState
from pubguard.schemes.narada.broker import NARADA, NaradaBroker, make_scheme
from pubguard.schemes.narada.client import NaradaClient
from pubguard.sim.engine import Simulator
from pubguard.store import Database
from tests.schemes.attack_tools import scan, tap

NOW = 1_735_689_600.0  # 2025-01-01T00:00:00Z
DAY = 86_400.0
TOPIC = "/gis/sensors"
OTHER = "/gis/other"
CANARY = "CANARY-narada-5e1b"


@dataclasses.dataclass
class Pki:
    ca: CertificateAuthority
    kmc: KMC
    kmc_cert: object
    owner: tuple
    entities: dict


RIGHTS = {
    "alice": Rights.PUBLISH,
    "bob": Rights.SUBSCRIBE,
    "carol": Rights.SUBSCRIBE,
    "mallory": Rights.SUBSCRIBE,
    "dave": Rights.BOTH,
}


def build_pki(tmp_path_factory, kmc_name: str = "kmc-1") -> Pki:
    ca = CertificateAuthority.create("ca", tmp_path_factory.mktemp("ca"), passphrase=b"pw", now=NOW)
    kmc_cert, kmc_key = ca.issue_signing_identity(kmc_name, Role.KMC, now=NOW)
    kmc = KMC(
        Database(":memory:"),
        signing_key=kmc_key,
        cert=kmc_cert,
        ca_cert=ca.cert,
        storage_key=SecretBytes(random.Random(1).randbytes(32)),
    )
    ocert, okey = owner = ca.issue_signing_identity("owner", Role.CLIENT, now=NOW)
    for t in (TOPIC, OTHER):
        req = RegisterTopic.signed(
            okey, ocert, topic=t, algorithm="AES-256-GCM", key_bits=256, now=NOW
        )
        kmc.register_topic(req, now=NOW)
    entities = {}
    for name, rights in RIGHTS.items():
        cert, key = ca.issue_signing_identity(name, Role.CLIENT, now=NOW)
        entities[name] = (cert, key)
        topics = (TOPIC, OTHER) if name == "mallory" else (TOPIC,)
        for t in topics:
            r = Rights.PUBLISH if (name, t) == ("mallory", OTHER) else rights
            kmc.authorize(
                Authorize.signed(
                    okey,
                    ocert,
                    topic=t,
                    entity=cert.subject,
                    rights=r,
                    not_before=NOW - 60,
                    not_after=NOW + 30 * DAY,
                    now=NOW,
                ),
                now=NOW,
            )
    return Pki(ca, kmc, kmc_cert, owner, entities)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return build_pki(tmp_path_factory)


def client(pki: Pki, name: str, topics=(TOPIC,), now: float = NOW) -> NaradaClient:
    cert, key = pki.entities[name]
    c = NaradaClient(key, cert, kmc_keys={pki.kmc_cert.subject: pki.kmc_cert.verify_key})
    for t in topics:
        kem = KemPrivateKey.generate()
        c.install(pki.kmc.request_key(c.key_request(t, kem, now=now), now=now), kem)
    return c


def broker_scheme(pki: Pki, **kw) -> NaradaBroker:
    return NaradaBroker(
        ca_cert=pki.ca.cert, kmc_certs=[pki.kmc_cert], now=NOW, crl=pki.ca.crl(now=NOW), **kw
    )


TREE = [("r", "a"), ("r", "b"), ("a", "a1"), ("b", "b1")]


def make_sim(pki: Pki, schemes=None, **kw):
    shared = schemes or broker_scheme(pki, **kw)
    sim = Simulator(tree_from_edges(TREE), lambda _b: [shared], wire=True, seed=4)
    return sim, tap(sim), shared


def test_scheme_surface(pki):
    s = make_scheme(ca_cert=pki.ca.cert, kmc_certs=[pki.kmc_cert], now=NOW)
    assert SchemeRegistry([s]).get(NARADA) is s
    with pytest.raises(ValidationError):
        s.decode_filter({"topic": TOPIC})
    with pytest.raises(ValidationError):
        NaradaBroker(
            ca_cert=pki.ca.cert,
            kmc_certs=[],
            now=NOW,
            replay=ReplayState(),
            db=Database(":memory:"),
        )
    with pytest.raises(InvalidToken):  # a client certificate is not a KMC
        NaradaBroker(ca_cert=pki.ca.cert, kmc_certs=[pki.entities["bob"][0]], now=NOW)
    bob = client(pki, "bob")
    with pytest.raises(StateError):
        bob.protect_event(Event({"topic": OTHER}), now=NOW)
    with pytest.raises(ValidationError):
        NaradaClient(pki.entities["bob"][1], pki.entities["alice"][0])


def test_publish_subscribe_end_to_end_payload_hidden(pki):
    sim, t, shared = make_sim(pki)
    alice = sim.add_client("alice", "a1", client(pki, "alice"))
    bob = sim.add_client("bob", "b1", client(pki, "bob"))
    dave = sim.add_client("dave", "a", client(pki, "dave"))
    sim.subscribe("bob", f'topic = "{TOPIC}"', at=NOW)
    sim.subscribe("dave", f'topic = "{TOPIC}"', at=NOW)
    sim.run()
    ev = Event({"topic": TOPIC, "reading": 7, "site": CANARY}, payload=CANARY.encode())
    for i in range(5):
        sim.publish("alice", ev.__class__({**ev.attrs, "i": i}, payload=ev.payload), at=NOW + 1)
    sim.run()
    assert not sim.drops and not alice.errors
    for c in (bob, dave):
        assert [d.event["i"] for d in c.deliveries] == list(range(5))
        assert c.deliveries[0].event["site"] == CANARY and c.deliveries[0].event.payload
    assert scan(t, CANARY.encode()) == 0  # brokers see the topic, never the payload
    # the verified-token cache (§VI): one full verification per token, not per message x broker
    assert shared.verifications == 3  # alice's, bob's and dave's tokens
    assert shared.tokens.hits > 0


def test_token_cache_is_invalidated_by_message_count(pki):
    sim, _, shared = make_sim(pki, token_uses=2)
    sim.add_client("alice", "a1", client(pki, "alice"))
    sim.add_client("bob", "b1", client(pki, "bob"))
    sim.subscribe("bob", f'topic = "{TOPIC}"', at=NOW)
    sim.run()
    before = shared.verifications
    for i in range(6):
        sim.publish("alice", Event({"topic": TOPIC, "i": i}), at=NOW + 1)
    sim.run()
    # 6 messages x 5 brokers = 30 checks; every third one re-verifies the token
    assert shared.verifications - before == 10


def test_subscription_stops_matching_when_its_token_expires(pki):
    ocert, okey = pki.owner
    cert, key = pki.ca.issue_signing_identity("erin", Role.CLIENT, now=NOW)
    pki.entities["erin"] = (cert, key)
    pki.kmc.authorize(
        Authorize.signed(
            okey,
            ocert,
            topic=TOPIC,
            entity=cert.subject,
            rights=Rights.SUBSCRIBE,
            not_before=NOW - 60,
            not_after=NOW + 600,
            now=NOW,
        ),
        now=NOW,
    )
    sim, _, _ = make_sim(pki)
    sim.add_client("alice", "a1", client(pki, "alice"))
    erin = sim.add_client("erin", "b1", client(pki, "erin"))
    sim.subscribe("erin", f'topic = "{TOPIC}"', at=NOW)
    sim.run()
    sim.publish("alice", Event({"topic": TOPIC, "n": 1}), at=NOW + 10)
    sim.publish("alice", Event({"topic": TOPIC, "n": 2}), at=NOW + 700)
    sim.run()
    assert [d.event["n"] for d in erin.deliveries] == [1]


def test_replay_state_survives_a_broker_restart(pki, tmp_path):
    db_path = tmp_path / "broker.db"
    alice = client(pki, "alice")
    msgs = [
        alice.protect_event(Event({"topic": TOPIC, "i": i}), now=NOW + 1 + i / 1000)
        for i in range(3)
    ]

    def broker(db):
        sim = Simulator(
            tree_from_edges([], nodes=["solo"]),
            lambda _b: [broker_scheme(pki, replay=ReplayState(db, reserve=0))],
            wire=True,
        )
        sim.add_client("alice", "solo", alice)
        return sim

    def send(sim, pe, at):
        w = {
            "op": "publish",
            "event_id": pe.event_id,
            "profile": NARADA,
            "routing": pe.routing,
            "body": pe.body,
            "meta": dict(pe.meta),
        }
        sim.send_raw("alice", "solo", w, at=at)
        sim.run()
        return [r.drop.reason for r in sim.drops]

    db = Database(db_path)
    first = broker(db)
    assert send(first, msgs[0], NOW + 2) == [] and send(first, msgs[1], NOW + 2) == []
    db.close()
    db = Database(db_path)  # the restart: new core, new scheme, same database file
    second = broker(db)
    assert send(second, msgs[0], NOW + 3) == [DropReason.REPLAYED]  # dedup window is gone,
    assert send(second, msgs[1], NOW + 3)[-1] is DropReason.REPLAYED  # the replay state is not
    assert len(send(second, msgs[2], NOW + 3)) == 2  # the next genuine message passes
    db.close()


def test_deferred_replay_state_commits_with_the_callers_transaction(tmp_path):
    """A durable broker's replay state lives in its own database and is written when its
    batch commits (``flush_pending`` inside the transaction): exact, nothing reserved, and
    nothing written for a batch that rolled back."""
    db = Database(tmp_path / "broker.db")
    rs = ReplayState(db, deferred=True)
    assert rs.check_and_accept("b", b"e", 1_000_000, 1) is None
    assert db.query("SELECT * FROM replay_state") == []  # marked, not written
    with db.transaction():
        rs.flush_pending()
    assert ReplayState(db).check("b", b"e", 1_000_000, 1) is DropReason.REPLAYED
    assert ReplayState(db).check("b", b"e", 1_000_000, 2) is None  # exact: nothing reserved
    assert rs.check_and_accept("b", b"e", 1_000_001, 0) is None
    with pytest.raises(RuntimeError), db.transaction():
        rs.flush_pending()
        raise RuntimeError("the batch failed")
    assert ReplayState(db).check("b", b"e", 1_000_001, 0) is None  # rolled back with it


def test_an_older_brokers_replay_db_is_carried_into_its_database(tmp_path):
    """Upgrading a broker whose replay state was in ``replay.db`` reopens no replay window:
    the rows are carried over (the later bound wins) and the file renamed."""
    old = ReplayState(Database(tmp_path / "replay.db"), reserve=1.0)
    old.accept("b", b"e", 2_000_000, 0)  # persisted as ts + 1 s reserved
    db = Database(tmp_path / "broker.db")
    newer = ReplayState(db, deferred=True)
    newer.accept("b", b"f", 5, 5)
    with db.transaction():
        newer.flush_pending()
    assert ReplayState.import_file(tmp_path / "replay.db", db) == 1
    assert not (tmp_path / "replay.db").exists() and (tmp_path / "replay.db.imported").exists()
    assert ReplayState(db).check("b", b"e", 2_000_999, 9) is DropReason.REPLAYED
    assert ReplayState(db).check("b", b"f", 5, 5) is DropReason.REPLAYED
    assert ReplayState.import_file(tmp_path / "replay.db", db) == 0  # once


def test_reserved_replay_bound_writes_rarely_and_refuses_after_restart(tmp_path):
    db = Database(tmp_path / "r.db")
    rs = ReplayState(db, reserve=1.0)
    writes = []
    rs._write = lambda *a, _w=rs._write: (writes.append(a), _w(*a))  # count disk writes
    for i in range(100):
        assert rs.check_and_accept("b", b"e", 1_000_000 + i, 0) is None  # 100 ms of traffic
    assert len(writes) == 1
    assert rs.check_and_accept("b", b"e", 1_000_050, 0) is DropReason.REPLAYED
    again = ReplayState(db, reserve=1.0)
    assert again.check("b", b"e", 1_000_099, 5) is DropReason.REPLAYED
    assert again.check("b", b"e", 1_001_000, 0) is DropReason.REPLAYED  # inside the reserve
    assert again.check("b", b"e", 1_001_001, 0) is None
    rs.flush()  # clean shutdown persists the exact state: no reserve is given up
    assert ReplayState(db).check("b", b"e", 1_000_100, 0) is None
    assert ReplayState(db).check("b", b"e", 1_000_099, 0) is DropReason.REPLAYED
