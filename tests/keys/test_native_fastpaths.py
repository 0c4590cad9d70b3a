"""Differential tests for the one-call native paths at the key APIs: ``derive_from`` (checks,
walk and ``SecretBytes`` in one call), ``KDC.topic_key`` (``K(w) = KH_rk(w)``), the native
``KeyedHash`` built from a ``SecretBytes``, and the key cache's native ``derive`` (hits with no
Python frame, misses raising the reference's ``KeyError_``). psguard.txt §3.1-3.2.3.

Inputs include what the fast paths must hand back to the reference: keys that are not 32
bytes, ktids that are not bit strings or not prefixes, labels that are empty, hold NUL or are
not ``str``; both backends must give the same key or the same typed error.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import KeyedHash, SecretBytes
from pubguard.errors import KeyError_, PubguardError
from pubguard.keys import KDC, KeyCache, derive_from
from tests.native_backends import requires_native

pytestmark = requires_native

CANARY = bytes.fromhex("5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7")
ktids = st.one_of(st.text("01", max_size=16), st.text("01x2", max_size=4), st.integers(0, 3))
labels = st.one_of(
    st.text(max_size=6), st.just(""), st.just("a\x00b"), st.binary(max_size=4), st.none()
)


def both(fn: Any) -> tuple[Any, Any]:
    """``fn()`` on each backend: its value, or the type of the error it raised."""
    out = []
    for b in ("python", "native"):
        with native.use(b):
            try:
                out.append(fn())
            except (PubguardError, TypeError, AttributeError) as exc:
                out.append(type(exc))
    return out[0], out[1]


def _reveal(x: Any) -> Any:
    if isinstance(x, SecretBytes):
        assert type(x) is SecretBytes
        return ("secret", x.reveal())
    return x


@settings(max_examples=80)
@given(
    key=st.one_of(st.binary(min_size=32, max_size=32), st.binary(min_size=1, max_size=70)),
    wrap=st.booleans(),
    auth=ktids,
    tail=st.text("01", max_size=16),
    prefix=st.booleans(),
)
def test_derive_from_fast_path(key: bytes, wrap: bool, auth: Any, tail: str, prefix: bool) -> None:
    """Any key (bytes or SecretBytes, any length) and any ktids: the same key, or the same
    error; the native result is a real ``SecretBytes``."""
    k: Any = SecretBytes(key) if wrap else key
    target = (auth + tail if prefix else tail) if isinstance(auth, str) else tail
    py, nat = both(lambda: _reveal(derive_from(auth, k, target)))
    assert py == nat


def test_derive_from_odd_key_types_take_the_reference() -> None:
    for key in (bytearray(32), memoryview(bytes(32))):
        py, nat = both(lambda: _reveal(derive_from("0", key, "0110")))  # noqa: B023
        assert py == nat


@settings(max_examples=60)
@given(master=st.binary(min_size=16, max_size=40), w=labels)
def test_topic_key_fast_path(master: bytes, w: Any) -> None:
    """``K(w) = KH_rk(w)``: the same key, or the same ValidationError for a bad label."""
    py, nat = both(lambda: _reveal(KDC(SecretBytes(master)).topic_key(w)))
    assert py == nat


@settings(max_examples=30)
@given(key=st.binary(max_size=80), data=st.binary(max_size=100))
def test_keyed_hash_takes_secret_bytes(key: bytes, data: bytes) -> None:
    n = native.NATIVE
    assert n.KeyedHash(SecretBytes(key))(data) == KeyedHash(key)(data) == n.KeyedHash(key)(data)
    with pytest.raises(TypeError):
        n.KeyedHash("not a key")


def test_native_secret_bytes_are_ordinary_secret_bytes() -> None:
    """What the native paths create is exactly ``SecretBytes``: immutable, constant-time
    equal, picklable as before, and its repr hides the key."""
    with native.use("native"):
        k = derive_from("", SecretBytes(CANARY), "0101")
    with native.use("python"):
        ref = derive_from("", SecretBytes(CANARY), "0101")
    assert type(k) is SecretBytes and k == ref and hash(k) == hash(ref)
    assert pickle.loads(pickle.dumps(k)) == ref
    assert k.reveal().hex() not in repr(k) and CANARY.hex() not in repr(k)
    with pytest.raises(AttributeError):
        k._b = b""  # type: ignore[misc]


def test_key_cache_miss_raises_the_reference_error() -> None:
    """The native ``derive`` raises ``KeyError_`` with the reference's message (which names
    the node, never a key), and ``derive`` is the core's own method (no Python frame)."""
    msgs = []
    for b in ("python", "native"):
        with native.use(b):
            cache = KeyCache()
            cache.add("t", "01", SecretBytes(CANARY))
            assert cache.derive("t", "0110") == cache.derive("t", "0110")
            for bad in ("1", ("a",), "00"):
                with pytest.raises(KeyError_) as ei:
                    cache.derive("t", bad)
                msgs.append(str(ei.value))
                assert CANARY.hex() not in str(ei.value)
            with pytest.raises(KeyError_):
                cache.derive("unknown tree", "0")
            with pytest.raises(TypeError):
                cache.derive("t", 5)  # type: ignore[arg-type]
    assert msgs[:3] == msgs[3:]
    with native.use("native"):
        assert type(KeyCache().derive).__name__ == "builtin_function_or_method"


@settings(max_examples=40)
@given(
    capacity=st.integers(0, 4),
    script=st.lists(
        st.tuples(
            st.sampled_from(["add", "derive", "derive", "forget", "clear"]),
            st.sampled_from(["t1", "t2"]),
            st.one_of(
                st.text("01é", max_size=5),
                st.lists(st.sampled_from(["a", "bé", ""]), max_size=3).map(tuple),
            ),
        ),
        max_size=30,
    ),
)
def test_key_cache_nodes_with_multibyte_labels(capacity: int, script: list[Any]) -> None:
    """String nodes with multi-byte characters and category paths with empty or multi-byte
    names: the native encoding of (tree, node) slices at the same label boundaries."""

    def run() -> list[Any]:
        cache = KeyCache(capacity)
        out: list[Any] = []
        for op, tree, node in script:
            if op == "add":
                cache.add(tree, node[:1], bytes([len(node)]) * 32)
            elif op == "forget":
                cache.forget_tree(tree)
            elif op == "clear":
                cache.clear()
            else:
                try:
                    out.append(cache.derive(tree, node).reveal())
                except KeyError_:
                    out.append(KeyError_)
            out.append((len(cache), cache.hits, cache.misses, repr(cache)))
        return out

    py, nat = both(run)
    assert py == nat
