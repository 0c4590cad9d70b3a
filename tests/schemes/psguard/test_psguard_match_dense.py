"""match_randomized's two comparison paths (one dense block for small batches, sorted tags for
large ones) agree with evaluating F_T(r) for every (token, event) pair, including repeated
nonces, events without tags and events with several tags."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import AesPrf, prf_aes_blocks
from pubguard.schemes.psguard import tokens
from pubguard.schemes.psguard.tokens import NONCE_BYTES, match_randomized, tok64


def reference(
    nonces: bytes, tags: list[tuple[int, ...]], toks: list[bytes]
) -> set[tuple[int, int]]:
    n = len(nonces) // NONCE_BYTES
    return {
        (e, i)
        for i, t in enumerate(toks)
        for e in range(n)
        if tok64(prf_aes_blocks(t, nonces[16 * e : 16 * e + 16])) in tags[e]
    }


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, ...]], list[bytes]]:
    toks = draw(st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=6, unique=True))
    n = draw(st.integers(1, 12))
    if draw(st.booleans()):
        nonces = draw(st.binary(min_size=16, max_size=16)) * n  # one nonce repeated
    else:
        nonces = b"".join(draw(st.binary(min_size=16, max_size=16)) for _ in range(n))
    tags = []
    for e in range(n):
        r = nonces[16 * e : 16 * e + 16]
        picks = draw(st.lists(st.one_of(st.sampled_from(toks), st.none()), max_size=4))
        tags.append(
            tuple(
                tok64(prf_aes_blocks(t, r))
                if t is not None
                else draw(st.integers(-(2**63), 2**63 - 1))
                for t in picks
            )
        )
    return nonces, tags, toks


@settings(max_examples=60, deadline=None)
@given(batches(), st.booleans())
def test_dense_and_sorted_paths_agree_with_the_reference(
    batch: tuple[bytes, list[tuple[int, ...]], list[bytes]], kept: bool
) -> None:
    nonces, tags, toks = batch
    want = reference(nonces, tags, toks)
    prfs = [AesPrf(t).unchecked for t in toks] if kept else None
    dense = match_randomized(nonces, tags, toks if not kept else (), prfs=prfs)
    assert len(dense) == len(set(dense)) and set(dense) == want
    old = tokens.DENSE_COMPARE_MAX
    tokens.DENSE_COMPARE_MAX = 0  # force the sorted path
    try:
        srt = match_randomized(nonces, tags, toks, chunk=2)
    finally:
        tokens.DENSE_COMPARE_MAX = old
    assert len(srt) == len(set(srt)) and set(srt) == want
    assert dense == sorted(dense, key=lambda p: (p[1], p[0]))  # by token, then event


@pytest.mark.parametrize("n", [0, 1])
def test_nothing_to_match(n: int) -> None:
    assert match_randomized(b"\0" * 16 * n, [()] * n, [b"k" * 16]) == []
    assert match_randomized(b"\0" * 16, [(1,)], []) == []


def test_tags_may_be_numpy_arrays() -> None:
    """The Spark pipeline hands each event's tags over as a numpy array."""
    import numpy as np

    toks = [b"a" * 16, b"b" * 16]
    nonces = b"".join(bytes([i]) * 16 for i in range(3))
    tags = [
        (tok64(prf_aes_blocks(toks[0], nonces[:16])), 7),
        (),
        (tok64(prf_aes_blocks(toks[1], nonces[32:])),),
    ]
    want = reference(nonces, tags, toks)
    arrays = [np.asarray(t, dtype=np.int64) for t in tags]
    assert set(match_randomized(nonces, arrays, toks)) == want == {(0, 0), (2, 1)}
    one = [np.asarray(t[:1], dtype=np.int64) for t in (tags[0], tags[2])]
    two = nonces[:16] + nonces[32:]
    assert set(match_randomized(two, one, toks)) == {(0, 0), (1, 1)}
