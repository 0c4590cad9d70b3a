"""NAKT ids, minimal covers and prefix-only derivation (psguard.txt §3.1)."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.crypto import H, SecretBytes
from pubguard.errors import KeyError_, ValidationError
from pubguard.keys import KDC, derive_from, ktid, ktid_range, nakt_cover, nakt_depth
from pubguard.keys.nakt import cover_heap, cover_keys, derive_path

MASTER = SecretBytes(bytes(range(32)))


def test_paper_examples() -> None:
    """psguard.txt §3.1, Figure 1: |R| = 32, lc = 4."""
    assert nakt_depth(32, 4) == 3
    assert ktid(22, 32, 4) == "101"
    assert nakt_cover(8, 19, 32, 4) == ["01", "100"]
    assert nakt_cover(16, 31, 32, 4) == ["1"]
    assert nakt_cover(0, 31, 32, 4) == [""]
    assert ktid_range("01", 32, 4) == (8, 15)
    assert ktid_range("100", 32, 4) == (16, 19)


def test_paper_derivation_example() -> None:
    """K_10 = H(K_1 || 0), K_101 = H(K_10 || 1)."""
    tk = KDC(MASTER).topic("cancerTrail")
    k1 = tk.numeric_key("age", "1")
    k101 = derive_from("1", k1, "101")
    assert k101.reveal() == H(H(k1.reveal() + b"0") + b"1")
    assert k101 == tk.numeric_event_key("age", 22, 32, 4)[1]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((32, 3), "not a multiple"),
        ((24, 4), "not a power of two"),
        ((100, 1), "not a power of two"),
        ((0, 1), "must be positive"),
        ((32, -4), "must be positive"),
        ((2**70, 1), "exceeds the limit"),
    ],
)
def test_bad_tree_shapes(args: tuple[int, int], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        nakt_depth(*args)


@pytest.mark.parametrize(
    ("low", "high", "match"),
    [
        (20, 8, "empty range"),
        (-4, 7, "outside the attribute range"),
        (0, 32, "outside the attribute range"),
        (9, 19, "least-count"),
        (8, 18, "least-count"),
        ("8", 19, "must be an integer"),
        (True, 19, "must be an integer"),
    ],
)
def test_bad_ranges(low: object, high: object, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        nakt_cover(low, high, 32, 4)  # type: ignore[arg-type]


def test_snap_widens_to_buckets() -> None:
    assert nakt_cover(9, 18, 32, 4, snap=True) == ["01", "100"]


def test_bad_values_and_ktids() -> None:
    with pytest.raises(ValidationError):
        ktid(32, 32, 4)
    with pytest.raises(ValidationError):
        ktid_range("012", 32, 4)
    with pytest.raises(ValidationError):
        ktid_range("0101", 32, 4)
    with pytest.raises(ValidationError):
        derive_from("1", MASTER, "1x")


def test_derivation_refused_unless_prefix() -> None:
    k = SecretBytes(b"k" * 32)
    for auth, target in [("1", "011"), ("10", "1"), ("101", "100"), ("0", "")]:
        with pytest.raises(KeyError_, match="not a prefix"):
            derive_from(auth, k, target)
    assert derive_from("10", k, "10") == k


@cache
def _min_pieces(lo: int, hi: int, m: int) -> int:
    """Brute force: fewest aligned dyadic blocks partitioning [lo, hi] (leaf units)."""
    if lo > hi:
        return 0
    best = None
    for level in range(m + 1):
        size = 1 << level
        if lo % size == 0 and lo + size - 1 <= hi:
            n = 1 + _min_pieces(lo + size, hi, m)
            best = n if best is None else min(best, n)
    assert best is not None
    return best


@st.composite
def trees_and_ranges(draw: st.DrawFn) -> tuple[int, int, int, int]:
    m = draw(st.integers(0, 7))
    lc = draw(st.sampled_from([1, 2, 3, 4, 5]))
    r = lc << m
    a, b = sorted(draw(st.integers(0, (1 << m) - 1)) for _ in range(2))
    return a * lc, (b + 1) * lc - 1, r, lc


@given(trees_and_ranges())
def test_cover_is_exact_and_minimal(x: tuple[int, int, int, int]) -> None:
    low, high, r, lc = x
    m = nakt_depth(r, lc)
    cover = nakt_cover(low, high, r, lc)
    ranges = [ktid_range(node, r, lc) for node in cover]
    # exact: the pieces are contiguous, in order, and partition [low, high]
    assert ranges[0][0] == low and ranges[-1][1] == high
    for (_, h1), (l2, _) in zip(ranges, ranges[1:], strict=False):
        assert l2 == h1 + 1
    # minimal: no smaller set of tree nodes covers exactly the same values
    assert len(cover) == _min_pieces(low // lc, high // lc, m)
    # psguard.txt §3.1: never more than 2 log2(|R|/lc) - 2 keys (for m >= 2)
    assert len(cover) <= max(2 * m - 2, 1)


def _subtree(node: str, key: bytes, depth: int) -> dict[str, bytes]:
    out = {node: key}
    if len(node) < depth:
        for b in "01":
            out |= _subtree(node + b, H(key + b.encode()), depth)
    return out


@given(trees_and_ranges(), st.data())
def test_no_out_of_range_derivation(x: tuple[int, int, int, int], data: st.DataObject) -> None:
    low, high, r, lc = x
    m = nakt_depth(r, lc)
    kdc = KDC(MASTER)
    auth = kdc.numeric_auth_keys("w", "age", low, high, r, lc)
    assert list(auth) == nakt_cover(low, high, r, lc)
    v = data.draw(st.integers(0, r - 1))
    leaf, event_key = kdc.numeric_event_key("w", "age", v, r, lc)
    if low <= v <= high:
        owners = [node for node in auth if leaf.startswith(node)]
        assert len(owners) == 1
        assert derive_from(owners[0], auth[owners[0]], leaf) == event_key
    else:
        for node, key in auth.items():
            with pytest.raises(KeyError_):
                derive_from(node, key, leaf)
        # and structurally: no key anywhere below the authorised nodes equals it
        reachable = set()
        for node, key in auth.items():
            reachable |= set(_subtree(node, key.reveal(), m).values())
        assert event_key.reveal() not in reachable
        assert kdc.numeric_key("w", "age", "").reveal() not in reachable  # nor the root


@given(st.integers(0, 9), st.data())
def test_top_down_cover_walk_matches_cover_and_chain(m: int, data: st.DataObject) -> None:
    """cover_keys (the KDC's one-pass walk) = cover_heap nodes with chain-derived keys."""
    a, b = sorted(data.draw(st.integers(0, (1 << m) - 1)) for _ in range(2))
    root = H(b"root")
    got = cover_keys(root, a, b, m)
    assert [n for n, _ in got] == cover_heap(a, b, m)
    for n, k in got:
        assert k == derive_path(root, bin(n)[3:])
