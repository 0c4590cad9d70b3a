"""The native SignedRootVerifier (``pubguard._native``) against the Python one, its spec: the
same sequence of verifications, tampered or not, across batches, keys, node budgets and
expiry, gives the same root or ``InvalidToken`` and the same cache state after every step
(signatures verified, authenticated nodes, trees); ``root_verifier`` picks the backend."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import SigningKey
from pubguard.errors import InvalidToken, ValidationError
from pubguard.schemes.common.guards import SignedRootVerifier
from pubguard.schemes.common.merkle import merkle_batch, pack_path, signed_root
from pubguard.schemes.common.native_guard import is_native, root_verifier
from tests.native_backends import requires_native

KEYS = [SigningKey.from_seed(bytes([k]) * 32) for k in (1, 2)]
TAG = b"T"


def outcome(v: Any, key: Any, args: tuple, now: float) -> object:
    leaf, sig, i, n, path = args
    try:
        return v.verify_packed(key.public, leaf, sig, now, i, n, path)
    except InvalidToken:
        return "forged"


def state(v: Any) -> tuple[int, int, int]:
    return (v.verifications, v.cached_nodes, v.cached_trees)


def flip(b: bytes, at: int) -> bytes:
    return b[:at] + bytes([b[at] ^ 1]) + b[at + 1 :]


@st.composite
def steps(draw: st.DrawFn) -> list[tuple[int, tuple, float]]:
    out: list[tuple[int, tuple, float]] = []
    now = 1.0
    for b in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 24))
        k = draw(st.integers(0, 1))
        leaves = [b"leaf%d-%d" % (b, i) for i in range(n)]
        root, paths = merkle_batch(leaves)
        sig = KEYS[k].sign(signed_root(TAG, root, n))
        for i in draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n)):
            leaf, s, idx, size, path = leaves[i], sig, i, n, pack_path(paths[i])
            match draw(
                st.sampled_from(["ok", "ok", "leaf", "index", "size", "path", "cut", "sig"])
            ):
                case "leaf":
                    leaf += b"!"
                case "index":
                    idx = draw(st.integers(-1, n + 1))
                case "size":
                    size = draw(st.integers(0, n + 2))
                case "path" if path:
                    path = flip(path, draw(st.integers(0, len(path) - 1)))
                case "cut":
                    path = path[:-32] if path and draw(st.booleans()) else path + bytes(32)
                case "sig":
                    s = flip(sig, 5)
            now += draw(st.sampled_from([0.0, 0.0, 1.0, 25.0]))  # ttl 20: trees expire
            who = k if draw(st.integers(0, 9)) else 1 - k  # sometimes the other key
            out.append((who, (leaf, s, idx, size, path), now))
    return out


@requires_native
@given(steps(), st.sampled_from([0, 3, 40, 1 << 16]))
@settings(max_examples=50, deadline=None)
def test_native_verdicts_and_state_equal_the_python_verifiers(seq, max_nodes) -> None:
    py = SignedRootVerifier(TAG, ttl=20.0, max_nodes=max_nodes)
    with native.use("native"):
        nat = root_verifier(TAG, ttl=20.0, max_nodes=max_nodes)
    assert is_native(nat) if native.NATIVE is not None else True
    for who, args, now in seq:
        assert outcome(py, KEYS[who], args, now) == outcome(nat, KEYS[who], args, now), args[2:4]
        assert state(py) == state(nat)


@requires_native
def test_the_keyword_api_and_odd_arguments_agree() -> None:
    leaves = [b"a", b"b", b"c"]
    root, paths = merkle_batch(leaves)
    sig = KEYS[0].sign(signed_root(TAG, root, 3))
    with native.use("native"):
        nat = root_verifier(TAG, ttl=5.0)
    py = SignedRootVerifier(TAG, ttl=5.0)
    pk = KEYS[0].public
    for v in (py, nat):  # a path as a list of hashes, or packed
        assert v.verify(pk, b"a", sig, now=1.0, index=0, size=3, path=list(paths[0])) == root
        assert v.verify(pk, b"b", sig, now=1.0, index=1, size=3, path=pack_path(paths[1])) == root
    odd: list[tuple[Any, ...]] = [
        (b"a", "sig", 0, 3, b""),  # a signature that is not bytes
        (b"a", sig, True, 3, pack_path(paths[0])),  # a bool index
        (b"a", sig, 0, 2**80, pack_path(paths[0])),  # a size beyond any batch
        (b"a", sig, 0, 3, pack_path(paths[0]) + b"x"),  # not whole hashes
    ]
    for args in odd:
        for v in (py, nat):
            with pytest.raises(InvalidToken):
                v.verify_packed(pk, args[0], args[1], 1.0, args[2], args[3], args[4])
    with pytest.raises(InvalidToken):
        nat.verify(pk, b"a", sig, now=1.0, index=0, size=3, path=[b"short"])
    assert state(py) == state(nat)


def test_root_verifier_follows_the_backend_and_checks_its_limits() -> None:
    with native.use("python"):
        assert type(root_verifier(TAG, ttl=1.0)) is SignedRootVerifier
    with pytest.raises(ValidationError):
        root_verifier(TAG, ttl=1.0, capacity=0)
    with pytest.raises(ValidationError):
        root_verifier(TAG, ttl=1.0, max_nodes=-1)
