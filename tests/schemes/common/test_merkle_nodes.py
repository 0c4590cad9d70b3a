"""The authenticated-node cache of SignedRootVerifier: a later leaf of a verified batch is
hashed only up to the first authenticated node, with the outcome of the full recomputation
(a fresh verifier with no cache), and the cache is bounded and expires with its root."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.errors import InvalidToken
from pubguard.schemes.common.guards import SignedRootVerifier
from pubguard.schemes.common.merkle import merkle_batch, pack_path, signed_root

SK = SigningKey.from_seed(b"s" * 32)
TAG = b"T"


def batch(n: int, salt: bytes = b"") -> tuple[list[bytes], bytes, list[bytes]]:
    leaves = [b"leaf%d" % i + salt for i in range(n)]
    root, paths = merkle_batch(leaves)
    return leaves, SK.sign(signed_root(TAG, root, n)), [pack_path(p) for p in paths]


def outcome(v: SignedRootVerifier, leaf: bytes, sig: bytes, i: object, n: object, path: object):
    try:
        return v.verify(SK.public, leaf, sig, now=1.0, index=i, size=n, path=path)  # type: ignore[arg-type]
    except InvalidToken:
        return "forged"


def flip(b: bytes, at: int) -> bytes:
    return b[:at] + bytes([b[at] ^ 1]) + b[at + 1 :]


@st.composite
def messages(draw: st.DrawFn):
    n = draw(st.integers(1, 40))
    leaves, sig, paths = batch(n)
    order = draw(st.permutations(range(n)))
    out = []
    for i in order:
        leaf, idx, size, path, s = leaves[i], i, n, paths[i], sig
        match draw(st.sampled_from(["ok", "ok", "leaf", "index", "size", "path", "cut", "sig"])):
            case "leaf":
                leaf = leaf + b"!"
            case "index":
                idx = draw(st.integers(0, n))
            case "size":
                size = draw(st.integers(1, n + 2))
            case "path" if path:
                path = flip(path, draw(st.integers(0, len(path) - 1)))
            case "cut" if path:
                path = path[:-32] if draw(st.booleans()) else path + path[:32]
            case "sig":
                s = flip(sig, 3)
        out.append((leaf, s, idx, size, path))
    return out


@given(messages(), st.integers(0, 200))
@settings(max_examples=80, deadline=None)
def test_cached_verdicts_equal_a_fresh_verifiers(msgs, max_nodes):
    cached = SignedRootVerifier(TAG, ttl=10.0, max_nodes=max_nodes)
    for m in msgs:
        fresh = SignedRootVerifier(TAG, ttl=10.0, max_nodes=0)
        assert outcome(cached, *m) == outcome(fresh, *m), m[2:4]
    assert cached.cached_nodes <= max_nodes


def test_a_batch_costs_one_signature_and_about_two_hashes_per_leaf():
    leaves, sig, paths = batch(64)
    v = SignedRootVerifier(TAG, ttl=10.0)
    roots = {
        v.verify(SK.public, x, sig, now=1.0, index=i, size=64, path=paths[i])
        for i, x in enumerate(leaves)
    }
    assert len(roots) == 1 and v.verifications == 1
    assert v.cached_trees == 1 and v.cached_nodes == 2 * 64 - 1  # every node of the tree


def test_a_tampered_leaf_of_a_verified_batch_is_still_forged():
    leaves, sig, paths = batch(16)
    v = SignedRootVerifier(TAG, ttl=10.0)
    for i in range(16):
        v.verify(SK.public, leaves[i], sig, now=1.0, index=i, size=16, path=paths[i])
    for i in range(16):  # every node of the tree is now authenticated
        with pytest.raises(InvalidToken):
            v.verify(SK.public, leaves[i] + b"x", sig, now=1.0, index=i, size=16, path=paths[i])
        with pytest.raises(InvalidToken):  # another position: the leaf hash commits to it
            v.verify(SK.public, leaves[i], sig, now=1.0, index=i ^ 1, size=16, path=paths[i])
        with pytest.raises(InvalidToken):  # another size: the signature is on 16
            v.verify(SK.public, leaves[i], sig, now=1.0, index=i, size=17, path=paths[i])
        with pytest.raises(InvalidToken):  # a swapped sibling above the leaf
            v.verify(
                SK.public,
                leaves[i],
                sig,
                now=1.0,
                index=i,
                size=16,
                path=paths[i][:32] + paths[i ^ 2][32:64] + paths[i][64:],
            )
    with pytest.raises(InvalidToken):  # another key with the same signature bytes
        v.verify(SigningKey.generate().public, leaves[0], sig, now=1.0, size=16, path=paths[0])
    assert v.verifications == 2  # the batch's, then the other key's (which failed)


def test_the_node_cache_is_bounded_and_expires_with_its_root():
    v = SignedRootVerifier(TAG, ttl=10.0, max_nodes=100)
    for b in range(5):
        leaves, sig, paths = batch(32, salt=b"%d" % b)
        for i in range(32):
            v.verify(SK.public, leaves[i], sig, now=1.0 + b, index=i, size=32, path=paths[i])
        assert v.cached_nodes <= 100
    assert v.cached_trees == 1  # 64 nodes a tree: the older ones were dropped
    assert v.verifications == 5
    leaves, sig, paths = batch(32, salt=b"4")
    v.verify(SK.public, leaves[0], sig, now=30.0, size=32, path=paths[0])  # expired: again
    assert v.verifications == 6
    leaves, sig, paths = batch(8, salt=b"new")
    v.verify(SK.public, leaves[0], sig, now=50.0, size=8, path=paths[0])
    assert v.cached_trees == 1  # the expired tree went when a new one came


def test_a_tree_too_large_for_the_budget_falls_back_to_the_root_cache():
    leaves, sig, paths = batch(64)
    v = SignedRootVerifier(TAG, ttl=10.0, max_nodes=10)
    for i, x in enumerate(leaves):
        v.verify(SK.public, x, sig, now=1.0, index=i, size=64, path=paths[i])
    assert v.verifications == 1 and v.cached_nodes == 0
    with pytest.raises(InvalidToken):
        v.verify(SK.public, leaves[3], flip(sig, 0), now=1.0, index=3, size=64, path=paths[3])


def test_a_root_cached_under_one_signature_does_not_pass_another():
    leaves, sig, paths = batch(4)
    v = SignedRootVerifier(TAG, ttl=10.0, max_nodes=0)
    v.verify(SK.public, leaves[0], sig, now=1.0, index=0, size=4, path=paths[0])
    with pytest.raises(InvalidToken):
        v.verify(SK.public, leaves[1], flip(sig, 5), now=1.0, index=1, size=4, path=paths[1])


def test_paths_as_hash_lists_still_work():
    leaves, sig, _ = batch(5)
    root, paths = merkle_batch(leaves)
    v = SignedRootVerifier(TAG, ttl=10.0)
    for i, x in enumerate(leaves):
        assert v.verify(SK.public, x, sig, now=1.0, index=i, size=5, path=paths[i]) == root
    with pytest.raises(InvalidToken):
        v.verify(SK.public, leaves[0], sig, now=1.0, index=0, size=5, path=[b"x" * 31])
