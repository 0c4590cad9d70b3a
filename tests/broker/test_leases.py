"""Subscription leases (``Broker.expire``): a subscription resting on a permit of one key
epoch (default, eventguard) is forgotten once the permit has run out plus ``max_delay``, at
the subscriber's broker and the brokers above it, without the subscriber's withdrawal proof,
so a subscriber that vanished does not stay routed for ever. Before then a proof-less
withdrawal is still refused (the fake unsubscribe guard). psguard entries hold no permit and
never lapse. Real keys and permits (``KeyBundle``), two broker cores wired by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pubguard.broker import Broker, DeliverTo, Forward
from pubguard.broker.catch_up import CATCH_UP_S
from pubguard.broker.state import MemoryState
from pubguard.errors import DropReason
from pubguard.model import Event, Filter
from pubguard.schemes.base import LEASE_SLACK, LinkKind
from pubguard.schemes.registry import HOSPITAL, KeyBundle, make_broker_scheme
from pubguard.wire.messages import Publish, Subscribe, Unsubscribe

EPOCH = 100.0
MAX_DELAY = 30.0
NOW = 1_050.0  # epoch 10: [1000, 1100)
END = 1_100.0
LEASE = END + MAX_DELAY
CARDIO = 'topic = "cardio"'


class Chain:
    """``parent`` <- ``child`` <- subscriber ``sub`` (client link ``c``); publisher ``hosp`` on
    the parent. Forwards between the two cores are delivered by :meth:`pump`."""

    def __init__(self, tmp: Path, profile: str, *, store: MemoryState | None = None) -> None:
        self.profile = profile
        self.bundle = KeyBundle(
            tmp,
            now=NOW,
            types=(HOSPITAL,),
            identities=["hosp"],
            epoch_length=EPOCH,
            origin=0.0,
            max_delay=MAX_DELAY,
        )
        keys = self.bundle.broker_keys()
        self.parent = Broker("p", [make_broker_scheme(profile, keys, now=NOW)])
        self.child = Broker("k", [make_broker_scheme(profile, keys, now=NOW)], store=store)
        self.parent.add_link("down", LinkKind.CHILD, "k")
        self.parent.add_link("pub", LinkKind.CLIENT, "hosp")
        self.child.add_link("up", LinkKind.PARENT, "p")
        self.child.add_link("c", LinkKind.CLIENT, "sub")
        self.sub = self.bundle.client(profile, "sub")
        self.pub = self.bundle.client(profile, "hosp")

    def pump(self, actions: list[Any], now: float) -> list[Any]:
        """Carry the child's upward forwards to the parent; returns the parent's actions."""
        out: list[Any] = []
        for a in actions:
            if isinstance(a, Forward) and a.link == "up":
                out += self.parent.handle(a.message.to_wire(), "down", now)
        return out

    def subscribe(self, sub_id: str, *, built: float, at: float = NOW) -> None:
        pf = self.sub.protect_filter(Filter.parse(CARDIO), now=built)
        msg = Subscribe(sub_id, self.profile, pf.filter, pf.meta)
        self.pump(self.child.handle(msg, "c", at), at)

    def publish(self, eid: str, at: float, arrive: float | None = None) -> set[str]:
        """Publish at ``at`` (arriving at the parent at ``arrive``, default ``at``); the
        subscription ids the child delivers to."""
        if self.profile == "eventguard":
            pa = self.pub.protect_advertisement(Filter.parse(CARDIO), now=at)
            from pubguard.wire.messages import Advertise

            self.parent.handle(Advertise(f"a-{eid}", self.profile, pa.filter, pa.meta), "pub", at)
        pe = self.pub.protect_event(
            Event({"topic": "cardio", "age": 30, "patientRecord": "r"}, id=eid, type="patient"),
            now=at,
        )
        at = at if arrive is None else arrive
        acts = self.parent.handle(
            Publish(pe.event_id, self.profile, pe.routing, pe.body, pe.meta), "pub", at
        )
        got: set[str] = set()
        for a in acts:
            if isinstance(a, Forward) and a.link == "down":
                for d in self.child.handle(a.message.to_wire(), "up", at):
                    if isinstance(d, DeliverTo):
                        got.update(d.message.sub_ids)
        return got


@pytest.mark.parametrize("profile", ["default", "eventguard"])
def test_a_lapsed_subscription_is_forgotten_at_every_broker(tmp_path: Path, profile: str) -> None:
    ch = Chain(tmp_path, profile)
    ch.subscribe("s", built=NOW)
    assert len(ch.child.subscriptions()) == len(ch.parent.subscriptions()) == 1
    assert ch.publish("e1", NOW + 1) == {"s"}
    ch.parent.expire(LEASE + 1)  # a child's entry: LEASE_SLACK longer
    assert len(ch.parent.subscriptions()) == 1
    # before the lease ends nothing lapses, and a withdrawal without the proof is refused
    assert ch.child.expire(LEASE - 1) == [] and len(ch.child.subscriptions()) == 1
    fwd = ch.parent.subscriptions()[0][1]
    ch.parent.handle(Unsubscribe(fwd, profile, {}), "down", END - 1)
    assert ch.parent.drops[DropReason.UNAUTHORISED] == 1
    assert len(ch.parent.subscriptions()) == 1
    # after it, the child forgets the entry and the parent accepts its proof-less withdrawal
    up = ch.child.expire(LEASE + 1)
    assert ch.child.subscriptions() == [] and ch.child.counters["subscribe.expired"] == 1
    assert [type(a.message) for a in up if isinstance(a, Forward)] == [Unsubscribe]
    ch.pump(up, LEASE + 1)
    assert ch.parent.subscriptions() == []
    assert ch.parent.drops[DropReason.UNAUTHORISED] == 1  # no new refusal
    assert ch.child.expire(LEASE + 2) == []  # nothing left to lapse


def test_a_renewal_outlives_the_lapsed_generation_at_every_broker(tmp_path: Path) -> None:
    """default: the next epoch's generation is built ahead (its tokens differ: both are
    forwarded); the parent lapses the old one even when the child's withdrawal is lost."""
    ch = Chain(tmp_path, "default")
    ch.subscribe("s", built=NOW)
    ch.subscribe("s@1", built=END + 0.001, at=END - 20)
    assert len(ch.parent.subscriptions()) == 2
    ch.parent.expire(LEASE + 1)  # a child's entry outlives its lease by LEASE_SLACK here
    assert len(ch.parent.subscriptions()) == 2
    ch.parent.expire(LEASE + LEASE_SLACK + 1)  # the child's withdrawal was lost: lapsed
    assert len(ch.parent.subscriptions()) == 1
    ch.pump(ch.child.expire(LEASE + LEASE_SLACK + 1), LEASE + LEASE_SLACK + 1)  # unknown there
    assert [s for _, s, _ in ch.child.subscriptions()] == ["s@1"]
    assert len(ch.parent.subscriptions()) == 1
    assert ch.parent.drops == {} and ch.child.drops == {}
    assert ch.publish("e2", LEASE + 2) == {"s@1"}  # the next epoch's events still route


