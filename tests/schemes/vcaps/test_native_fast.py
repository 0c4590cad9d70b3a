"""SRV-fast matching on both backends: the native one (``native/src/vcaps.rs``: every held
key's PRF in one call per notification) agrees with the Python reference loop on generated
posets and notifications, including unsubscriptions that change the held set between
notifications, and the kernel itself agrees with ``PRF(k_f, n) in V`` on every input."""

from __future__ import annotations

from random import Random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import AesPrf
from pubguard.model.events import Event
from pubguard.schemes.vcaps import FAST, VcapsTree, decode_routing
from pubguard.schemes.vcaps.tokens import FastRouting, decode_token, native_vcaps
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
    assert isinstance(pe, FastRouting) and len(pe.v) == 8 and len(pe.cw) == 8
    assert _route_both(tree, pe) == (set(), set())


def _kernel() -> object:
    with native.use("native"):
        nv = native_vcaps()
    assert nv is not None, "pubguard._native is stale: make native"
    return nv


@requires_native
@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=16, max_size=16), max_size=150),
    nonce=st.binary(min_size=16, max_size=16),
    picks=st.lists(st.integers(0, 149), max_size=40),
    dummies=st.lists(st.binary(min_size=16, max_size=16), max_size=40),
    prefix=st.binary(max_size=3),
)
def test_kernel_hits_equal_prf_in_v(
    keys: list[bytes], nonce: bytes, picks: list[int], dummies: list[bytes], prefix: bytes
) -> None:
    """``VcapsKeys.hits`` / ``hits2`` against the reference ``PRF(k_f, n) in V``; ``prefix``
    gives the dummies a shared top (long bucket runs: the kernel's binary-search path)."""
    nv: Any = _kernel()
    cws = [AesPrf(k)(nonce) for k in keys]
    v = {cws[i] for i in picks if i < len(keys)} | {prefix + d[len(prefix) :] for d in dummies}
    vs = nv.VcapsCodewords(b"".join(v))
    ks = nv.VcapsKeys(b"".join(keys))
    want = [i for i, c in enumerate(cws) if c in v]
    assert ks.hits(nonce, vs) == want and len(ks) == len(keys) and len(vs) == len(v)
    assert all(c in vs for c in v) and (bytes(16) in vs) == (bytes(16) in v)
    half = set(list(v)[: len(v) // 2])
    a, b = ks.hits2(nonce, nv.VcapsCodewords(b"".join(half)), nv.VcapsCodewords(b"".join(v)))
    assert a == [i for i in want if cws[i] in half] and b == [i for i in want if i not in a]


@requires_native
def test_kernel_refuses_partial_blocks_and_shows_no_key() -> None:
    nv: Any = _kernel()
    with pytest.raises(ValueError):
        nv.VcapsKeys(bytes(17))
    with pytest.raises(ValueError):
        nv.VcapsCodewords(bytes(15))
    ks = nv.VcapsKeys(b"\xab" * 32)
    with pytest.raises(ValueError):
        ks.hits(bytes(15), nv.VcapsCodewords(b""))
    assert ks.hits(bytes(16), nv.VcapsCodewords(b"")) == []
    assert repr(ks) == "VcapsKeys(keys=2)" and "ab" not in repr(ks)
