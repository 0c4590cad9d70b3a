"""Ed25519 batch verification: many (key, signature, message) triples in one call, with the
verdict per signature that pyca/cryptography (OpenSSL) gives it.

Theory of operation. RFC 8032 §5.1.7 verifies one signature with one double-scalar
multiplication; a batch checks one random linear combination of all the equations with one
multi-scalar multiplication, about half the cost per signature (``ed25519-dalek``'s
``verify_batch``, in ``pubguard._native``). When the combination fails, or a signature is one
the batch could judge differently from OpenSSL (non-canonical ``R`` or ``A``, a key outside the
prime-order subgroup, a malformed length), that signature is checked alone with pyca, so a
forged, tampered or wrong-key signature costs the batch its speed-up, never its verdict.
``native/src/ed25519.rs`` lists the cases and the one known disagreement (an ``R`` carrying a
small-order component, which only the signing key's holder can make).

Without the native backend (``PUBGUARD_NATIVE=0`` or not built) every signature is checked
alone with pyca: the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pubguard import native as nb
from pubguard.crypto.signing import VerifyKey
from pubguard.errors import InvalidToken

__all__ = ["BATCH_MIN", "verify_batch"]

#: Below this many signatures they are checked one by one with pyca. One is enough: a native
#: "batch" of one is a single ed25519-dalek verification, about half of OpenSSL's cost here
#: (``pubguard bench signatures``).
BATCH_MIN: Final = 1


def _one(key: VerifyKey | bytes, signature: bytes, message: bytes) -> bool:
    try:
        vk = key if isinstance(key, VerifyKey) else VerifyKey.from_bytes(key)
        vk.verify(signature, message)
    except InvalidToken:
        return False
    return True


def verify_batch(
    items: Sequence[tuple[VerifyKey | bytes, bytes, bytes]], *, batch_min: int = BATCH_MIN
) -> list[bool]:
    """``[key.is_valid(signature, message) for key, signature, message in items]``, the same
    verdicts computed with Ed25519 batch verification where the native backend is active."""
    n = nb.NATIVE
    if n is None or len(items) < batch_min:
        return [_one(k, s, m) for k, s, m in items]
    try:
        pks = [k.to_bytes() if isinstance(k, VerifyKey) else bytes(k) for k, _, _ in items]
        sigs = [bytes(s) for _, s, _ in items]
        msgs = [bytes(m) for _, _, m in items]
    except TypeError:  # not bytes-like: pyca's verdict (False), one by one
        return [_one(k, s, m) for k, s, m in items]
    ok: list[bool] = n.ed25519_verify_batch(pks, sigs, msgs)
    return [True if good else _one(k, s, m) for good, (k, s, m) in zip(ok, items, strict=True)]