def test_an_eventguard_renewal_is_forwarded_when_the_cover_lapses(tmp_path: Path) -> None:
    """eventguard: T(w) survives epochs, so the renewal (asked for after the change) is covered
    by the old generation at the child and not forwarded; when the old one lapses the child
    forwards the renewal, so the parent routes the topic down again."""
    ch = Chain(tmp_path, "eventguard")
    ch.subscribe("s", built=NOW)
    ch.subscribe("s@1", built=END + 1, at=END + 1)
    assert len(ch.child.subscriptions()) == 2 and len(ch.parent.subscriptions()) == 1
    assert ch.publish("e2", END + 2) == {"s", "s@1"}  # the client hands it over once
    ch.pump(ch.child.expire(LEASE + 1), LEASE + 1)
    assert [s for _, s, _ in ch.child.subscriptions()] == ["s@1"]
    [(_, fwd, m)] = ch.parent.subscriptions()
    assert m.meta == ch.child.subscriptions()[0][2].meta  # the renewal's permit
    assert ch.parent.drops == {} and ch.child.drops == {}
    assert ch.publish("e3", LEASE + 2) == {"s@1"}


@pytest.mark.parametrize("profile", ["default", "eventguard"])
def test_a_publication_signed_as_its_epoch_ends_is_not_refused_in_transit(
    tmp_path: Path, profile: str
) -> None:
    """The publish permit is checked at the publication's signed time (within max_delay of
    the broker's clock), so one signed just before its permit ran out still routes."""
    ch = Chain(tmp_path, profile)
    ch.subscribe("s", built=NOW)
    ch.subscribe(
        "s@1",
        built=END + 0.001 if profile == "default" else END + 0.5,
        at=END - 10 if profile == "default" else END + 0.5,
    )
    assert ch.publish("edge", END - 0.01, arrive=END + 0.2)  # signed in epoch 10, arrives in 11
    assert ch.parent.drops == {}
    assert ch.publish("late", END - 0.01, arrive=END + MAX_DELAY + 0.5) == set()
    assert dict(ch.parent.drops) == {DropReason.STALE: 1}  # max_delay still bounds the tail


