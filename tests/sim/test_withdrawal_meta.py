"""The simulator's unsubscribe/unadvertise carry the scheme's withdrawal meta (EventGuard's
UST/UAT-backed MS permits, eventguard.txt §4.5-4.6), so a legitimate withdrawal is accepted
through the ordinary client call while an empty one would be refused."""

from __future__ import annotations

import random

from pubguard.crypto import SecretBytes
from pubguard.keys.ms import MetaService
from pubguard.model import Event, Filter
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes import PlainScheme, withdrawal_meta
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.sim.engine import Simulator

TOPIC = "hospital/oncology"


def test_plain_scheme_has_no_withdrawal_meta() -> None:
    f = Filter.parse("a = 1")
    assert withdrawal_meta(PlainScheme(), "unsubscribe_meta", f, now=0.0) == {}


def test_sim_unsubscribe_and_unadvertise_carry_ms_permits() -> None:
    ms = MetaService(SecretBytes(random.Random(5).randbytes(32)), epoch_length=1000.0)
    tree = tree_from_edges([("r", "a"), ("r", "b")])
    sim = Simulator(tree, lambda _b: [EventGuardBroker(ms.public_key)], wire=True, seed=1)
    pub = sim.add_client("pub", "a", EventGuardClient("pub", ms))
    sub = sim.add_client("s1", "b", EventGuardClient("s1", ms))
    f = Filter.parse(f'topic = "{TOPIC}"')
    aid = sim.advertise("pub", f, at=0.0)
    sid = sim.subscribe("s1", f, at=0.0)
    sim.publish("pub", Event({"topic": TOPIC}), at=1.0)
    sim.run()
    assert len(sub.deliveries) == 1
    sim.unsubscribe("s1", sid, at=2.0)
    sim.run()
    assert not sim.drops, sim.drops
    assert sub.acks[-1].of == "unsubscribe"
    assert all(b.status()["subscriptions"] == 0 for b in sim.brokers.values())
    sim.publish("pub", Event({"topic": TOPIC}), at=3.0)
    sim.run()
    assert len(sub.deliveries) == 1  # nothing new after the unsubscribe
    sim.unadvertise("pub", aid, at=4.0)
    sim.run()
    assert not sim.drops and pub.acks[-1].of == "unadvertise"
