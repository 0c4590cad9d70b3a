"""Catch-up routing (``Broker.link_down`` / ``link_live``, ``CatchUpRouter.route``):
psguard and default tokens change with the key epoch, and a subtree's renewals for the next
epoch reach a broker only over a live link. A child link that is down (or this broker's,
restored after a restart) at the change holds only the old epoch's subscriptions here, so the
new epoch's publications match nothing for it; they are routed to it anyway while it is down
or catching up, and matched below where the renewals are. Real keys and permits
(``KeyBundle``), two broker cores wired by hand: ``parent`` <- ``child`` <- subscriber.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pubguard.broker import Broker, DeliverTo, Forward
from pubguard.broker.catch_up import CATCH_UP_S
from pubguard.broker.state import MemoryState
from pubguard.model import Event, Filter
from pubguard.schemes.base import LinkKind
from pubguard.schemes.registry import HOSPITAL, KeyBundle, make_broker_scheme
from pubguard.wire.messages import Publish, Subscribe, Unsubscribe

EPOCH = 100.0
MAX_DELAY = 30.0
NOW = 1_050.0  # epoch 10: [1000, 1100)
NEXT = 1_105.0  # epoch 11
CARDIO = 'topic = "cardio"'
PROFILES = ["psguard", "default"]


class Pair:
    """Two broker cores; the child's subscriber ``sub`` on client link ``c``, the publisher on
    the parent's client link ``pub``. ``store`` keeps the parent's state (a restart)."""

    def __init__(self, tmp: Path, profile: str, no_catch_up: tuple[str, ...] = ()) -> None:
        self.profile = profile
        self.no_catch_up = no_catch_up
        self.bundle = KeyBundle(
            tmp,
            now=NOW,
            types=(HOSPITAL,),
            identities=["hosp"],
            epoch_length=EPOCH,
            origin=0.0,
            max_delay=MAX_DELAY,
        )
        self.keys = self.bundle.broker_keys()
        self.store = MemoryState()
        self.parent = self._parent()
        self.parent.add_link("down", LinkKind.CHILD, "k")
        self.parent.add_link("pub", LinkKind.CLIENT, "hosp")
        self.child = Broker("k", [make_broker_scheme(profile, self.keys, now=NOW)])
        self.child.add_link("up", LinkKind.PARENT, "p")
        self.child.add_link("c", LinkKind.CLIENT, "sub")
        self.child.add_link("local", LinkKind.CLIENT, "hosp")  # a publisher beside the sub
        self.sub = self.bundle.client(profile, "sub")
        self.pub = self.bundle.client(profile, "hosp")

    def _parent(self) -> Broker:
        scheme = make_broker_scheme(self.profile, self.keys, now=NOW)
        return Broker("p", [scheme], store=self.store, no_catch_up=self.no_catch_up)

    def restart_parent(self) -> None:
        self.parent = self._parent()

    def subscribe(self, sub_id: str, *, built: float, at: float, link_up: bool = True) -> list[Any]:
        """Subscribe at the child; its forward reaches the parent only if ``link_up``
        (else it is returned: the child's link re-sends it when it reconnects)."""
        pf = self.sub.protect_filter(Filter.parse(CARDIO), now=built)
        acts = self.child.handle(Subscribe(sub_id, self.profile, pf.filter, pf.meta), "c", at)
        if link_up:
            self.pump(acts, at)
            return []
        return acts

    def pump(self, actions: list[Any], now: float) -> None:
        for a in actions:
            if isinstance(a, Forward) and a.link == "up":
                self.parent.handle(a.message.to_wire(), "down", now)

    def publish_local(self, eid: str, at: float) -> set[str]:
        """Publish at the child; the sub ids it delivers to at once."""
        pe = self.pub.protect_event(
            Event({"topic": "cardio", "age": 30, "patientRecord": "r"}, id=eid, type="patient"),
            now=at,
        )
        acts = self.child.handle(
            Publish(pe.event_id, self.profile, pe.routing, pe.body, pe.meta), "local", at
        )
        return {s for a in acts if isinstance(a, DeliverTo) for s in a.message.sub_ids}

    def publish(self, eid: str, at: float) -> tuple[bool, set[str]]:
        """(whether the parent routed it to the child, the child's deliveries' sub ids)."""
        pe = self.pub.protect_event(
            Event({"topic": "cardio", "age": 30, "patientRecord": "r"}, id=eid, type="patient"),
            now=at,
        )
        acts = self.parent.handle(
            Publish(pe.event_id, self.profile, pe.routing, pe.body, pe.meta), "pub", at
        )
        down = [a for a in acts if isinstance(a, Forward) and a.link == "down"]
        got: set[str] = set()
        for a in down:
            for d in self.child.handle(a.message.to_wire(), "up", at):
                if isinstance(d, DeliverTo):
                    got.update(d.message.sub_ids)
        return bool(down), got


@pytest.mark.parametrize("profile", PROFILES)
def test_a_child_down_across_the_change_still_gets_the_new_epochs_events(
    tmp_path: Path, profile: str
) -> None:
    pair = Pair(tmp_path, profile)
    pair.subscribe("s", built=NOW, at=NOW)
    assert pair.publish("e1", NOW + 1) == (True, {"s"})
    pair.parent.link_down("down")
    # the renewal is built ahead and stored at the child; the link to the parent is down
    pair.subscribe("s@1", built=NEXT, at=NEXT - 20, link_up=False)
    # the old epoch's publications match the old generation: routed as usual
    assert pair.publish("e2", NEXT - 10) == (True, {"s"})
    assert pair.parent.counters["publish.catch_up"] == 0
    # the new epoch's match nothing the parent holds: caught up, matched at the child
    assert pair.publish("e3", NEXT) == (True, {"s@1"})
    assert pair.parent.counters["publish.catch_up"] == 1
    assert pair.parent.drops == {} and pair.child.drops == {}


@pytest.mark.parametrize("profile", PROFILES)
def test_a_child_the_operator_excluded_is_not_caught_up(tmp_path: Path, profile: str) -> None:
    """``no_catch_up`` names the child (by its authenticated name, ``k``): across the same
    outage it gets only what its subscriptions here match, and the broker counts what it
    withheld."""
    pair = Pair(tmp_path, profile, no_catch_up=("k",))
    pair.subscribe("s", built=NOW, at=NOW)
    pair.parent.link_down("down")
    queued = pair.subscribe("s@1", built=NEXT, at=NEXT - 20, link_up=False)
    assert pair.publish("e2", NEXT - 10) == (True, {"s"})  # matched: routed as usual
    assert pair.publish("e3", NEXT) == (False, set())  # the new epoch: withheld
    assert pair.parent.counters["publish.catch_up"] == 0
    assert pair.parent.counters["publish.catch_up_withheld"] == 1
    pair.parent.link_live("down", NEXT + 1)
    assert pair.publish("e4", NEXT + 2) == (False, set())  # nor while it catches up
    pair.pump(queued, NEXT + 2)  # reconnected: it re-sends the renewal
    assert pair.publish("e5", NEXT + 3) == (True, {"s@1"})  # now matched here
    assert pair.parent.counters["publish.catch_up_withheld"] == 2
    assert pair.parent.drops == {} and pair.child.drops == {}


@pytest.mark.parametrize("profile", PROFILES)
def test_without_the_outage_the_stale_subtree_is_not_routed_to(
    tmp_path: Path, profile: str
) -> None:
    """The control: the same missing renewal over a link that never went down (a subtree
    whose subscriber did not renew) gets nothing of the new epoch."""
    pair = Pair(tmp_path, profile)
    pair.subscribe("s", built=NOW, at=NOW)
    pair.subscribe("s@1", built=NEXT, at=NEXT - 20, link_up=False)
    assert pair.publish("e2", NEXT) == (False, set())
    assert pair.parent.counters["publish.catch_up"] == 0


@pytest.mark.parametrize("profile", PROFILES)
def test_a_link_back_catches_up_until_its_renewal_or_the_time_limit(
    tmp_path: Path, profile: str
) -> None:
    pair = Pair(tmp_path, profile)
    pair.subscribe("s", built=NOW, at=NOW)
    pair.parent.link_down("down")
    queued = pair.subscribe("s@1", built=NEXT, at=NEXT - 20, link_up=False)
    pair.parent.link_live("down", NEXT)
    assert pair.publish("e2", NEXT + CATCH_UP_S - 1) == (True, {"s@1"})
    assert pair.publish("e3", NEXT + CATCH_UP_S + 1) == (False, set())  # caught up by now
    assert pair.parent.counters["publish.catch_up"] == 1
    # down again; then the renewal arrives: routed by matching, nothing caught up
    pair.parent.link_down("down")
    assert pair.publish("e4", NEXT + 7) == (True, {"s@1"})
    pair.pump(queued, NEXT + 8)
    assert pair.publish("e5", NEXT + 9) == (True, {"s@1"})
    assert pair.parent.counters["publish.catch_up"] == 2


@pytest.mark.parametrize("profile", PROFILES)
def test_a_restarted_broker_catches_its_children_up(tmp_path: Path, profile: str) -> None:
    """The restart race: the publishers' broker restarts across the change, holding the old
    epoch's subscriptions of a child that has not reconnected yet."""
    pair = Pair(tmp_path, profile)
    pair.subscribe("s", built=NOW, at=NOW)
    queued = pair.subscribe("s@1", built=NEXT, at=NEXT - 20, link_up=False)
    pair.restart_parent()
    assert len(pair.parent.subscriptions()) == 1  # restored: the old generation only
    assert pair.publish("e2", NEXT) == (True, {"s@1"})
    pair.parent.link_live("down", NEXT + 1)  # reconnected: it re-sends the renewal
    pair.pump(queued, NEXT + 2)
    assert len(pair.parent.subscriptions()) == 2
    assert pair.publish("e3", NEXT + 3) == (True, {"s@1"})
    assert pair.parent.counters["publish.catch_up"] == 1


def test_a_withdrawn_subtree_is_not_caught_up(tmp_path: Path) -> None:
    """psguard (withdrawals need no proof): a link whose last subscription was withdrawn gets
    nothing extra."""
    pair = Pair(tmp_path, "psguard")
    pair.subscribe("s", built=NOW, at=NOW)
    pair.pump(pair.child.handle(Unsubscribe("s", "psguard", {}), "c", NOW + 1), NOW + 1)
    assert pair.parent.subscriptions() == []
    pair.parent.link_down("down", NOW + 2)
    assert pair.publish("e1", NEXT) == (False, set())
    assert pair.parent.counters["publish.catch_up"] == 0


@pytest.mark.parametrize("profile", PROFILES)
def test_a_down_link_is_caught_up_for_the_horizon_however_many_epochs_behind(
    tmp_path: Path, profile: str
) -> None:
    """Short epochs: an outage and the reconnection back-off may span several changes. A
    down link is routed the new epochs' publications for the scheme's ``catch_up_horizon``
    (its timestamp window: later they would arrive stale), then no more while it stays
    down; once back it catches up again for ``CATCH_UP_S``."""
    pair = Pair(tmp_path, profile)
    horizon = pair.parent.schemes.get(profile).catch_up_horizon  # type: ignore[union-attr]
    assert horizon == MAX_DELAY
    pair.subscribe("s", built=NOW, at=NOW)
    three_later = NOW + 3 * EPOCH + 5  # epoch 13: the link's subscriptions lag three
    pair.parent.link_down("down", three_later - horizon + 1)
    assert pair.publish("e1", three_later) == (True, set())  # routed; nothing matches below
    assert pair.publish("e2", three_later + 2) == (False, set())  # past the horizon
    # dormant: no publication pays for the link any more (a durable client that never
    # returns), until it is back
    assert pair.parent._recovering == {}
    pair.parent.link_live("down", three_later + 3)
    assert pair.publish("e3", three_later + 4) == (True, set())
    assert pair.parent.counters["publish.catch_up"] == 2


@pytest.mark.parametrize("profile", PROFILES)
def test_a_durable_client_down_across_the_change_gets_its_events_at_its_renewal(
    tmp_path: Path, profile: str
) -> None:
    """A client link is not over-routed: the new epoch's publications are parked for it and
    handed over when its renewal comes, each only to the subscriptions that match it."""
    pair = Pair(tmp_path, profile)
    pair.subscribe("s", built=NOW, at=NOW)
    pair.child.link_down("c")  # the subscriber's connection is lost; it renews ahead meanwhile
    pf = pair.sub.protect_filter(Filter.parse(CARDIO), now=NEXT)
    assert pair.publish_local("e1", NEXT) == set()  # matches nothing the child holds: parked
    assert pair.publish_local("e2", NEXT + 1) == set()
    assert pair.child.counters["publish.parked"] == 2
    pair.child.link_live("c", NEXT + 2)
    acts = pair.child.handle(Subscribe("s@1", profile, pf.filter, pf.meta), "c", NEXT + 2)
    got = [a.message for a in acts if isinstance(a, DeliverTo)]
    w = pair.pub.wire_id  # publications travel under opaque wire ids
    assert [(d.event.event_id, d.sub_ids) for d in got] == [
        (w("e1"), ("s@1",)),
        (w("e2"), ("s@1",)),
    ]
    assert pair.child.counters["publish.unparked"] == 2
    assert pair.publish_local("e3", NEXT + 3) == {"s@1"}  # matched as usual from now on
    assert pair.child.counters["publish.parked"] == 2
    assert pair.child.drops == {}


def test_parked_publications_a_client_never_renews_for_are_dropped(tmp_path: Path) -> None:
    pair = Pair(tmp_path, "psguard")
    pair.subscribe("s", built=NOW, at=NOW)
    pair.child.link_down("c")
    assert pair.publish_local("e1", NEXT) == set()
    pair.child.link_live("c", NEXT + 1)
    assert pair.publish_local("e2", NEXT + 2) == set()
    assert pair.child.counters["publish.parked"] == 2
    assert pair.publish_local("e3", NEXT + 2 + CATCH_UP_S) == set()  # caught up: dropped
    assert pair.child.counters["publish.parked_expired"] == 2
    assert pair.child._parked == {}


def test_a_down_link_is_caught_up_at_most_catch_up_max_times_per_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What catch-up adds to a down link's queue stays under the transport's back-pressure
    threshold, so a subtree's outage does not stall the publishers sooner than before."""
    import pubguard.broker.catch_up as publishing

    monkeypatch.setattr(publishing, "CATCH_UP_MAX", 2)
    pair = Pair(tmp_path, "psguard")
    pair.subscribe("s", built=NOW, at=NOW)
    pair.parent.link_down("down", NEXT)
    routed = [pair.publish(f"e{i}", NEXT + i)[0] for i in range(4)]
    assert routed == [True, True, False, False]
    assert pair.parent.counters["publish.catch_up_capped"] == 2
    pair.parent.link_live("down", NEXT + 5)
    pair.parent.link_down("down", NEXT + 6)  # a new outage: counted afresh
    assert pair.publish("e9", NEXT + 7)[0]
