"""SRV-fast's search plan (heuristics (i) and (ii) of vcaps.txt §5.5) and the sampled SRV of the
experiments: a Stage II driven by the PFPoset's covering relation builds the same posets as
SRV's pairwise SWP tests, and routes as the reference matcher does."""

from __future__ import annotations

import time
from random import Random

import pytest

from pubguard import native
from pubguard.schemes.vcaps import FAST, SRV, VcapsTree
from pubguard.schemes.vcaps.fastplan import fast_plan, search
from pubguard.schemes.vcaps.tokens import decode_token
from pubguard.sim.vcaps_experiment import classes, make_setting, reference, run_srv_sampled
from pubguard.sim.workloads import vcaps_filters
from tests.schemes.vcaps.helpers import publisher
from tests.schemes.vcaps.test_native_fast import TREE, _poset_shape


def test_plan_puts_covers_first_and_keeps_a_cycle_sound() -> None:
    """a covers b covers c; d and e cover each other (equivalent filters): every cover named
    is earlier, the cycle keeps only its forward edge, and (i) skips what an unmatched cover
    rules out, (ii) stops once every group is reached."""
    a, b, c, d, e = (bytes([i]) * 16 for i in range(5))
    active = {c: ("x",), b: ("y",), a: ("x", "z"), d: ("y",), e: ("z",)}
    up = {a: set(), b: {a}, c: {a, b}, d: {e}, e: {d}}
    down = {a: {b, c}, b: {c}, c: set(), d: {e}, e: {d}}
    plan = fast_plan(active, up, down, lambda r: r)
    pos = {h: i for i, h in enumerate(plan.handles)}
    assert pos[a] < pos[b] < pos[c] and sorted(plan.handles) == sorted(active)
    assert all(j < i for i, cs in enumerate(plan.covers) for j in cs)
    assert plan.covers[pos[c]] == sorted([pos[a], pos[b]])
    assert sum(len(plan.covers[pos[h]]) for h in (d, e)) == 1
    tested: list[bytes] = []

    def hit(matching: set[bytes]):  # type: ignore[no-untyped-def]
        def f(i: int) -> bool:
            tested.append(plan.handles[i])
            return plan.handles[i] in matching

        return f

    assert {plan.handles[i] for i in search(plan, hit({b, c}))} == set()  # a did not match
    assert b not in tested and c not in tested
    found = search(plan, hit({a, b, c, d, e}))
    groups = {g for i in found for g in plan.recipients[i]}
    assert groups == {"x", "y", "z"} and len(found) < 5  # (ii) stopped early
    no_groups = fast_plan(active, up, down, None)
    assert no_groups.groups is None and len(search(no_groups, hit({a, b, c, d, e}))) == 5


@pytest.mark.parametrize("profile", [SRV, FAST])
def test_covering_relation_builds_the_posets_the_tokens_tests_build(profile: str) -> None:
    rng = Random(4)
    filters = vcaps_filters(25, rng)
    pub = publisher(profile, seed=4)
    toks = [
        decode_token(profile, pub.register(flt, subscriber=f"S{j}"))
        for j, flt in enumerate(filters)
    ]
    handle = {pub.filter_id(flt): t.handle for flt, t in zip(filters, toks, strict=True)}
    fid = {h: x for x, h in handle.items()}

    def covering(h: bytes) -> tuple[list[bytes], list[bytes]]:
        above, below = pub.relations(fid[h])  # type: ignore[arg-type]
        return [handle[x] for x in above], [handle[x] for x in below]

    tested, given = VcapsTree(TREE), VcapsTree(TREE)
    for j in rng.choices(range(25), k=40):
        leaf = "B2" if j % 2 else "B3"
        tested.subscribe(leaf, f"S{j}", toks[j])
        at, x = leaf, f"S{j}"
        while at is not None and given.posets[at].insert(toks[j], x, covering=covering):
            at, x = TREE[at], at
    assert _poset_shape(tested) == _poset_shape(given)


def test_sampled_srv_routes_as_the_reference_and_says_it_is_sampled() -> None:
    s = make_setting(100, 8, 12, 2, {"B0": None, "B1": "B0", "B2": "B0"})
    cls, _ = classes(s)
    out = run_srv_sampled(s, cls, reference(s), time.perf_counter, per_class=2)
    assert out["sampled"] and out["equal_reference"] and out["profile"] == SRV
    assert out["per_class"] == {"popular": 2, "moderate": 2, "esoteric": 2}
    assert set(out["broker_ms"]) == {"popular", "moderate", "esoteric"}


def test_prepare_builds_the_plan_once_for_both_backends() -> None:
    pub = publisher(FAST)
    tree = VcapsTree(TREE)
    for j, flt in enumerate(vcaps_filters(10, Random(1))):
        tree.subscribe("B2", f"S{j}", decode_token(FAST, pub.register(flt, subscriber=f"S{j}")))
    bf = tree.posets["B2"]
    bf.prepare()
    plan = bf._fast_set  # noqa: SLF001 - the cache prepare fills
    assert plan is not None and len(plan.handles) == len(bf)
    assert (plan.native is not None) == (native.backend() == "native")
