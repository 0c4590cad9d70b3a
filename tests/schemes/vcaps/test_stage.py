"""v-CAPS Stage I / Stage II (vcaps.txt §4.1), routing (§4.3), Figs. 1 and 2, unsubscription."""

from __future__ import annotations

from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.model.constraints import Constraint
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.vcaps import FAST, RV, SRV, VcapsTree
from pubguard.schemes.vcaps.tokens import decode_token
from tests.schemes.vcaps.helpers import f, publisher, reference, route, subscribe

# Fig. 2's covering: F4 ≺ F2, F5 ≺ F2, F2 ≺ F3; F1 independent
FIG2 = {
    "F1": f("d = 1"),
    "F2": f("a > 20"),
    "F3": f("a > 10"),
    "F4": f("a > 20 && b = 1"),
    "F5": f("a > 20 && c = 1"),
}
# Fig. 2's spanning tree, as its text implies: S2 hangs off B5 and S5, S6 off B8; B3 is B8's
# parent and holds F3; B2 (holding F1, F2) is not on B3's path
FIG2_TREE = {
    "B1": None,
    "B2": "B1",
    "B3": "B1",
    "B4": "B2",
    "B5": "B2",
    "B6": "B3",
    "B7": "B3",
    "B8": "B3",
}
FIG2_AT = {"S1": "B4", "S2": "B5", "S3": "B6", "S4": "B7", "S5": "B8"}


def fig2(profile: str = RV) -> tuple[VcapsTree, object, dict[str, bytes]]:
    pub = publisher(profile)
    tree = VcapsTree(FIG2_TREE)
    h = {}
    for i, (s, b) in enumerate(FIG2_AT.items(), start=1):
        h[f"F{i}"] = subscribe(tree, pub, b, s, FIG2[f"F{i}"])
    return tree, pub, h


def test_stage_one_assigns_16_byte_ids_and_transitive_relations() -> None:
    pub = publisher(RV)
    for name in ("F3", "F2", "F4", "F5", "F1"):
        pub.register(FIG2[name], subscriber="s")
    ids = {n: pub.filter_id(FIG2[n]) for n in FIG2}
    assert all(len(i) == 16 for i in ids.values())  # type: ignore[arg-type]
    # the same filter again: the same ID (YES branch), with fresh relations
    again = decode_token(RV, pub.register(f("a > 20"), subscriber="s6"))
    assert again.handle == ids["F2"]
    assert again.pred == {ids["F3"]} and again.succ == {ids["F4"], ids["F5"]}
    f4 = decode_token(RV, pub.token(ids["F4"]))  # type: ignore[arg-type]
    assert f4.pred == {ids["F2"], ids["F3"]}  # transitive: F3 too
    assert set(pub.immediate(ids["F4"])[0]) == {ids["F2"]}  # type: ignore[arg-type]


def test_fig1_posets_and_forwarding() -> None:
    """Fig. 1: F2 ≺ F1 ≺ F3, F4 independent; S1..S4 with F1..F4 (S1, S2 under B2; S3, S4 under
    B3; B1 next to P). Each broker keeps the covering among what it holds and forwards only
    roots."""
    pub = publisher(RV)
    fl = {"F1": f("a > 20"), "F2": f("a > 20 && b = 1"), "F3": f("a > 10"), "F4": f("d = 1")}
    tree = VcapsTree({"B1": None, "B2": "B1", "B3": "B1"})
    at = {"S1": "B2", "S2": "B2", "S3": "B3", "S4": "B3"}
    h = {n: subscribe(tree, pub, at[f"S{n[1]}"], f"S{n[1]}", flt) for n, flt in fl.items()}
    b1, b2, b3 = (tree.posets[b] for b in ("B1", "B2", "B3"))
    assert b2.nodes() == {h["F1"], h["F2"]} and b2.down[h["F1"]] == {h["F2"]}
    assert b2.forwarded == {h["F1"]}  # F2 stays at B2
    assert b3.nodes() == {h["F3"], h["F4"]} and b3.roots == {h["F3"], h["F4"]}
    assert b1.nodes() == {h["F1"], h["F3"], h["F4"]}
    assert b1.down[h["F3"]] == {h["F1"]}  # learnt from F3's F_succ (F3 came after F1)
    assert b1.recipients(h["F1"]) == ("B2",) and b1.recipients(h["F3"]) == ("B3",)
    assert route(tree, pub, Event({"a": 30, "b": 1})) == {"S1", "S2", "S3"}
    assert route(tree, pub, Event({"a": 15, "d": 1})) == {"S3", "S4"}


