"""Pure PSGuard token functions (no Spark): the counting matcher over tokens agrees with the
plaintext semantics of every supported operator, and randomized matching agrees with the
deterministic one."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Constraint, Op
from pubguard.schemes.psguard.tokens import (
    NONCE_BYTES,
    constraint_nodes,
    constraint_tokens,
    event_attr_tokens,
    match_randomized,
    numeric_intervals,
    randomize,
    tok64,
)

TK = KDC(b"m" * 32).topic("w")
R = 64
NUM = AttributeSpec("age", "int", True, R, 1, kind="numeric")
NUM_LC = AttributeSpec("age", "int", True, R, 4, kind="numeric")
PREFIX = AttributeSpec("name", "str", True, kind="prefix")
SUFFIX = AttributeSpec("name", "str", True, kind="suffix")
CATEGORY = AttributeSpec("cat", "str", True, kind="category")
PLAIN = AttributeSpec("flag", "str", True)

num_ops = st.sampled_from([Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE])
num_constraints = st.lists(
    st.builds(
        Constraint,
        st.just("age"),
        num_ops,
        st.one_of(st.integers(-3, R + 3), st.sampled_from([2.5, 17.5, 40.0])),
    ),
    min_size=1,
    max_size=3,
)


def meets(event_tokens: list[bytes], group: list[bytes]) -> int:
    return len(set(event_tokens) & set(group))


@given(num_constraints, st.integers(0, R - 1))
def test_numeric_group_met_exactly_when_constraints_hold(cs: list[Constraint], v: int) -> None:
    toks, keys, exact = constraint_nodes(NUM, cs)
    assert exact and toks == keys
    group = constraint_tokens(TK, toks)
    hits = meets(event_attr_tokens(TK, NUM, v), group)
    assert hits <= 1  # disjoint cover vs one root-to-leaf chain: the counting invariant
    assert (hits == 1) == all(c.matches_value(v) for c in cs)


@given(num_constraints, st.integers(0, R - 1))
def test_least_count_snapping_only_widens(cs: list[Constraint], v: int) -> None:
    toks, _, exact = constraint_nodes(NUM_LC, cs)
    hit = meets(event_attr_tokens(TK, NUM_LC, v), constraint_tokens(TK, toks)) == 1
    if all(c.matches_value(v) for c in cs):
        assert hit  # never a false negative; false positives are post-filtered
    elif exact:
        assert not hit


@given(num_constraints)
def test_numeric_intervals_are_disjoint_and_exact(cs: list[Constraint]) -> None:
    ivs = numeric_intervals(cs, R)
    allowed = {v for lo, hi in ivs for v in range(lo, hi + 1)}
    assert sum(hi - lo + 1 for lo, hi in ivs) == len(allowed)
    assert allowed == {v for v in range(R) if all(c.matches_value(v) for c in cs)}


words = st.text(alphabet="abc", min_size=0, max_size=5)


@given(st.sampled_from([PREFIX, SUFFIX]), words, st.text(alphabet="abc", min_size=1, max_size=6))
def test_string_chain_tokens(spec: AttributeSpec, p: str, v: str) -> None:
    op = Op.PREFIX if spec.kind == "prefix" else Op.SUFFIX
    c = Constraint("name", op, p)
    toks, _, _ = constraint_nodes(spec, [c])
    hit = meets(event_attr_tokens(TK, spec, v), constraint_tokens(TK, toks))
    assert (hit == 1) == c.matches_value(v)


paths = st.lists(st.sampled_from(["0", "1", "2"]), max_size=3).map(
    lambda p: "/" + "".join(x + "/" for x in p)
)


@given(paths, paths)
def test_category_and_equality_tokens(node: str, leaf: str) -> None:
    c = Constraint("cat", Op.PREFIX, node)
    toks, _, _ = constraint_nodes(CATEGORY, [c])
    ev = event_attr_tokens(TK, CATEGORY, leaf)
    assert (meets(ev, constraint_tokens(TK, toks)) == 1) == c.matches_value(leaf)
    eq = Constraint("cat", Op.EQ, node)
    toks, keys, _ = constraint_nodes(CATEGORY, [eq])
    assert (meets(ev, constraint_tokens(TK, toks)) == 1) == (node == leaf)


@given(st.sampled_from(["x", "y", "z"]), st.sampled_from(["x", "y", "z"]))
def test_plain_equality_and_exists(v: str, c: str) -> None:
    ev = event_attr_tokens(TK, PLAIN, v)
    toks, _, _ = constraint_nodes(PLAIN, [Constraint("flag", Op.EQ, c)])
    assert (meets(ev, constraint_tokens(TK, toks)) == 1) == (v == c)
    toks, keys, _ = constraint_nodes(PLAIN, [Constraint("flag", Op.EXISTS)])
    assert meets(ev, constraint_tokens(TK, toks)) == 1


def test_unsupported_operator_names_the_attribute() -> None:
    import pytest

    from pubguard.errors import ValidationError

    with pytest.raises(ValidationError, match="'flag' substring"):
        constraint_nodes(PLAIN, [Constraint("flag", Op.SUBSTRING, "a")])


def test_tokens_are_scoped_by_topic() -> None:
    other = KDC(b"m" * 32).topic("v")
    assert not set(event_attr_tokens(TK, NUM, 5)) & set(event_attr_tokens(other, NUM, 5))


@given(st.integers(0, 2**32), st.integers(1, 12), st.integers(1, 20))
def test_randomized_matching_agrees_with_deterministic(
    seed: int, n_events: int, n_tok: int
) -> None:
    rng = random.Random(seed)
    universe = [rng.randbytes(16) for _ in range(n_tok + 5)]
    sub_tokens = universe[:n_tok]
    nonces, tags, want = [], [], set()
    for e in range(n_events):
        mine = rng.sample(universe, rng.randint(0, 6))
        r = rng.randbytes(NONCE_BYTES)
        nonces.append(r)
        tags.append([tok64(x) for x in randomize(mine, r)])
        want |= {(e, i) for i, t in enumerate(sub_tokens) if t in mine}
    got = set(match_randomized(b"".join(nonces), tags, sub_tokens, chunk=3))
    assert got == want


def test_randomized_tags_unlinkable_across_events() -> None:
    t = TK.node_token("numeric", "age", "01")[:16]
    a = randomize([t], b"\x00" * 16)
    b = randomize([t], b"\x01" * 16)
    assert a != b


def test_not_equal_inside_a_bucket_grants_that_bucket_once() -> None:
    # regression: `age != 1` is [0,0] + [2,R-1]; both snap onto bucket [0,3], which must be
    # granted once, so an event with age 0 meets exactly one token of the group
    cs = [Constraint("age", Op.NE, 1)]
    toks, _, exact = constraint_nodes(NUM_LC, cs)
    assert not exact
    assert len(toks) == len(set(toks))
    for v in (0, 2, 3, 17, R - 1):
        assert meets(event_attr_tokens(TK, NUM_LC, v), constraint_tokens(TK, toks)) == 1