@pytest.mark.parametrize("profile", ["default", "eventguard"])
def test_an_advertisement_lapses_with_its_permit_and_a_renewal_replaces_it(
    tmp_path: Path, profile: str
) -> None:
    """Advertisements rest on a permit of one epoch too: each broker forgets one whose permit
    ran out (the one from another broker LEASE_SLACK later); the publisher's advertisement
    renewed in place (same id, the next epoch's permit) outlives it."""
    from pubguard.wire.messages import Advertise

    ch = Chain(tmp_path, profile)
    pa = ch.pub.protect_advertisement(Filter.parse(CARDIO), now=NOW)
    for a in ch.parent.handle(Advertise("ad", profile, pa.filter, pa.meta), "pub", NOW):
        if isinstance(a, Forward) and a.link == "down":
            ch.child.handle(a.message.to_wire(), "up", NOW)
    assert ch.parent.status()["advertisements"] == 1
    assert ch.child.status()["advertisements"] == 1
    assert ch.parent.expire(LEASE - 1) == [] and ch.child.expire(LEASE - 1) == []
    down = ch.parent.expire(LEASE + 1)  # the publisher's own: lapses here, forwarded down
    assert ch.parent.status()["advertisements"] == 0
    for a in down:
        if isinstance(a, Forward) and a.link == "down":
            ch.child.handle(a.message.to_wire(), "up", LEASE + 1)  # proof-less: accepted
    assert ch.child.status()["advertisements"] == 0 and ch.child.drops == {}
    assert ch.parent.counters["advertise.expired"] == 1
    # renewed in place before the lease ends: the new permit's lease applies
    ch2 = Chain(tmp_path / "again", profile)
    pa = ch2.pub.protect_advertisement(Filter.parse(CARDIO), now=NOW)
    ch2.parent.handle(Advertise("ad", profile, pa.filter, pa.meta), "pub", NOW)
    pa = ch2.pub.protect_advertisement(Filter.parse(CARDIO), now=END + 0.5)
    ch2.parent.handle(Advertise("ad", profile, pa.filter, pa.meta), "pub", END + 0.5)
    ch2.parent.expire(LEASE + 1)
    assert ch2.parent.status()["advertisements"] == 1 and ch2.parent.drops == {}


