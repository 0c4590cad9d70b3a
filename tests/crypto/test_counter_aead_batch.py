"""The counter-nonce AEAD batches (``crypto/counter_aead.py``: ``seal_batch`` / ``open_batch``,
hermes-encrypted-access-control.txt §3.2, §3.5) on both backends, against pyca's ``AESGCM``
under the nonce ``0x00000000 || counter``: the same ciphertexts, the same plaintexts, None
for everything that fails to open, and the reference's typed errors for what a seal refuses."""

from __future__ import annotations

import pickle
import struct

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto.counter_aead import COUNTER_MAX, CounterAead, open_batch, seal_batch
from pubguard.errors import ValidationError
from tests.native_backends import BACKENDS, requires_native

KEYS = [bytes([i]) * 32 for i in range(3)]

items_st = st.lists(
    st.tuples(
        st.integers(0, len(KEYS) - 1),
        st.integers(0, COUNTER_MAX),
        st.binary(max_size=80),
        st.binary(min_size=1, max_size=40),
    ),
    max_size=12,
)


def _nonce(n: int) -> bytes:
    return struct.pack(">IQ", 0, n)


@pytest.mark.parametrize("which", BACKENDS)
@given(items=items_st, flip=st.integers(0, 11))
def test_the_batches_agree_with_pycas_aesgcm(
    which: native.Backend, items: list[tuple[int, int, bytes, bytes]], flip: int
) -> None:
    with native.use(which):
        _agree(items, flip)


def _agree(items: list[tuple[int, int, bytes, bytes]], flip: int) -> None:
    ciphers = [CounterAead(k) for k in KEYS]
    sealed = seal_batch([(ciphers[k], n, pt, aad) for k, n, pt, aad in items])
    want = [AESGCM(KEYS[k]).encrypt(_nonce(n), pt, aad) for k, n, pt, aad in items]
    assert sealed == want
    # open them back, one tampered (a flipped bit), one under the wrong key, one skipped
    jobs: list[tuple[CounterAead, int, bytes, bytes] | None] = [
        (ciphers[k], n, ct, aad) for (k, n, _, aad), ct in zip(items, sealed, strict=True)
    ]
    expect: list[bytes | None] = [pt for _, _, pt, _ in items]
    if jobs:
        i = flip % len(jobs)
        c, n, ct, aad = jobs[i]  # type: ignore[misc]
        jobs[i] = (c, n, ct[:-1] + bytes([ct[-1] ^ 1]), aad)
        expect[i] = None
        j = (flip + 1) % len(jobs)
        if j != i:
            _, n, ct, aad = jobs[j]  # type: ignore[misc]
            other = ciphers[(items[j][0] + 1) % len(KEYS)]  # the wrong key
            jobs[j] = (other, n, ct, aad)
            expect[j] = None
    jobs.append(None)
    expect.append(None)
    assert open_batch(jobs) == expect


@pytest.mark.parametrize("counter", [-1, COUNTER_MAX + 1, True, 1.0])
def test_a_counter_out_of_range_is_the_references_typed_error(
    backend: str, counter: object
) -> None:
    c = CounterAead(KEYS[0])
    with pytest.raises(ValidationError):
        seal_batch([(c, counter, b"x", b"aad")])  # type: ignore[list-item]
    assert open_batch([(c, counter, b"y" * 20, b"aad")]) == [None]  # type: ignore[list-item]


def test_empty_associated_data_and_short_blobs(backend: str) -> None:
    c = CounterAead(KEYS[1])
    with pytest.raises(ValidationError):
        seal_batch([(c, 1, b"x", b"")])
    assert open_batch([(c, 1, b"short", b"aad")]) == [None]


@requires_native
def test_a_cipher_made_on_the_python_backend_still_seals_natively_batched() -> None:
    """A ``CounterAead`` built while the Python backend was active has no native key: the
    batch falls back to the reference, with the same result."""
    with native.use("python"):
        c = CounterAead(KEYS[2])
    assert c.gcm is None
    with native.use("native"):
        d = CounterAead(KEYS[2])
        assert seal_batch([(c, 7, b"pt", b"a")]) == seal_batch([(d, 7, b"pt", b"a")])
        assert repr(d.gcm) == "GcmKey(<secret>)"
        with pytest.raises(TypeError):
            pickle.dumps(d.gcm)
