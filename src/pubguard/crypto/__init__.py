"""Thin typed wrappers over ``cryptography``. The only layer that touches ``hazmat``."""

from pubguard.crypto.aead import ALGORITHMS, DEFAULT_AEAD, aad_for, open_, seal
from pubguard.crypto.primitives import (
    DIGEST_SIZE,
    KH,
    AesPrf,
    H,
    KeyedHash,
    KH_verify,
    hkdf,
    prf_aes_blocks,
    sha256_fast,
)
from pubguard.crypto.secret import SecretBytes, random_bytes
from pubguard.crypto.signing import KemPrivateKey, KemPublicKey, SigningKey, VerifyKey, unwrap, wrap

__all__ = [
    "ALGORITHMS",
    "AesPrf",
    "DEFAULT_AEAD",
    "DIGEST_SIZE",
    "KH",
    "H",
    "KH_verify",
    "KeyedHash",
    "KemPrivateKey",
    "KemPublicKey",
    "SecretBytes",
    "SigningKey",
    "VerifyKey",
    "aad_for",
    "hkdf",
    "open_",
    "prf_aes_blocks",
    "random_bytes",
    "seal",
    "sha256_fast",
    "unwrap",
    "wrap",
]
