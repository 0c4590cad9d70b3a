"""Differential tests: key-tree derivation, ``KH`` and the key cache agree on both backends.

The Python code (keys/nakt.py, keys/kdc.py, keys/cache.py, crypto.KeyedHash) is the reference;
``pubguard._native`` must give the same keys, the same covers and memo contents, the same cache
hits, misses and evictions, and the same typed errors, on random inputs (psguard.txt §3.1-3.2,
eventguard.txt §4.1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import KeyedHash, SecretBytes
from pubguard.errors import KeyError_, PubguardError
from pubguard.keys import KDC, KeyCache, MetaService, TopicKeys, derive_from
from pubguard.keys.nakt import NATIVE_MAX_DEPTH, cover_keys, derive_path
from tests.native_backends import requires_native

pytestmark = requires_native

keys32 = st.binary(min_size=32, max_size=32)
bits = st.text("01", max_size=20)
names = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), min_size=1, max_size=6)


def both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn()`` on the Python backend, then on the native one (a result or the error type)."""
    out = []
    for b in ("python", "native"):
        with native.use(b):
            try:
                out.append(fn())
            except PubguardError as exc:
                out.append(type(exc))
    return out[0], out[1]


def _raw(x: Any) -> Any:
    if isinstance(x, SecretBytes):
        return x.reveal()
    if isinstance(x, Mapping):  # a dict, or the native cover (AuthKeys)
        return {k: _raw(v) for k, v in x.items()}
    return x


@settings(max_examples=60)
@given(key=keys32, auth=bits, target=bits)
def test_derive_from(key: bytes, auth: str, target: str) -> None:
    """Any auth/target pair, prefix or not: same key, or the same KeyError_."""
    target = auth + target if len(target) % 2 else target
    py, nat = both(lambda: _raw(derive_from(auth, key, target)))
    assert py == nat
    assert (py is KeyError_) == (not target.startswith(auth))


@settings(max_examples=40)
@given(key=st.binary(min_size=1, max_size=80), labels=st.one_of(names, st.lists(names)))
def test_derive_path_chars_and_names(key: bytes, labels: str | list[str]) -> None:
    py, nat = both(lambda: derive_path(key, labels))
    assert py == nat


@settings(max_examples=60)
@given(key=keys32, m=st.integers(0, 16), data=st.data())
def test_cover_keys(key: bytes, m: int, data: st.DataObject) -> None:
    lo = data.draw(st.integers(0, (1 << m) - 1))
    hi = data.draw(st.integers(lo, (1 << m) - 1))
    py, nat = both(lambda: [(n, k) for n, k in cover_keys(key, lo, hi, m)])
    assert py == nat and py


def test_cover_keys_at_the_native_depth_limit() -> None:
    """Depth 62 is native, deeper trees take the Python path; both agree either side."""
    key = bytes(range(32))
    for m in (NATIVE_MAX_DEPTH, NATIVE_MAX_DEPTH + 2):
        lo, hi = 1, (1 << m) - 2
        py, nat = both(lambda: cover_keys(key, lo, hi, m))  # noqa: B023 - called at once
        assert py == nat and len(py) == 2 * m - 2


@settings(max_examples=30)
@given(
    master=keys32,
    w=names,
    attr=names,
    m=st.integers(1, 14),
    data=st.data(),
)
def test_topic_keys_trees(master: bytes, w: str, attr: str, m: int, data: st.DataObject) -> None:
    """NAKT auth keys (cold, then memoised), node and event keys, category, prefix and suffix
    trees and node tokens from one TopicKeys, run in the same order on both backends."""
    r = 1 << m
    lo = data.draw(st.integers(0, r - 1))
    hi = data.draw(st.integers(lo, r - 1))
    node = data.draw(st.text("01", max_size=m))
    path = tuple(data.draw(st.lists(names, max_size=4)))
    s = data.draw(names)
    v = data.draw(st.integers(0, r - 1))

    def run() -> list[Any]:
        tk = KDC(SecretBytes(master)).topic(w)
        return [
            _raw(tk.numeric_auth_keys(attr, lo, hi, r, 1)),
            _raw(tk.numeric_key(attr, node)),
            _raw(tk.numeric_event_key(attr, v, r, 1)),
            _raw(tk.numeric_auth_keys(attr, lo, hi, r, 1)),  # warm: from the memo
            _raw(tk.category_key(attr, path)),
            _raw(tk.prefix_key(attr, s)),
            _raw(tk.suffix_key(attr, s)),
            tk.node_token("numeric", attr, node),
            tk.node_token("category", attr, path),
        ]

    py, nat = both(run)
    assert py == nat


@settings(max_examples=40)
@given(key=st.binary(max_size=100), data=st.binary(max_size=200))
def test_keyed_hash(key: bytes, data: bytes) -> None:
    """eventguard.txt §4.1 ``KH``: the native keyed hash is HMAC-SHA256, any key length."""
    assert native.NATIVE.KeyedHash(key)(data) == KeyedHash(key)(data)
    assert native.NATIVE.kh(key, data) == KeyedHash(key)(data)


@settings(max_examples=20)
@given(master=st.binary(min_size=16, max_size=40), w=names, e=st.integers(0, 10**6))
def test_meta_service_keys(master: bytes, w: str, e: int) -> None:
    def run() -> list[Any]:
        ms = MetaService(SecretBytes(master))
        return [ms.topic_token(w), ms.epoch_key(w, e).reveal(), ms.ust(bytes(16)).reveal()]

    py, nat = both(run)
    assert py == nat


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "derive", "derive", "derive", "forget"]),
        st.sampled_from(["t1", ("w", "numeric", "age"), "t3"]),
        st.one_of(st.text("01", max_size=6), st.lists(st.sampled_from("abc"), max_size=3)),
    ),
    max_size=40,
)


@settings(max_examples=60)
@given(capacity=st.integers(0, 6), script=ops)
def test_key_cache_behaves_the_same(capacity: int, script: list[Any]) -> None:
    """psguard.txt §3.2.3: the same keys, refusals, hits, misses, sizes and LRU evictions."""

    def run() -> list[Any]:
        cache = KeyCache(capacity)
        trace: list[Any] = []
        for op, tree, node in script:
            node = node if isinstance(node, str) else tuple(node)
            if op == "add":
                cache.add(tree, node[:1], bytes([len(node)]) * 32)
            elif op == "forget":
                cache.forget_tree(tree)
            else:
                try:
                    trace.append(cache.derive(tree, node).reveal())
                except KeyError_:
                    trace.append(KeyError_)
            trace.append((len(cache), cache.hits, cache.misses))
        return trace

    py, nat = both(run)
    assert py == nat


def test_key_cache_returns_the_cached_object_and_hides_keys() -> None:
    with native.use("native"):
        cache = KeyCache()
        cache.add("t", "", SecretBytes(bytes(32)))
        k = cache.derive("t", "0110")
        assert cache.derive("t", "0110") is k and cache.hits == 1
        assert "fp=" not in repr(cache) and bytes(32).hex() not in repr(cache)
        with pytest.raises(KeyError_):
            cache.derive("other", "0")


def test_native_objects_hide_keys_and_refuse_pickling() -> None:
    """Canary: the native keyed hash shows nothing of its key and cannot be pickled."""
    import pickle

    key = bytes(range(32))
    for obj in (TopicKeys(key), native.NATIVE.KeyedHash(key)):
        assert key.hex() not in repr(obj)
    with pytest.raises(TypeError):
        pickle.dumps(native.NATIVE.KeyedHash(key))
