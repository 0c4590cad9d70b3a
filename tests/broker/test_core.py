"""The broker core in isolation: routing, covering, drops, hooks, persistence."""

from __future__ import annotations

import pytest

from pubguard.broker import Broker, DeliverTo, Drop, Forward, MemoryState, Reply
from pubguard.errors import DropReason, StateError, ValidationError
from pubguard.schemes import PlainScheme
from pubguard.wire.messages import (
    Ack,
    Advertise,
    Error,
    Heartbeat,
    Publish,
    Unadvertise,
    Unsubscribe,
)
from tests.broker.helpers import GuardScheme, forwarded, pub, sub, two_level


def leaf_with_clients(*clients: str) -> Broker:
    b = Broker("leaf", [PlainScheme(), GuardScheme()])
    b.add_link("up", "parent")
    for c in clients:
        b.add_link(c, "client")
    return b


def test_subscription_is_acked_and_forwarded_once_when_covered() -> None:
    b = leaf_with_clients("c1", "c2")
    a1 = b.handle(sub("s1", "price > 10"), "c1", 0.0)
    assert Reply("c1", Ack("s1", "subscribe")) in a1
    [fwd] = forwarded(a1, "subscribe")
    assert fwd.filter == sub("x", "price > 10").filter and fwd.sub_id.startswith("leaf~")
    # covered by price > 10: acknowledged, not forwarded
    a2 = b.handle(sub("s2", 'price > 20 && sym = "IBM"'), "c2", 0.0)
    assert forwarded(a2) == [] and Reply("c2", Ack("s2", "subscribe")) in a2


def test_covering_filter_evicts_the_ones_it_covers_subscribing_first() -> None:
    b = leaf_with_clients("c1")
    b.handle(sub("narrow", "price > 20"), "c1", 0.0)
    acts = forwarded(b.handle(sub("wide", "price > 10"), "c1", 0.0))
    assert [m.op for m in acts] == ["subscribe", "unsubscribe"]  # no coverage gap upstream
    assert acts[0].filter == sub("x", "price > 10").filter


def test_unsubscribe_forwards_newly_uncovered_filters() -> None:
    b = leaf_with_clients("c1", "c2")
    b.handle(sub("wide", "price > 10"), "c1", 0.0)
    b.handle(sub("n1", "price > 20"), "c2", 0.0)
    b.handle(sub("n2", "price > 30"), "c2", 0.0)
    acts = b.handle(Unsubscribe("wide", "plain"), "c1", 1.0)
    msgs = forwarded(acts)
    # n1 is promoted (it covers n2), then the old root is withdrawn
    assert [m.op for m in msgs] == ["subscribe", "unsubscribe"]
    assert msgs[0].filter == sub("x", "price > 20").filter
    assert b.status()["forwarded"] == 1
    # events between 10 and 20 no longer reach c1 or c2
    out = b.handle(pub("e1", price=15), "up", 2.0)
    assert not [a for a in out if isinstance(a, DeliverTo)]


def test_unknown_unsubscribe_is_idempotent() -> None:
    b = leaf_with_clients("c1")
    before = b.routing_snapshot()
    assert b.handle(Unsubscribe("nope", "plain"), "c1", 0.0) == [
        Reply("c1", Ack("nope", "unsubscribe"))
    ]
    assert b.routing_snapshot() == before


def test_publication_goes_up_and_to_matching_links_only() -> None:
    root, left, right = two_level()
    for b, c in ((left, "cl"), (right, "cr")):
        b.add_link(c, "client")
    for a in forwarded(left.handle(sub("s", "x > 0"), "cl", 0.0)):
        root.handle(a, "left", 0.0)
    # from the right client: up to root, root sends down to left only
    up = right.handle(pub("e1", x=1), "cr", 1.0)
    assert [a.link for a in up if isinstance(a, Forward)] == ["root"]
    down = root.handle(forwarded(up)[0], "right", 1.0)
    assert [a.link for a in down if isinstance(a, Forward)] == ["left"]
    got = left.handle(forwarded(down)[0], "root", 1.0)
    [d] = [a for a in got if isinstance(a, DeliverTo)]
    assert d.link == "cl" and d.message.sub_ids == ("s",)
    assert not forwarded(got)  # never back to the parent it came from
    # non-matching event: climbs to the root and stops
    assert forwarded(root.handle(pub("e2", x=-1), "right", 2.0)) == []


