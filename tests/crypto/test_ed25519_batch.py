"""Ed25519 batch verification gives, per signature, pyca/cryptography's verdict.

Differential: batches mixing valid, forged, tampered, wrong-key and non-canonical signatures
(s + L, non-canonical encodings of R and A, small-order keys) through the native batch and
through pyca alone (RFC 8032 §5.1.7; the cases are listed in native/src/ed25519.rs).
"""

from __future__ import annotations

import importlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import SigningKey, VerifyKey
from pubguard.crypto.ed25519_batch import verify_batch
from tests.native_backends import requires_native

L = 2**252 + 27742317777372353535851937790883648493
P = 2**255 - 19
KEYS = [SigningKey.from_seed(bytes([i]) * 32) for i in range(3)]
IDENTITY = (1).to_bytes(32, "little")
#: the identity and the order-2 point (0, -1) under encodings OpenSSL rejects or accepts
ODD_POINTS = [
    IDENTITY,
    (P + 1).to_bytes(32, "little"),  # y = 1 + p: non-canonical identity
    (1 | 1 << 255).to_bytes(32, "little"),  # x = 0 with the sign bit: non-canonical
    (P - 1).to_bytes(32, "little"),  # (0, -1), order 2
    (P - 1 | 1 << 255).to_bytes(32, "little"),
]


def _mutate(kind: str, i: int, msg: bytes, data: st.DataObject) -> tuple[Any, bytes, bytes]:
    sk = KEYS[i % len(KEYS)]
    sig = sk.sign(msg)
    if kind == "valid":
        return sk.public, sig, msg
    if kind == "forged":
        return sk.public, data.draw(st.binary(min_size=64, max_size=64)), msg
    if kind == "tampered_msg":
        return sk.public, sig, msg + b"!"
    if kind == "tampered_sig":
        bit = data.draw(st.integers(0, 511))
        return (
            sk.public,
            bytes(b ^ (1 << (bit % 8) if j == bit // 8 else 0) for j, b in enumerate(sig)),
            msg,
        )
    if kind == "wrong_key":
        return KEYS[(i + 1) % len(KEYS)].public, sig, msg
    if kind == "s_plus_L":  # the same signature with a non-canonical s
        s = int.from_bytes(sig[32:], "little") + L
        return sk.public, sig[:32] + s.to_bytes(32, "little"), msg
    if kind == "short":
        return sk.public, sig[:63], msg
    # small-order or non-canonically encoded A and R: (R, s = 0) verifies under A = identity
    a, r = data.draw(st.sampled_from(ODD_POINTS)), data.draw(st.sampled_from(ODD_POINTS))
    return a, r + bytes(32), msg


KINDS = [
    "valid",
    "forged",
    "tampered_msg",
    "tampered_sig",
    "wrong_key",
    "s_plus_L",
    "short",
    "odd_points",
]


@requires_native
@settings(max_examples=25, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS + ["valid"] * 4), min_size=1, max_size=12),
    data=st.data(),
)
def test_verdicts_equal_pycas(kinds: list[str], data: st.DataObject) -> None:
    items = [_mutate(k, i, bytes([i]) * (i + 1), data) for i, k in enumerate(kinds)]
    with native.use("python"):
        ref = verify_batch(items)
    with native.use("native"):
        got = verify_batch(items, batch_min=1)
    assert got == ref
    for (k, s, m), v in zip(items, ref, strict=True):  # the reference is pyca's own verdict
        try:
            ok = (k if isinstance(k, VerifyKey) else VerifyKey.from_bytes(k)).is_valid(s, m)
        except Exception:
            ok = False
        assert v == ok


@requires_native
def test_all_valid_batch_and_one_forgery() -> None:
    items = [(KEYS[i % 3].public, KEYS[i % 3].sign(b"m%d" % i), b"m%d" % i) for i in range(16)]
    with native.use("native"):
        assert verify_batch(items) == [True] * 16
        items[7] = (items[7][0], items[7][1], b"other")
        assert verify_batch(items) == [True] * 7 + [False] + [True] * 8


def test_python_backend_is_pyca() -> None:
    sk = KEYS[0]
    with native.use("python"):
        assert verify_batch(
            [(sk.public, sk.sign(b"a"), b"a"), (sk.public, sk.sign(b"a"), b"b")]
        ) == [True, False]


def _single(pk: bytes, sig: bytes, msg: bytes) -> bool:
    """The native lone verification (``ed25519.rs`` ``single``), whatever backend is active."""
    ok: bool = importlib.import_module("pubguard._native").ed25519_verify_single(pk, sig, msg)
    return ok


def _pk_bytes(k: Any) -> bytes:
    return k.to_bytes() if isinstance(k, VerifyKey) else bytes(k)


def _pyca(k: Any, s: bytes, m: bytes) -> bool:
    try:
        return (k if isinstance(k, VerifyKey) else VerifyKey.from_bytes(k)).is_valid(s, m)
    except Exception:
        return False


@requires_native
@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(KINDS), i=st.integers(0, 5), data=st.data())
def test_a_lone_native_verification_never_accepts_what_pyca_rejects(
    kind: str, i: int, data: st.DataObject
) -> None:
    """The guards' lone signatures (a Merkle root, a run's only one) are checked with
    ``ed25519-dalek`` first: it may leave a signature to pyca, but what it accepts pyca
    accepts, and every valid signature with canonical encodings it accepts itself."""
    k, s, m = _mutate(kind, i, bytes([i]) * (i + 1), data)
    got = _single(_pk_bytes(k), s, m)
    ref = _pyca(k, s, m)
    if got:
        assert ref
    if kind == "valid":
        assert got and ref


@requires_native
def test_a_lone_verification_of_small_order_points_follows_pyca() -> None:
    """(R, s = 0) under a small-order or non-canonical A: OpenSSL's verdict, whichever it is
    (the batch's torsion cases do not arise for a single equation)."""
    for a in ODD_POINTS:
        for r in ODD_POINTS:
            if _single(a, r + bytes(32), b"m"):
                assert _pyca(a, r + bytes(32), b"m")
