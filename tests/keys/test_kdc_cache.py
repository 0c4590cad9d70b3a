"""KeyCache (psguard.txt §3.2.3): longest cached prefix, pinned authorisation keys, bounded LRU."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.crypto import SecretBytes
from pubguard.errors import KeyError_, ValidationError
from pubguard.keys import KDC, KeyCache

KDC_ = KDC(SecretBytes(bytes(range(32))))
TREE = ("w", "numeric", "age")


def test_derives_from_longest_cached_prefix() -> None:
    cache = KeyCache()
    cache.add(TREE, "1", KDC_.numeric_key("w", "age", "1"))
    k = cache.derive(TREE, "10110")
    assert k == KDC_.numeric_key("w", "age", "10110")
    assert cache.misses == 1 and len(cache) == 1 + 4  # the four intermediates are cached
    assert cache.derive(TREE, "10110") is k and cache.hits == 1
    # a sibling leaf now starts from the cached "1011", one hash away
    assert cache.derive(TREE, "10111") == KDC_.numeric_key("w", "age", "10111")
    assert len(cache) == 6


def test_refuses_without_an_ancestor() -> None:
    cache = KeyCache()
    cache.add(TREE, "1", KDC_.numeric_key("w", "age", "1"))
    with pytest.raises(KeyError_, match="no cached authorisation key"):
        cache.derive(TREE, "0111")
    with pytest.raises(KeyError_):
        cache.derive(("other", "numeric", "age"), "1")  # trees never mix


def test_pinned_keys_survive_eviction() -> None:
    cache = KeyCache(capacity=3)
    cache.add_all(TREE, KDC_.numeric_auth_keys("w", "age", 0, 15, 32, 1))  # ["0"]
    for v in range(16):
        cache.derive(TREE, format(v, "05b"))
    assert len(cache) <= 1 + 3
    assert cache.derive(TREE, "01111") == KDC_.numeric_key("w", "age", "01111")


def test_category_and_string_nodes() -> None:
    cache = KeyCache(capacity=0)  # no derived keys kept: still correct
    cache.add(("w", "category", "k"), ("vehicle",), KDC_.category_key("w", "k", ("vehicle",)))
    assert cache.derive(("w", "category", "k"), ("vehicle", "car")) == KDC_.category_key(
        "w", "k", ("vehicle", "car")
    )
    cache.add(("w", "prefix", "s"), "ab", KDC_.prefix_key("w", "s", "ab"))
    assert cache.derive(("w", "prefix", "s"), "abcd") == KDC_.prefix_key("w", "s", "abcd")
    assert len(cache) == 2


def test_forget_and_bad_input() -> None:
    cache = KeyCache()
    cache.add(TREE, "", KDC_.numeric_key("w", "age", ""))
    cache.derive(TREE, "0")
    cache.forget_tree(TREE)
    assert len(cache) == 0
    with pytest.raises(KeyError_):
        cache.derive(TREE, "0")
    with pytest.raises(ValidationError):
        KeyCache(capacity=-1)
    with pytest.raises(ValidationError):
        cache.add(TREE, 5, b"k" * 32)  # type: ignore[arg-type]
    assert "pinned=0" in repr(cache)


@given(st.lists(st.integers(0, 255), min_size=1, max_size=30), st.integers(0, 8))
def test_cache_agrees_with_kdc(values: list[int], capacity: int) -> None:
    cache = KeyCache(capacity=capacity)
    cache.add_all(TREE, KDC_.numeric_auth_keys("w", "age", 64, 191, 256, 1))
    for v in values:
        leaf = format(v, "08b")
        if 64 <= v <= 191:
            assert cache.derive(TREE, leaf) == KDC_.numeric_key("w", "age", leaf)
        else:
            with pytest.raises(KeyError_):
                cache.derive(TREE, leaf)