def test_one_delivery_names_all_matching_subscriptions_and_echo() -> None:
    b = leaf_with_clients("c1")
    b.handle(sub("s1", "x > 0"), "c1", 0.0)
    b.handle(sub("s2", "x > 1"), "c1", 0.0)
    [d] = [a for a in b.handle(pub("e", x=5), "c1", 0.0) if isinstance(a, DeliverTo)]
    assert d.message.sub_ids == ("s1", "s2")
    quiet = Broker("q", [PlainScheme()], echo=False)
    quiet.add_link("c1", "client")
    quiet.handle(sub("s1", "x > 0"), "c1", 0.0)
    assert not [a for a in quiet.handle(pub("e", x=5), "c1", 0.0) if isinstance(a, DeliverTo)]


def test_duplicates_are_dropped_silently_within_the_window() -> None:
    b = Broker("b", [PlainScheme()], dedup_window=10.0)
    b.add_link("c1", "client")
    b.add_link("c2", "client")
    b.handle(sub("s", "x > 0"), "c2", 0.0)
    assert any(isinstance(a, DeliverTo) for a in b.handle(pub("e", x=1), "c1", 0.0))
    again = b.handle(pub("e", x=1), "c1", 5.0)
    assert again == [Drop(DropReason.DUPLICATE, "seen event id", "e", "c1", "publish")]
    assert b.drops[DropReason.DUPLICATE] == 1
    # outside the window the id is forgotten
    assert any(isinstance(a, DeliverTo) for a in b.handle(pub("e", x=1), "c1", 20.0))


def test_dedup_capacity_bounds_memory() -> None:
    b = Broker("b", [PlainScheme()], dedup_capacity=3)
    b.add_link("c", "client")
    for i in range(10):
        b.handle(pub(f"e{i}", x=i), "c", 0.0)
    assert b.status()["dedup_ids"] == 3


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("garbage", DropReason.MALFORMED),
        ({"op": "launch", "sub_id": "s9"}, DropReason.UNKNOWN_TYPE),
        ({"op": "subscribe", "sub_id": "s9", "profile": "plain"}, DropReason.MALFORMED),
        (
            {
                "op": "subscribe",
                "sub_id": "s9",
                "profile": "plain",
                "filter": {"constraints": [["a", "~", 1]]},
            },
            DropReason.MALFORMED,
        ),
        (
            {"op": "subscribe", "sub_id": "s9", "profile": "plain", "filter": {"constraints": []}},
            DropReason.MALFORMED,
        ),
        (
            {"op": "subscribe", "sub_id": "s9", "profile": "rot13", "filter": {}},
            DropReason.UNKNOWN_TYPE,
        ),
        (
            {"op": "publish", "event_id": "e9", "profile": "plain", "routing": {"a": [1]}},
            DropReason.MALFORMED,
        ),
        (
            {"op": "publish", "event_id": "e9", "profile": "plain", "routing": {"": 1}},
            DropReason.MALFORMED,
        ),
        (
            {"op": "advertise", "adv_id": "a9", "profile": "plain", "filter": {"x": 1}},
            DropReason.MALFORMED,
        ),
        (
            {"op": "deliver", "sub_ids": ["s"], "event": pub("e9", a=1).to_wire()},
            DropReason.MALFORMED,
        ),
    ],
)
def test_bad_input_is_dropped_with_a_reason_and_leaves_state_alone(
    raw: object, reason: DropReason
) -> None:
    b = leaf_with_clients("c1")
    b.handle(sub("s1", "a > 1"), "c1", 0.0)
    b.handle(Advertise("a1", "plain", sub("x", "a > 0").filter), "c1", 0.0)
    before = b.routing_snapshot()
    acts = b.handle(raw, "c1", 1.0)  # type: ignore[arg-type]
    drops = [a for a in acts if isinstance(a, Drop)]
    assert [d.reason for d in drops] == [reason]
    errors = [a.message for a in acts if isinstance(a, Reply)]
    assert len(errors) == 1 and isinstance(errors[0], Error) and errors[0].reason is reason
    assert b.routing_snapshot() == before
    assert b.drops[reason] == 1


def test_broker_links_get_no_error_replies_and_parent_cannot_subscribe() -> None:
    b = leaf_with_clients()
    b.add_link("kid", "child")
    assert [type(a) for a in b.handle({"op": 1}, "kid", 0.0)] == [Drop]
    acts = b.handle(sub("s", "a > 1"), "up", 0.0)
    assert [type(a) for a in acts] == [Drop] and b.status()["subscriptions"] == 0


def test_link_level_messages_are_ignored() -> None:
    b = leaf_with_clients("c1")
    assert b.handle(Heartbeat(3), "c1", 0.0) == []
    assert b.handle(Ack("x", "publish"), "up", 0.0) == []


