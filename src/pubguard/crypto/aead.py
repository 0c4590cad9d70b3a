"""Authenticated encryption with associated data.

AES-GCM is the default (ARCHITECTURE.md, modern choices: replaces the papers' AES-CBC + MAC and
AES-EAX); AES-OCB3 and ChaCha20-Poly1305 are selectable. Unlike libraries that default to empty
associated data, ``seal`` *requires* it: every ciphertext is bound to its event type, attribute
and epoch (hermes-encrypted-access-control.txt §4.2 per-attribute encryption), so a ciphertext
cut from one attribute or epoch fails to open in another. Every failure raises the same opaque
:class:`~pubguard.errors.InvalidToken`.

Wire form: ``alg_id (1 byte) || nonce || ciphertext+tag``.
"""

from __future__ import annotations

import random as _random
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESOCB3, ChaCha20Poly1305

from pubguard.crypto.primitives import hkdf
from pubguard.crypto.secret import SecretBytes, random_bytes, raw
from pubguard.errors import InvalidToken, ValidationError

__all__ = ["ALGORITHMS", "DEFAULT_AEAD", "aad_for", "open_", "seal"]

# name: (id byte, key length, nonce length, class)
ALGORITHMS: dict[str, tuple[int, int, int, type]] = {
    "AES-128-GCM": (1, 16, 12, AESGCM),
    "AES-256-GCM": (2, 32, 12, AESGCM),
    "AES-256-OCB3": (3, 32, 12, AESOCB3),
    "ChaCha20-Poly1305": (4, 32, 12, ChaCha20Poly1305),
}
_BY_ID = {v[0]: (k, *v[1:]) for k, v in ALGORITHMS.items()}
DEFAULT_AEAD = "AES-256-GCM"


def aad_for(type_id: bytes | str, attribute: str = "", epoch: int = 0, *extra: bytes) -> bytes:
    """Canonical associated data: length-prefixed type id, attribute name, epoch, extras."""
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 2**64:
        raise ValidationError(f"epoch must be an integer in [0, 2**64), got {epoch!r}")
    t = type_id.encode() if isinstance(type_id, str) else type_id
    parts = [t, attribute.encode(), struct.pack(">Q", epoch), *extra]
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


def _cipher_key(key: bytes | SecretBytes, alg: str, key_len: int) -> bytes:
    k = raw(key)
    if len(k) == key_len:
        return k
    # derive an algorithm-specific key from a longer/shorter key-tree key
    return hkdf(k, info=b"pubguard-aead:" + alg.encode(), length=key_len)


def seal(
    key: bytes | SecretBytes,
    plaintext: bytes,
    *,
    aad: bytes,
    alg: str = DEFAULT_AEAD,
    rng: _random.Random | None = None,
) -> bytes:
    if not aad:
        raise ValidationError(
            "associated data is required: bind the ciphertext to its type/attribute/epoch"
        )
    try:
        alg_id, key_len, nonce_len, cls = ALGORITHMS[alg]
    except KeyError:
        raise ValidationError(
            f"unknown AEAD algorithm {alg!r} (valid: {', '.join(ALGORITHMS)})"
        ) from None
    nonce = random_bytes(nonce_len, rng)
    ct = cls(_cipher_key(key, alg, key_len)).encrypt(nonce, plaintext, aad)
    return bytes([alg_id]) + nonce + ct


def open_(key: bytes | SecretBytes, blob: bytes, *, aad: bytes) -> bytes:
    """Open a ``seal``ed blob; any failure (wrong key, AAD, tampering, bad form) is InvalidToken."""
    if not blob or blob[0] not in _BY_ID:
        raise InvalidToken()
    alg, key_len, nonce_len, cls = _BY_ID[blob[0]]
    nonce, ct = blob[1 : 1 + nonce_len], blob[1 + nonce_len :]
    if len(nonce) != nonce_len or len(ct) < 16:
        raise InvalidToken()
    try:
        return bytes(cls(_cipher_key(key, alg, key_len)).decrypt(nonce, ct, aad))
    except InvalidTag:
        raise InvalidToken() from None