def test_leases_are_restored_with_the_state(tmp_path: Path) -> None:
    store = MemoryState()
    ch = Chain(tmp_path, "default", store=store)
    ch.subscribe("s", built=NOW)
    keys = ch.bundle.broker_keys()
    again = Broker("k", [make_broker_scheme("default", keys, now=NOW)], store=store)
    assert len(again.subscriptions()) == 1
    assert again.expire(LEASE - 1) == []
    # the restored client link is down until its client reconnects: held for the horizon
    again.expire(LEASE + 1)
    assert len(again.subscriptions()) == 1
    again.expire(LEASE + MAX_DELAY + 1)
    assert again.subscriptions() == [] and dict(store.items("subscriptions")) == {}


def test_psguard_subscriptions_hold_no_lease(tmp_path: Path) -> None:
    ch = Chain(tmp_path, "psguard")
    ch.subscribe("s", built=NOW)
    assert ch.child.expire(1e12) == [] and len(ch.child.subscriptions()) == 1


def test_a_grandchilds_held_generation_promoted_at_the_lapse_is_accepted_above(
    tmp_path: Path,
) -> None:
    """eventguard, three levels (the soak found it): the child holds its own subscriber's
    old generation ``s``, a grandchild's copy ``t`` of the same topic (LEASE_SLACK longer) and
    its subscriber's renewal ``s@1``, all one token (T(w) survives epochs), so only ``s`` was
    forwarded. When ``s`` lapses the child forwards the next in line, the grandchild's ``t``,
    whose permit has run out; the parent accepts it for as long as the child may hold it (it
    refused it before, and the topic went unrouted until the grandchild's own lapse arrived)."""
    ch = Chain(tmp_path, "eventguard")
    ch.child.add_link("g", LinkKind.CHILD, "grandchild")
    ch.subscribe("s", built=NOW)
    other = ch.bundle.client("eventguard", "sub2")
    pf = other.protect_filter(Filter.parse(CARDIO), now=NOW)
    ch.pump(ch.child.handle(Subscribe("t", "eventguard", pf.filter, pf.meta), "g", NOW), NOW)
    ch.subscribe("s@1", built=END + 1, at=END + 1)
    assert len(ch.child.subscriptions()) == 3 and len(ch.parent.subscriptions()) == 1
    up = ch.child.expire(LEASE + 1)  # "s" lapses; "t" is held LEASE_SLACK longer
    sent = [
        (type(a.message).__name__, a.message.meta == pf.meta) for a in up if isinstance(a, Forward)
    ]
    assert sent == [("Subscribe", True), ("Unsubscribe", False)]  # "t" forwarded, then "s" gone
    ch.pump(up, LEASE + 1)
    assert ch.parent.drops == {} and len(ch.parent.subscriptions()) == 1
    assert ch.publish("e3", LEASE + 2) == {"s@1"}  # still routed down to the child
    # a client may not do the same: its permit must be current
    late = other.protect_filter(Filter.parse(CARDIO), now=NOW)
    ch.child.handle(Subscribe("u", "eventguard", late.filter, late.meta), "c", LEASE + 2)
    assert ch.child.drops == {DropReason.UNAUTHORISED: 1}


@pytest.mark.parametrize("profile", ["default", "eventguard"])
def test_a_down_links_entries_are_held_past_their_lease(tmp_path: Path, profile: str) -> None:
    """Its renewal cannot get through while the link is down: the parent holds the child's
    entry for the scheme's ``catch_up_horizon`` past its lease, and once the link is back
    for ``CATCH_UP_S`` (its peer has re-sent its renewals by then). A soak lost eventguard
    events routed nowhere after such an entry lapsed during the child's outage."""
    ch = Chain(tmp_path, profile)
    horizon = ch.parent.schemes.get(profile).catch_up_horizon  # type: ignore[union-attr]
    assert horizon == MAX_DELAY
    ch.subscribe("s", built=NOW)
    lapse = LEASE + LEASE_SLACK  # the parent's lease of a child's entry
    ch.parent.link_down("down", NOW + 1)
    ch.parent.expire(lapse + 1)
    assert len(ch.parent.subscriptions()) == 1  # held: the child is down
    if profile == "eventguard":  # T(w) survives epochs: still routed (into the outbox)
        assert ch.publish("e1", lapse + 2) == {"s"}
    ch.parent.expire(lapse + horizon + 1)
    assert ch.parent.subscriptions() == []  # down past the horizon: lapsed
    # back before the horizon: held for CATCH_UP_S, then lapsed
    ch = Chain(tmp_path / "2", profile)
    ch.subscribe("s", built=NOW)
    ch.parent.link_down("down", NOW + 1)
    ch.parent.link_live("down", lapse)
    ch.parent.expire(lapse + CATCH_UP_S - 1)
    assert len(ch.parent.subscriptions()) == 1
    ch.parent.expire(lapse + CATCH_UP_S + 1)
    assert ch.parent.subscriptions() == []
    assert ch.parent.counters["subscribe.expired"] == 1