def test_unknown_link_and_bad_links_are_local_errors() -> None:
    b = leaf_with_clients("c1")
    with pytest.raises(StateError):
        b.handle(pub("e", a=1), "nobody", 0.0)
    with pytest.raises(StateError):
        b.add_link("up2", "parent")  # only one parent
    with pytest.raises(StateError):
        b.add_link("c1", "child")  # kind cannot change
    with pytest.raises(ValidationError):
        b.add_link("", "client")
    with pytest.raises(ValidationError):
        Broker("", [PlainScheme()])


def test_guard_refusals_are_counted_and_reported_to_clients() -> None:
    b = leaf_with_clients("c1", "c2")
    b.handle(sub("s", "x > 0", profile="guarded", owner="alice"), "c2", 0.0)
    forged = b.handle(pub("e1", profile="guarded", meta={"sig": b"bad"}, x=1), "c1", 0.0)
    assert [a.reason for a in forged if isinstance(a, Drop)] == [DropReason.FORGED]
    assert Reply("c1", Error("e1", DropReason.FORGED, "refused by the guard")) in forged
    # a forged copy does not poison the dedup window: the genuine event still passes
    ok = b.handle(pub("e1", profile="guarded", meta={"sig": b"ok"}, x=1), "c1", 0.0)
    assert any(isinstance(a, DeliverTo) for a in ok)
    assert b.drops == {DropReason.FORGED: 1}


def test_fake_unsubscribe_is_refused_using_the_stored_subscription() -> None:
    b = leaf_with_clients("c1")
    b.handle(sub("s", "x > 0", profile="guarded", owner="alice"), "c1", 0.0)
    before = b.routing_snapshot()
    fake = b.handle(Unsubscribe("s", "guarded", {"owner": "mallory"}), "c1", 1.0)
    assert [a.reason for a in fake if isinstance(a, Drop)] == [DropReason.UNAUTHORISED]
    assert b.routing_snapshot() == before
    real = b.handle(Unsubscribe("s", "guarded", {"owner": "alice"}), "c1", 1.0)
    [up] = forwarded(real, "unsubscribe")
    assert up.meta == {"owner": "alice"}  # the unsubscriber's permit travels upward
    assert b.status()["subscriptions"] == 0


def test_outgoing_hook_rewrites_and_suppresses() -> None:
    b = leaf_with_clients("c1")
    b.handle(sub("s", "x > 0", profile="guarded"), "c1", 0.0)
    acts = b.handle(pub("e1", profile="guarded", meta={"sig": b"ok"}, x=1), "c1", 0.0)
    sent = [a for a in acts if isinstance(a, Forward | DeliverTo)]
    assert len(sent) == 2
    for a in sent:
        m = a.message.event if isinstance(a, DeliverTo) else a.message
        assert m.meta["hops"] == 1
    hidden = b.handle(
        pub("e2", profile="guarded", meta={"sig": b"ok"}, x=1, secret=True), "c1", 0.0
    )
    assert [a for a in hidden if isinstance(a, Forward | DeliverTo)] == []
    assert b.counters["suppressed"] == 2


def test_profiles_are_routed_separately() -> None:
    b = leaf_with_clients("c1", "c2")
    b.handle(sub("s", "x > 0", profile="guarded"), "c1", 0.0)
    b.handle(sub("s", "x > 0"), "c2", 0.0)  # same filter, plain: not covered across profiles
    assert b.status()["forwarded"] == 2
    got = [a.link for a in b.handle(pub("e", x=1), "up", 0.0) if isinstance(a, DeliverTo)]
    assert got == ["c2"]


def test_resubscribe_is_idempotent_and_replacement_reforwards() -> None:
    b = leaf_with_clients("c1")
    b.handle(sub("s", "x > 0"), "c1", 0.0)
    assert forwarded(b.handle(sub("s", "x > 0"), "c1", 1.0)) == []
    ops = [m.op for m in forwarded(b.handle(sub("s", "x > 5"), "c1", 2.0))]
    assert ops == ["unsubscribe", "subscribe"]
    assert b.status()["subscriptions"] == 1


def test_remove_link_withdraws_its_subscriptions() -> None:
    b = leaf_with_clients("c1", "c2")
    b.handle(sub("s", "x > 0"), "c1", 0.0)
    b.handle(sub("t", "x > 5"), "c2", 0.0)
    msgs = forwarded(b.remove_link("c1"))
    assert [m.op for m in msgs] == ["subscribe", "unsubscribe"]
    assert "c1" not in b.links and b.status()["subscriptions"] == 1


def test_new_parent_link_receives_the_forwarded_set() -> None:
    b = Broker("b", [PlainScheme()])
    b.add_link("c", "client")
    b.handle(sub("s1", "x > 0"), "c", 0.0)
    b.handle(sub("s2", "x > 1"), "c", 0.0)  # covered
    assert [m.op for m in forwarded(b.add_link("p", "parent"))] == ["subscribe"]
    assert [m.op for m in forwarded(b.link_up("p"))] == ["subscribe"]  # reconnect: resend


