"""Guard building blocks: Merkle batches, signed roots, windows, strikes, caches, encodings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.schemes.common.guards import (
    ExactMatcher,
    IdBindings,
    IdWindow,
    SignedRootVerifier,
    StrikeCounter,
    TimestampWindow,
    TTLCache,
    pack_fields,
)
from pubguard.schemes.common.merkle import (
    merkle_batch,
    merkle_root,
    pack_path,
    root_from_path,
    signed_root,
    unpack_path,
)
from pubguard.schemes.common.replay import TokenCache

leaves_st = st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=70)


@given(leaves_st)
@settings(max_examples=60, deadline=None)
def test_every_leaf_path_recomputes_the_root(leaves):
    root, paths = merkle_batch(leaves)
    assert root == merkle_root(leaves)
    for i, leaf in enumerate(leaves):
        assert root_from_path(leaf, i, paths[i], len(leaves)) == root


@given(leaves_st)
@settings(max_examples=30, deadline=None)
def test_packed_paths_round_trip(leaves):
    root, paths = merkle_batch(leaves)
    for i, leaf in enumerate(leaves):
        assert unpack_path(pack_path(paths[i])) == paths[i]
        assert root_from_path(leaf, i, unpack_path(pack_path(paths[i])), len(leaves)) == root


@pytest.mark.parametrize(
    "blob", [b"x" * 31, b"x" * 33, b"x" * 32 * 17, [b"x" * 32], "x" * 32, None]
)
def test_unpack_path_is_strict(blob):
    with pytest.raises(ValidationError):
        unpack_path(blob)


@given(leaves_st, st.data())
@settings(max_examples=60, deadline=None)
def test_a_changed_leaf_index_or_path_misses_the_root(leaves, data):
    root, paths = merkle_batch(leaves)
    i = data.draw(st.integers(0, len(leaves) - 1))
    other = leaves[i] + b"!"
    assert root_from_path(other, i, paths[i], len(leaves)) != root
    if paths[i]:
        k = data.draw(st.integers(0, len(paths[i]) - 1))
        bad = list(paths[i])
        bad[k] = bytes([bad[k][0] ^ 1]) + bad[k][1:]
        assert root_from_path(leaves[i], i, bad, len(leaves)) != root
        with pytest.raises(InvalidToken):  # wrong path length for the batch shape
            root_from_path(leaves[i], i, list(paths[i]) + [b"\x00" * 32], len(leaves))


def test_merkle_limits_and_domain_separation():
    with pytest.raises(ValidationError):
        merkle_batch([])
    for bad in ((0, 0), (3, 2), (-1, 2), (True, 2)):
        with pytest.raises(InvalidToken):
            root_from_path(b"x", bad[0], [], bad[1])
    # an inner node is not a valid leaf: the second level of a 2-batch is not the 1-batch root
    root2 = merkle_root([b"a", b"b"])
    assert merkle_root([root2]) != root2


@given(st.integers(1, 40), st.data())
@settings(max_examples=60, deadline=None)
def test_the_root_commits_to_index_and_size(n, data):
    """No other (index, size) recomputes the root from a leaf's path, even where the path
    shape is the same (e.g. 16 -> 15 for leaf 5): ``mi`` and ``mn`` are bound."""
    leaves = [b"l%d" % i for i in range(n)]
    root, paths = merkle_batch(leaves)
    i = data.draw(st.integers(0, n - 1))
    j, m = data.draw(st.tuples(st.integers(0, 45), st.integers(1, 46)))
    if (j, m) != (i, n) and j < m:
        try:
            assert root_from_path(leaves[i], j, paths[i], m) != root
        except InvalidToken:
            pass
    assert signed_root(b"T", root, n) != signed_root(b"T", root, n + 1)


def test_signed_root_verifier_caches_per_key_and_root():
    sk = SigningKey.generate()
    v = SignedRootVerifier(b"T", ttl=10.0)
    leaves = [b"l%d" % i for i in range(8)]
    root, paths = merkle_batch(leaves)
    sig = sk.sign(signed_root(b"T", root, 8))
    for i in range(8):
        v.verify(sk.public, leaves[i], sig, now=1.0, index=i, size=8, path=paths[i])
    assert v.verifications == 1
    with pytest.raises(InvalidToken):  # another key claiming the same root is checked
        v.verify(SigningKey.generate().public, leaves[0], sig, now=1.0, size=8, path=paths[0])
    v.verify(sk.public, leaves[0], sig, now=20.0, size=8, path=paths[0])  # expired: re-verified
    assert v.verifications == 3
    with pytest.raises(InvalidToken):
        SignedRootVerifier(b"T", ttl=1).verify(sk.public, b"x", sig, now=0.0)


def test_timestamp_window():
    w = TimestampWindow(5.0)
    assert w.check(100.0, 104.9) is None and w.check(100.0, 95.0) is None
    assert w.check(100.0, 105.1) is DropReason.STALE and w.check(110.0, 100.0) is DropReason.STALE
    assert w.check("x", 1.0) is DropReason.MALFORMED and w.check(float("nan"), 1.0) is not None
    with pytest.raises(ValidationError):
        TimestampWindow(0)


def test_id_window_and_bindings():
    w = IdWindow(10.0, capacity=3)
    assert w.check_and_record("a", 0.0) and not w.check_and_record("a", 5.0)
    assert w.check_and_record("a", 16.0)  # forgotten after the window
    for x in "bcd":
        w.record(x, 17.0)
    assert len(w) == 3 and not w.seen("a", 17.0)  # capacity evicts the oldest
    b = IdBindings()
    assert b.bind("sb1", ("l1", "s1")) and b.bind("sb1", ("l1", "s1"))
    assert not b.bind("sb1", ("l2", "s9")) and b.owner("sb1") == ("l1", "s1")
    b.release("sb1")
    assert b.bind("sb1", ("l2", "s9"))


def test_strike_counter_bans_and_forgives():
    s = StrikeCounter(threshold=3, window=10.0, ban=60.0)
    assert not s.strike("x", 0.0) and not s.strike("x", 1.0)
    assert not s.strike("x", 20.0)  # old strikes fell out of the window
    assert not s.strike("x", 21.0) and s.strike("x", 22.0) and s.banned("x", 30.0)
    assert not s.banned("y", 30.0) and not s.banned("x", 83.0)
    s.strike("z", 0.0)
    s.pardon("z")


def test_token_cache_invalidates_by_time_and_count():
    c: TokenCache[str] = TokenCache(ttl=60.0, max_uses=3)
    assert c.lookup(b"t", 0.0) is None
    c.store(b"t", "ok", 0.0)
    assert [c.lookup(b"t", 1.0) for _ in range(4)] == ["ok", "ok", "ok", None]
    c.store(b"t", "ok", 100.0)
    assert c.lookup(b"t", 150.0) == "ok" and c.lookup(b"t", 161.0) is None
    c.store(b"t", "ok", 0.0)
    c.invalidate(b"t")
    assert c.lookup(b"t", 0.0) is None and c.hits == 4


def test_ttl_cache_bounds():
    c: TTLCache[str, int] = TTLCache(capacity=2)
    c.put("a", 1, 10.0)
    c.put("b", 2, 10.0)
    assert c.get("a", 1.0) == 1
    c.put("c", 3, 10.0)  # evicts b, the least recently used
    assert c.get("b", 1.0) is None and c.get("a", 11.0) is None and len(c) == 1


@given(
    st.lists(st.one_of(st.binary(max_size=8), st.text(max_size=4), st.integers(-5, 5)), max_size=4),
    st.lists(st.one_of(st.binary(max_size=8), st.text(max_size=4), st.integers(-5, 5)), max_size=4),
)
def test_pack_fields_is_injective(a, b):
    if a != b or [type(x) for x in a] != [type(x) for x in b]:
        assert pack_fields(b"T", *a) != pack_fields(b"T", *b)
    with pytest.raises(ValidationError):
        pack_fields(b"T", True)


def test_exact_matcher():
    m = ExactMatcher()
    m.add("k1", b"t1")
    m.add("k2", b"t1")
    m.add("k3", b"t2")
    assert m.match((b"t1",)) == {"k1", "k2"} and m.match((b"t1", b"t2")) == {"k1", "k2", "k3"}
    m.add("k1", b"t2")  # re-adding moves the key
    m.remove("k2")
    m.remove("nope")
    assert m.match((b"t1",)) == set() and m.match((b"t2",)) == {"k1", "k3"} and len(m) == 2
