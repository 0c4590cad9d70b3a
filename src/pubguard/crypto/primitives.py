"""Hash, keyed hash, HKDF and the AES-based PRF.

eventguard.txt §3.2 and psguard.txt §3.1 write ``H`` for a one-way hash and ``KH_k(x)`` for a
keyed hash; here ``H`` = SHA-256 and ``KH`` = HMAC-SHA256 (ARCHITECTURE.md, modern choices:
MD5/SHA-1/HMAC-MD5 are broken).

``prf_aes_blocks`` evaluates AES-128/256 in ECB mode over many 16-byte blocks in one cipher
call. Used as ``F_T(r)`` for randomized tokens ``<r, F_T(r)>`` (psguard.txt §4.1): a broker
evaluates one subscription token over every nonce of a micro-batch in a single call. ECB is
correct here: each block is an independent PRF evaluation on a fresh random nonce.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from pubguard.crypto.secret import SecretBytes, raw

__all__ = ["DIGEST_SIZE", "H", "KH", "hkdf", "prf_aes_blocks", "KH_verify"]

DIGEST_SIZE = 32


def H(data: bytes) -> bytes:  # noqa: N802 - the papers' name
    """SHA-256."""
    return hashlib.sha256(data).digest()


def KH(key: bytes | SecretBytes, data: bytes) -> bytes:  # noqa: N802 - the papers' name
    """HMAC-SHA256 keyed hash ``KH_k(x)``."""
    return hmac.new(raw(key), data, hashlib.sha256).digest()


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
        raise ValueError("PRF input must be a whole number of 16-byte blocks")
    enc = Cipher(algorithms.AES(k), modes.ECB()).encryptor()  # noqa: S305 - independent PRF blocks
    return enc.update(blocks) + enc.finalize()
