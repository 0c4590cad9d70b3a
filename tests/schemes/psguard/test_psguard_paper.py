"""The ``psguard-paper`` profile: psguard.txt §2's honest-but-curious routing nodes. Brokers
match tokens and check nothing else; forgeries and tampering are routed and refused end to end
(the subscriber's signature check when it knows the publisher, the AEAD under ``K(e)``). The
mode is visible: its own profile name in the broker's served profiles, its ``trust`` text, and
the threat table of docs/profiles.md."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pubguard.broker import Broker, DeliverTo, Drop
from pubguard.crypto import SigningKey
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from pubguard.schemes.psguard.broker import PSGuardBroker
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import PSGuardKeyService
from pubguard.schemes.psguard.record import PSGUARD_PAPER, Schema
from pubguard.schemes.registry import PROFILES, BrokerKeys, build_registry
from pubguard.wire.messages import Publish, Subscribe

PATIENT = EventType(
    "patient",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec("record", "str", routable=False),
    ),
)
NOW = 1_000.0
DOCS = Path(__file__).resolve().parents[3] / "docs" / "profiles.md"


@pytest.fixture(scope="module")
def world():
    svc = PSGuardKeyService(KDC(bytes(range(32))), Schema([PATIENT]))
    psk = SigningKey.from_seed(bytes(range(1, 33)))
    pub = PSGuardClient("hospital", svc, signing_key=psk, profile=PSGUARD_PAPER)
    sub = PSGuardClient(
        "young", svc, publisher_keys={"hospital": psk.public}, profile=PSGUARD_PAPER
    )
    return svc, psk, pub, sub


def ev(i: int, age: int = 25) -> Event:
    return Event(
        {"topic": "cardio", "age": age, "record": "r"}, id=f"e{i}", type="patient", payload=b"p"
    )


def core(psk: SigningKey) -> Broker:
    b = Broker("b0", [PSGuardBroker({"hospital": psk.public}, verify="none")])
    b.add_link("c:hospital", LinkKind.CLIENT, "hospital")
    b.add_link("c:young", LinkKind.CLIENT, "young")
    return b


def test_paper_brokers_route_forgeries_and_subscribers_refuse_them(world) -> None:
    _, psk, pub, sub = world
    b = core(psk)
    pf = sub.protect_filter(Filter.parse('topic = "cardio" && age >= 20 && age <= 30'), now=NOW)
    b.handle(Subscribe("s1", PSGUARD_PAPER, pf.filter, pf.meta), "c:young", NOW)
    good = pub.protect_event(ev(1), now=NOW, rng=random.Random(1))
    forged = {**good.meta, "sig": bytes(64)}  # any signature: the broker does not look
    stolen = pub.protect_event(ev(2), now=NOW, rng=random.Random(2))
    tampered = stolen.body[:-1] + bytes([stolen.body[-1] ^ 1])
    cases = [
        (good, good.body, good.meta),
        (good, good.body, forged),
        (stolen, tampered, stolen.meta),
    ]
    seen = []
    for i, (pe, body, meta) in enumerate(cases):
        acts = b.handle(Publish(f"x{i}", PSGUARD_PAPER, pe.routing, body, meta), "c:hospital", NOW)
        assert not [a for a in acts if isinstance(a, Drop)]  # routed, not checked
        (d,) = [a for a in acts if isinstance(a, DeliverTo)]
        seen.append(d.message.event)
    assert sub.open_event(good.event_id, good.routing, good.body, good.meta, now=NOW)["age"] == 25
    with pytest.raises(InvalidToken):  # the publisher's signature, checked end to end
        sub.open_event(good.event_id, good.routing, good.body, forged, now=NOW)
    blind = PSGuardClient("young2", world[0], profile=PSGUARD_PAPER)  # no publisher keys
    blind.protect_filter(Filter.parse('topic = "cardio" && age >= 20 && age <= 30'), now=NOW)
    with pytest.raises(InvalidToken):  # the AEAD under K(e) catches the tampered payload
        blind.open_event(stolen.event_id, stolen.routing, tampered, stolen.meta, now=NOW)
    assert len(seen) == 3 and b.status()["drops"] == {}


def test_the_signed_profile_still_drops_what_the_paper_brokers_route(world) -> None:
    _, psk, pub, _ = world
    pe = pub.protect_event(ev(3), now=NOW, rng=random.Random(3))
    m = Publish(pe.event_id, "psguard", pe.routing, pe.body, {**pe.meta, "sig": bytes(64)})
    ctx = CheckContext(
        now=NOW, link=LinkInfo("c:hospital", LinkKind.CLIENT, "hospital"), broker_id="b0"
    )
    signed = PSGuardBroker({"hospital": psk.public})
    signed.decode_event(m.routing)
    assert signed.broker_check(m, ctx) is DropReason.FORGED
    paper = PSGuardBroker({"hospital": psk.public}, verify="none")
    paper.decode_event(m.routing)
    assert paper.broker_check(m, ctx) is None
    with pytest.raises(ValidationError):
        PSGuardBroker({}, verify="sometimes")


def test_the_mode_is_visible(tmp_path: Path) -> None:
    assert PSGUARD_PAPER in PROFILES and PROFILES.index("psguard") < PROFILES.index(PSGUARD_PAPER)
    reg = build_registry(["psguard", PSGUARD_PAPER], BrokerKeys(), now=NOW)
    assert reg.profiles == ("psguard", PSGUARD_PAPER)  # what a broker's status lists
    paper, signed = reg.get(PSGUARD_PAPER), reg.get("psguard")
    assert "honest-but-curious" in paper.trust and not paper.checks_messages  # type: ignore[union-attr]
    assert "malicious" in signed.trust and signed.checks_messages  # type: ignore[union-attr]
    assert "verify='none'" in repr(paper)
    assert Broker("b", reg)._profile(PSGUARD_PAPER).batches  # type: ignore[union-attr]
    text = DOCS.read_text()
    assert "psguard-paper" in text and "honest-but-curious" in text