def test_a_held_entry_of_a_down_grandchild_leaves_the_forward_set(tmp_path: Path) -> None:
    """eventguard, three levels (a soak found it): the child holds a grandchild's old
    generation ``t`` past its lease while the grandchild is down. Held, it must not keep
    covering the child's own subscriber's renewal ``s@1``: the parent's copy of ``t`` lapses
    on time, and the topic went unrouted above until the child let ``t`` go (1-3 s in the
    soak). Held entries leave the forward set, so ``s@1`` goes up, and ``t`` is still
    matched for the grandchild's outbox."""
    ch = Chain(tmp_path, "eventguard")
    ch.child.add_link("g", LinkKind.CHILD, "grandchild")
    other = ch.bundle.client("eventguard", "sub2")
    pf = other.protect_filter(Filter.parse(CARDIO), now=NOW)
    ch.pump(ch.child.handle(Subscribe("t", "eventguard", pf.filter, pf.meta), "g", NOW), NOW)
    ch.subscribe("s@1", built=END + 1, at=END + 1)  # covered by "t": not forwarded
    assert len(ch.parent.subscriptions()) == 1
    ch.child.link_down("g", END + 2)
    held_at = LEASE + LEASE_SLACK + 1  # "t" (from a broker) lapses now, but is held
    up = ch.child.expire(held_at)
    assert ch.child.counters["subscribe.held"] == 1
    assert len(ch.child.subscriptions()) == 2
    sent = [type(a.message).__name__ for a in up if isinstance(a, Forward)]
    assert sent == ["Subscribe", "Unsubscribe"]  # "s@1" goes up, then "t"'s copy goes
    ch.pump(up, held_at)
    [(_, _, m)] = ch.parent.subscriptions()
    assert m.meta != pf.meta and ch.parent.drops == {}
    acts = ch.parent.handle(
        _publication(ch, "e1", held_at + 1), "pub", held_at + 1
    )  # the parent routes by "s@1"; the child to both its subscriber and "g"
    [fwd] = [a for a in acts if isinstance(a, Forward) and a.link == "down"]
    links = {a.link for a in ch.child.handle(fwd.message.to_wire(), "up", held_at + 1)}
    assert links == {"c", "g"}
    assert ch.child.expire(held_at + 2) == []  # held: nothing more goes up
    ch.child.expire(held_at + MAX_DELAY + 1)  # down past the horizon: gone
    assert [s for _, s, _ in ch.child.subscriptions()] == ["s@1"]


def _publication(ch: Chain, eid: str, at: float) -> Publish:
    from pubguard.wire.messages import Advertise

    pa = ch.pub.protect_advertisement(Filter.parse(CARDIO), now=at)
    ch.parent.handle(Advertise(f"a-{eid}", "eventguard", pa.filter, pa.meta), "pub", at)
    pe = ch.pub.protect_event(
        Event({"topic": "cardio", "age": 30, "patientRecord": "r"}, id=eid, type="patient"), now=at
    )
    return Publish(pe.event_id, "eventguard", pe.routing, pe.body, pe.meta)
