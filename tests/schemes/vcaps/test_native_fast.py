"""SRV-fast matching on both backends: the native one (every held key's PRF in one call,
psguard's TokenSet) agrees with the Python reference loop on generated posets and
notifications, including unsubscriptions that change the held set between notifications."""

from __future__ import annotations

from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.model.events import Event
from pubguard.schemes.vcaps import FAST, VcapsTree, decode_routing
from pubguard.schemes.vcaps.tokens import FastRouting, decode_token
from pubguard.sim.workloads import vcaps_events, vcaps_filters
from tests.native_backends import requires_native
from tests.schemes.vcaps.helpers import publisher

TREE = {"B0": None, "B1": "B0", "B2": "B0", "B3": "B1"}
LEAVES = ("B2", "B3")


def _route_both(tree: VcapsTree, pe: FastRouting) -> tuple[set[str], set[str]]:
    with native.use("python"):
        ref = tree.route(pe)
    with native.use("native"):
        nat = tree.route(pe)
    return ref, nat


def _poset_shape(tree: VcapsTree) -> dict[str, tuple[object, ...]]:
    return {
        b: (bf.nodes(), bf.up, bf.down, bf.roots, {h: bf.recipients(h) for h in bf.nodes()})
        for b, bf in tree.posets.items()
    }


@requires_native
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    subs=st.lists(st.tuples(st.integers(0, 29), st.sampled_from(LEAVES)), min_size=1, max_size=40),
    drop=st.lists(st.integers(0, 39), max_size=5),
)
def test_native_codewords_equal_the_python_reference(
    seed: int, subs: list[tuple[int, str]], drop: list[int]
) -> None:
    """Stage II (relations from codewords) and matching on each backend give the same posets
    and the same receivers, equal to the reference matcher's."""
    rng = Random(seed)
    filters = vcaps_filters(30, rng)
    events = vcaps_events(6, rng)
    pub = publisher(FAST, seed=seed)
    trees = {b: VcapsTree(TREE) for b in ("python", "native")}
    held: list[tuple[str, str, bytes]] = []
    for j, (i, leaf) in enumerate(subs):
        tok = decode_token(FAST, pub.register(filters[i], subscriber=f"S{j}"))
        for b, tree in trees.items():
            with native.use(b):  # type: ignore[arg-type]
                tree.subscribe(leaf, f"S{j}", tok)
        held.append((leaf, f"S{j}", tok.handle))
    assert _poset_shape(trees["python"]) == _poset_shape(trees["native"])
    gone: set[str] = set()
    for k, e in enumerate(events):
        pe = decode_routing(FAST, pub.publish(e, now=0.0).routing)
        ref, nat = _route_both(trees["python"], pe)
        want = {f"S{j}" for j, (i, _) in enumerate(subs) if filters[i].matches(e)} - gone
        assert nat == ref == want == _route_both(trees["native"], pe)[1]
        if k < len(drop) and drop[k] < len(held):  # unsubscribe before the next one
            leaf, s, h = held[drop[k]]
            for b, tree in trees.items():
                with native.use(b):  # type: ignore[arg-type]
                    tree.unsubscribe(leaf, s, h)
            gone.add(s)
    assert _poset_shape(trees["python"]) == _poset_shape(trees["native"])


@requires_native
def test_native_codewords_with_no_match_and_an_empty_poset() -> None:
    pub = publisher(FAST)
    tree = VcapsTree(TREE)
    pe = decode_routing(FAST, pub.publish(Event({"a1": 1}), now=0.0).routing)
    assert _route_both(tree, pe) == (set(), set())
    tok = decode_token(FAST, pub.register(vcaps_filters(1, Random(3))[0], subscriber="S"))
    tree.subscribe("B2", "S", tok)
    assert isinstance(pe, FastRouting) and len(pe.tags) == len(pe.v) == 8
    assert _route_both(tree, pe) == (set(), set())