def test_fig2_s6_join_compacts_b3_and_stops_at_b3() -> None:
    tree, pub, h = fig2()
    b3, b8 = tree.posets["B3"], tree.posets["B8"]
    assert b3.nodes() == {h["F3"], h["F4"], h["F5"]}  # Fig. 2(a)
    wire = pub.register(FIG2["F2"], subscriber="S6")
    tok = decode_token(RV, wire)
    assert tok.pred == {h["F3"]} and tok.succ == {h["F4"], h["F5"]}  # F2_pred, F2_succ
    b1_before = tree.posets["B1"].nodes()
    seen = tree.subscribe("B8", "S6", tok)
    assert seen == ["B8", "B3"]  # nothing forwarded past B3
    assert b8.roots == {h["F2"]} and b8.down[h["F2"]] == {h["F5"]}
    assert b8.recipients(h["F2"]) == ("S6",)
    # compaction at B3: B8 leaves F5's list, F5 leaves the poset (Fig. 2(b))
    assert h["F5"] not in b3.nodes() and b3.recipients(h["F2"]) == ("B8",)
    assert b3.nodes() == {h["F3"], h["F2"], h["F4"]}
    assert tree.posets["B1"].nodes() == b1_before
    subs = [(s, FIG2[f"F{i}"]) for i, s in enumerate(FIG2_AT, start=1)] + [("S6", FIG2["F2"])]
    for e in (Event({"a": 30, "c": 1}), Event({"a": 30, "d": 1}), Event({"a": 12})):
        assert route(tree, pub, e) == reference(subs, e)


def test_transitive_relations_forward_less_and_both_route_correctly() -> None:
    """Why transitive F_pred: a broker holding the grandparent F3 but not the parent F2 would
    forward F1 with only immediate parents (and compact nothing); routing is correct either
    way, because the routing vector names every matching ID, so F3's upstream entry carries a
    notification that matches F1."""
    chain = [f("a > 10"), f("a > 20"), f("a > 20 && b = 1")]  # F3 ⊐ F2 ⊐ F1
    results = {}
    for immediate in (False, True):
        pub = publisher(RV)
        tree = VcapsTree({"B1": None, "B2": "B1", "B3": "B1"})
        pub.register(chain[1], subscriber="nobody")  # F2 exists at P, held by no broker
        subscribe(tree, pub, "B2", "S3", chain[0], immediate=immediate)
        subscribe(tree, pub, "B2", "S1", chain[2], immediate=immediate)
        results[immediate] = tree.forwarded
        subs = [("S3", chain[0]), ("S1", chain[2])]
        for e in (Event({"a": 30, "b": 1}), Event({"a": 15}), Event({"a": 5})):
            assert route(tree, pub, e) == reference(subs, e)
    assert results[False] < results[True]


def test_unsubscription_reforwards_what_the_filter_covered() -> None:
    tree, pub, h = fig2()
    tree.subscribe("B8", "S6", decode_token(RV, pub.register(FIG2["F2"], subscriber="S6")))
    # S3 leaves: F3 leaves B6, B3 and B1; F2 becomes a root at B3 and is re-forwarded (F4
    # stays under F2, which covers it)
    tree.unsubscribe("B6", "S3", h["F3"])
    b1, b3 = tree.posets["B1"], tree.posets["B3"]
    assert h["F3"] not in b1.nodes() and h["F3"] not in b3.nodes()
    assert h["F2"] in b1.nodes() and h["F4"] not in b1.nodes()
    assert b3.roots == {h["F2"]} and b1.recipients(h["F2"]) == ("B2", "B3")
    # S6 leaves: B8's F2 goes, F5 is re-forwarded and B3 lists B8 under F5 again
    tree.unsubscribe("B8", "S6", h["F2"])
    assert b3.recipients(h["F5"]) == ("B8",)
    subs = [("S1", FIG2["F1"]), ("S2", FIG2["F2"]), ("S4", FIG2["F4"]), ("S5", FIG2["F5"])]
    for e in (Event({"a": 30, "c": 1}), Event({"a": 30, "b": 1}), Event({"a": 15})):
        assert route(tree, pub, e) == reference(subs, e)


# -- property: deliveries equal the reference matcher, for every profile ------------------

_ATTRS = ("a", "b", "c")
_constraint = st.builds(
    Constraint,
    st.sampled_from(_ATTRS),
    st.sampled_from(["=", "<", ">", ">=", "<="]),
    st.integers(0, 4),
)
_filter = st.lists(_constraint, min_size=1, max_size=2).map(lambda cs: Filter(tuple(cs)))
_event = st.dictionaries(st.sampled_from(_ATTRS), st.integers(0, 4), min_size=1).map(Event)
_TREE = {"B0": None, "B1": "B0", "B2": "B0", "B3": "B1", "B4": "B1", "B5": "B2"}


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
@settings(max_examples=25)
@given(
    subs=st.lists(st.tuples(st.sampled_from(sorted(_TREE)), _filter), min_size=1, max_size=10),
    events=st.lists(_event, min_size=1, max_size=4),
    leave=st.integers(0, 9),
    seed=st.integers(0, 2**16),
)
def test_deliveries_equal_reference(
    profile: str,
    subs: list[tuple[str, Filter]],
    events: list[Event],
    leave: int,
    seed: int,
) -> None:
    pub = publisher(profile, seed=seed)
    tree = VcapsTree(_TREE)
    placed = []
    order = list(enumerate(subs))
    Random(seed).shuffle(order)
    for i, (b, flt) in order:
        h = subscribe(tree, pub, b, f"S{i}", flt)
        placed.append((f"S{i}", b, flt, h))
    for e in events:
        assert route(tree, pub, e) == reference([(s, flt) for s, _, flt, _ in placed], e)
    s, b, _, h = placed.pop(leave % len(placed))
    tree.unsubscribe(b, s, h)
    for e in events:
        assert route(tree, pub, e) == reference([(s, flt) for s, _, flt, _ in placed], e)