def test_advertisements_flood_the_tree_and_withdraw() -> None:
    root, left, right = two_level()
    left.add_link("pub", "client")
    f = sub("x", "x > 0").filter
    acts = left.handle(Advertise("a1", "plain", f), "pub", 0.0)
    [up] = forwarded(acts, "advertise")
    down = root.handle(up, "left", 0.0)
    assert [a.link for a in down if isinstance(a, Forward)] == ["right"]
    right.handle(forwarded(down)[0], "root", 0.0)
    assert len(right.routing_snapshot()["advertisements"]) == 1
    # a child that joins later learns existing advertisements
    late = root.add_link("late", "child")
    assert [a.message.op for a in late] == ["advertise"]
    gone = left.handle(Unadvertise("a1", "plain"), "pub", 1.0)
    [w] = forwarded(gone, "unadvertise")
    assert w.adv_id == up.adv_id
    assert forwarded(root.handle(w, "left", 1.0), "unadvertise")
    assert root.routing_snapshot()["advertisements"] == {}


def test_restore_from_state_rebuilds_identical_routing() -> None:
    store = MemoryState()
    b = Broker("b", [PlainScheme(), GuardScheme()], store=store)
    b.add_link("p", "parent")
    b.add_link("c1", "client")
    b.add_link("c2", "client")
    b.handle(sub("a", "x > 10"), "c1", 0.0)
    b.handle(sub("b", "x > 20"), "c2", 0.0)
    b.handle(sub("c", "y = 1"), "c2", 0.0)
    b.handle(sub("d", "x > 5", profile="guarded"), "c1", 0.0)
    b.handle(sub("e", "x > 1"), "c1", 0.0)  # evicts a and b
    b.handle(Unsubscribe("c", "plain"), "c2", 0.0)
    b.handle(Advertise("ad", "plain", sub("x", "x > 0").filter), "c1", 0.0)
    again = Broker("b", [PlainScheme(), GuardScheme()], store=store)
    assert again.routing_snapshot() == b.routing_snapshot()
    assert again.parent == "p"
    ev = pub("e1", x=30)
    assert b.handle(ev, "p", 1.0) == again.handle(ev, "p", 1.0)
    # removal after restore withdraws exactly what the parent holds
    assert forwarded(b.handle(Unsubscribe("e", "plain"), "c1", 2.0)) == forwarded(
        again.handle(Unsubscribe("e", "plain"), "c1", 2.0)
    )


def test_restore_refuses_unknown_profiles() -> None:
    store = MemoryState()
    b = Broker("b", [GuardScheme()], store=store)
    b.add_link("c", "client")
    b.handle(sub("s", "x > 0", profile="guarded"), "c", 0.0)
    with pytest.raises(StateError, match="unknown profile"):
        Broker("b", [PlainScheme()], store=store)


def test_publish_message_passes_through_unchanged_in_plain() -> None:
    b = leaf_with_clients("c1")
    ev = pub("e", x=1)
    assert forwarded(b.handle(ev, "c1", 0.0)) == [ev]
    assert isinstance(forwarded(b.handle(pub("f", x=1), "c1", 0.0))[0], Publish)


def test_a_replayed_wire_publication_is_dropped_before_decoding() -> None:
    # flood containment (eventguard.txt §4.7): the duplicate check needs only the id, so a
    # replayed copy is refused without decoding its routing fields (same drop, same counters)
    b = Broker("b", [PlainScheme()], dedup_window=10.0)
    b.add_link("c1", "client")
    b.add_link("c2", "client")
    b.handle(sub("s", "x > 0"), "c2", 0.0)
    wire = pub("e", x=1).to_wire()
    assert any(isinstance(a, DeliverTo) for a in b.handle(wire, "c1", 0.0))
    want = [Drop(DropReason.DUPLICATE, "seen event id", "e", "c1", "publish")]
    assert b.handle(dict(wire), "c1", 1.0) == want
    # a copy whose routing would not even decode is refused by the id alone
    bad = {**wire, "routing": {"x": {1, 2}}}
    assert b.handle(bad, "c1", 2.0) == want
    assert b.handle_batch([dict(wire), bad, pub("f", x=2).to_wire()], "c1", 3.0)[:2] == want * 2
    assert b.drops[DropReason.DUPLICATE] == 4 and b.drops[DropReason.MALFORMED] == 0
    assert b.counters["in.publish"] == 6
    # a fresh id with that routing still takes the full path and is malformed
    fresh = {**bad, "event_id": "g"}
    assert [a.reason for a in b.handle(fresh, "c1", 4.0) if isinstance(a, Drop)] == [
        DropReason.MALFORMED
    ]
