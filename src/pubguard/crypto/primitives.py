"""Hash, keyed hash, HKDF and the AES-based PRF.

eventguard.txt §3.2 and psguard.txt §3.1 write ``H`` for a one-way hash and ``KH_k(x)`` for a
keyed hash; here ``H`` = SHA-256 and ``KH`` = HMAC-SHA256 (ARCHITECTURE.md, modern choices:
MD5/SHA-1/HMAC-MD5 are broken).

``prf_aes_blocks`` evaluates AES-128/256 in ECB mode over many 16-byte blocks in one cipher
call. Used as ``F_T(r)`` for randomized tokens ``<r, F_T(r)>`` (psguard.txt §4.1): a broker
evaluates one subscription token over every nonce of a micro-batch in a single call. ECB is
correct here: each block is an independent PRF evaluation on a fresh random nonce.
``AesPrf(k)`` is the same function for a key used many times (a broker's subscription tokens):
it keeps one ECB encryption context and feeds it whole blocks, which ECB (no chaining, no
buffered partial block) maps exactly as a fresh context would. Setting up a context costs
about 6 us in ``cryptography``, one 16-byte block through a kept one about 0.3 us.

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
from collections.abc import Callable

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
    "AesPrf",
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


def _prf_key(key: bytes | SecretBytes) -> bytes:
    k = raw(key)
    return k if len(k) in (16, 32) else H(k)[:16]


def prf_aes_blocks(key: bytes | SecretBytes, blocks: bytes) -> bytes:
    """AES_k applied independently to each 16-byte block of ``blocks`` (one cipher call)."""
    k = _prf_key(key)
    if len(blocks) % 16:
        raise ValidationError("PRF input must be a whole number of 16-byte blocks")
    enc = Cipher(algorithms.AES(k), modes.ECB()).encryptor()  # noqa: S305 - independent PRF blocks
    return enc.update(blocks) + enc.finalize()


class AesPrf:
    """``prf_aes_blocks`` for one fixed key, with its AES context set up once.

    ``AesPrf(k)(blocks) == prf_aes_blocks(k, blocks)``. ECB keeps no state between whole
    blocks, so one long-lived encryption context (never finalised) is reused for every call;
    inputs that are not whole blocks are refused before they reach it, so it can never hold a
    partial block. ``unchecked`` is the context's own update for a hot loop whose inputs are
    already known to be whole blocks (a broker's parsed 16-byte nonces); it must never be fed
    anything else. Not thread-safe (one per matcher); ``repr`` shows nothing of the key."""

    __slots__ = ("unchecked",)

    def __init__(self, key: bytes | SecretBytes) -> None:
        enc = Cipher(algorithms.AES(_prf_key(key)), modes.ECB()).encryptor()  # noqa: S305
        self.unchecked: Callable[[bytes], bytes] = enc.update

    def __call__(self, blocks: bytes) -> bytes:
        if len(blocks) % 16:
            raise ValidationError("PRF input must be a whole number of 16-byte blocks")
        return self.unchecked(blocks)

    def __repr__(self) -> str:
        return "AesPrf(<secret>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("AesPrf is not picklable; pickle the key instead")
