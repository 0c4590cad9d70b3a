"""BoundedLru, the project's one bounded LRU (KeyCache, LruCache and the guards' TTLCache use it)."""

from __future__ import annotations

import pickle
from math import inf

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.keys.cache import BoundedLru, KeyCache, LruCache
from pubguard.schemes.common.guards import TTLCache


class _Model:
    """The reference: a dict of ``key -> (expires, value)`` and a recency list, oldest first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.d: dict[int, tuple[float, int]] = {}
        self.order: list[int] = []
        self.hits = self.misses = 0

    def get(self, key: int, now: float) -> int | None:
        if key not in self.d or now > self.d[key][0]:
            if key in self.d:
                del self.d[key]
                self.order.remove(key)
            self.misses += 1
            return None
        self.order.remove(key)
        self.order.append(key)
        self.hits += 1
        return self.d[key][1]

    def put(self, key: int, value: int, expires: float) -> None:
        if self.capacity == 0:
            return
        if key in self.d:
            self.order.remove(key)
        self.d[key] = (expires, value)
        self.order.append(key)
        while len(self.order) > self.capacity:
            del self.d[self.order.pop(0)]

    def discard(self, key: int) -> None:
        if key in self.d:
            del self.d[key]
            self.order.remove(key)


_KEYS = st.integers(0, 6)
_TIMES = st.none() | st.integers(0, 12).map(float)
_OPS = st.lists(
    st.tuples(st.just("put"), _KEYS, st.integers(0, 99), _TIMES)
    | st.tuples(st.just("get"), _KEYS, st.just(0), _TIMES)
    | st.tuples(st.just("discard"), _KEYS, st.just(0), st.none())
    | st.tuples(st.just("clear"), st.just(0), st.just(0), st.none()),
    max_size=60,
)


@given(st.integers(0, 4), _OPS)
def test_bounded_lru_agrees_with_a_reference_model(capacity: int, ops: list) -> None:
    c: BoundedLru[int, int] = BoundedLru(capacity)
    m = _Model(capacity)
    for op, key, value, t in ops:
        if op == "put":  # t: the entry's expiry (None: never expires)
            if t is None:
                c.put(key, value)
            else:
                c.put(key, value, t)
            m.put(key, value, inf if t is None else t)
        elif op == "get":  # t: the reader's clock (None: nothing is treated as expired)
            got = c.get(key) if t is None else c.get(key, t)
            assert got == m.get(key, -inf if t is None else t)
        elif op == "discard":
            c.discard(key)
            m.discard(key)
        else:
            c.clear()
            m.d.clear()
            m.order.clear()
        assert len(c) <= capacity
        assert c.keys() == m.order and len(c) == len(m.order)
        assert c.values() == [m.d[k][1] for k in m.order]
        assert (c.hits, c.misses) == (m.hits, m.misses)


def test_expiry_boundary_and_refresh() -> None:
    c: BoundedLru[str, int] = BoundedLru(2)
    c.put("a", 1, 10.0)
    assert c.get("a", 10.0) == 1  # valid up to and including its expiry
    assert c.get("a", 10.5) is None and "a" not in c  # then dropped on the read
    c.put("a", 1, 10.0)
    c.put("a", 2, 20.0)  # a put replaces the value and the expiry
    assert c.get("a", 15.0) == 2 and c.get("a") == 2


def test_facades_keep_their_rules() -> None:
    with pytest.raises(ValidationError):
        BoundedLru(-1)
    with pytest.raises(ValidationError):
        BoundedLru(True)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        TTLCache(0)  # a verify cache that keeps nothing is refused
    with pytest.raises(ValidationError):
        KeyCache(capacity=1.5)  # type: ignore[arg-type]
    off: LruCache[int, int] = LruCache(0)  # a client cache may be switched off
    off.put(1, 1)
    assert off.get(1) is None and len(off) == 0 and off.misses == 1
    t: TTLCache[bytes, bytes] = TTLCache(4)
    t.put(b"k", b"secret-value", 5.0)
    assert repr(t) == "TTLCache(size=1, capacity=4)" and b"secret" not in repr(t).encode()
    assert isinstance(t, BoundedLru) and isinstance(off, BoundedLru)
    with pytest.raises(TypeError):
        pickle.dumps(LruCache(2))
