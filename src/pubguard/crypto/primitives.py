"""Hash, keyed hash, HKDF and the AES-based PRF.

eventguard.txt §3.2 and psguard.txt §3.1 write ``H`` for a one-way hash and ``KH_k(x)`` for a
keyed hash; here ``H`` = SHA-256 and ``KH`` = HMAC-SHA256 (ARCHITECTURE.md, modern choices:
MD5/SHA-1/HMAC-MD5 are broken).

``prf_aes_blocks`` evaluates AES-128/256 in ECB mode over many 16-byte blocks in one cipher
call. Used as ``F_T(r)`` for randomized tokens ``<r, F_T(r)>`` (psguard.txt §4.1): a broker
evaluates one subscription token over every nonce of a micro-batch in a single call. ECB is
correct here: each block is an independent PRF evaluation on a fresh random nonce.

Speed (psguard.txt §3.1 counts key generation and derivation in hash operations, so per-call
overhead matters): ``sha256_fast`` is CPython's built-in SHA-256 constructor, which for short
inputs avoids OpenSSL 3's per-call EVP set-up; it computes exactly ``hashlib.sha256``.
``KeyedHash(k)`` is ``KH_k`` with the HMAC inner and outer pad states precomputed once (RFC
2104 §4 "implementation note"), for keys used many times (the KDC/MS master, topic keys).
Tests check both against ``hashlib``/``hmac`` and the RFC 4231 vectors.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pubguard.crypto.secret import SecretBytes, raw
from pubguard.errors import ValidationError

__all__ = [
    "DIGEST_SIZE",
    "H",
    "KH",
    "KH_verify",
    "KeyedHash",
    "hkdf",
    "prf_aes_blocks",
    "sha256_fast",
]

DIGEST_SIZE = 32
_BLOCK = 64  # SHA-256 block size, for HMAC pads
_IPAD = bytes(b ^ 0x36 for b in range(256))  # RFC 2104 pads as byte translation tables
_OPAD = bytes(b ^ 0x5C for b in range(256))

try:  # CPython's own SHA-256 (3.12+: _sha2; 3.11: _sha256); same function as hashlib.sha256
    from _sha2 import sha256 as sha256_fast  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the interpreter version
    try:
        from _sha256 import sha256 as sha256_fast  # type: ignore[import-not-found,no-redef]
    except ImportError:
        sha256_fast = hashlib.sha256  # type: ignore[assignment]


def H(data: bytes) -> bytes:  # noqa: N802 - the papers' name
    """SHA-256."""
    return sha256_fast(data).digest()


def KH(key: bytes | SecretBytes, data: bytes) -> bytes:  # noqa: N802 - the papers' name
    """HMAC-SHA256 keyed hash ``KH_k(x)``."""
    return hmac.digest(raw(key), data, "sha256")


class KeyedHash:
    """``KH_k`` for a fixed key ``k``, with the HMAC pad states precomputed (RFC 2104 §4).

    ``KeyedHash(k)(x) == KH(k, x)``; about four times faster per call. Holds the key only as
    hash states; ``repr`` shows nothing of it.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes | SecretBytes) -> None:
        k = raw(key)
        if len(k) > _BLOCK:
            k = hashlib.sha256(k).digest()
        k = k.ljust(_BLOCK, b"\0")
        self._inner = sha256_fast(k.translate(_IPAD))
        self._outer = sha256_fast(k.translate(_OPAD))

    def __call__(self, data: bytes) -> bytes:
        i = self._inner.copy()
        i.update(data)
        o = self._outer.copy()
        o.update(i.digest())
        return o.digest()

    def __repr__(self) -> str:
        return "KeyedHash(<secret>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("KeyedHash is not picklable; pickle the SecretBytes key instead")


def KH_verify(key: bytes | SecretBytes, data: bytes, tag: bytes) -> bool:  # noqa: N802
    return hmac.compare_digest(KH(key, data), tag)


def hkdf(
    key: bytes | SecretBytes, *, info: bytes, length: int = 32, salt: bytes | None = None
) -> bytes:
    """HKDF-SHA256 (RFC 5869)."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(raw(key))


def prf_aes_blocks(key: bytes | SecretBytes, blocks: bytes) -> bytes:
    """AES_k applied independently to each 16-byte block of ``blocks`` (one cipher call)."""
    k = raw(key)
    if len(k) not in (16, 32):
        k = H(k)[:16]
    if len(blocks) % 16:
        raise ValidationError("PRF input must be a whole number of 16-byte blocks")
    enc = Cipher(algorithms.AES(k), modes.ECB()).encryptor()  # noqa: S305 - independent PRF blocks
    return enc.update(blocks) + enc.finalize()
