"""Ed25519 signatures (replacing the papers' ElGamal-512 / RSA-1024, ARCHITECTURE.md) and
X25519 + HKDF + AES-GCM key wrapping to a recipient public key (HPKE-style; replaces RSA key
transport in narada-secure-delivery.txt §IV-E)."""

from __future__ import annotations

import random as _random

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from pubguard.crypto.aead import open_, seal
from pubguard.crypto.primitives import hkdf
from pubguard.crypto.secret import random_bytes
from pubguard.errors import InvalidToken, ValidationError

__all__ = ["KemPrivateKey", "KemPublicKey", "SigningKey", "VerifyKey", "unwrap", "wrap"]

_RAW = serialization.Encoding.Raw
_RAWPUB = serialization.PublicFormat.Raw
_RAWPRIV = serialization.PrivateFormat.Raw
_NOENC = serialization.NoEncryption()


class VerifyKey:
    """An Ed25519 public key."""

    __slots__ = ("_k", "_raw")

    def __init__(self, key: Ed25519PublicKey) -> None:
        self._k = key
        self._raw = key.public_bytes(_RAW, _RAWPUB)

    @classmethod
    def from_bytes(cls, b: bytes) -> VerifyKey:
        try:
            return cls(Ed25519PublicKey.from_public_bytes(b))
        except ValueError:
            raise InvalidToken("invalid public key") from None

    def to_bytes(self) -> bytes:
        return self._raw

    def verify(self, signature: bytes, message: bytes) -> None:
        """Raise :class:`InvalidToken` unless ``signature`` is valid for ``message``."""
        try:
            self._k.verify(signature, message)
        except (InvalidSignature, ValueError, TypeError):
            raise InvalidToken() from None

    def is_valid(self, signature: bytes, message: bytes) -> bool:
        try:
            self.verify(signature, message)
        except InvalidToken:
            return False
        return True

    @property
    def cryptography_key(self) -> Ed25519PublicKey:
        return self._k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifyKey) and other._raw == self._raw

    def __hash__(self) -> int:
        return hash(self._raw)

    def __repr__(self) -> str:
        return f"VerifyKey({self._raw.hex()[:16]}...)"


class SigningKey:
    """An Ed25519 private key; its bytes never appear in repr."""

    __slots__ = ("_k",)

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._k = key

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """Deterministic key from a 32-byte seed (test vectors, derived service keys)."""
        return cls(
            Ed25519PrivateKey.from_private_bytes(hkdf(seed, info=b"pubguard-ed25519", length=32))
        )

    @classmethod
    def from_private_bytes(cls, b: bytes) -> SigningKey:
        try:
            return cls(Ed25519PrivateKey.from_private_bytes(b))
        except (ValueError, TypeError):
            raise ValidationError("an Ed25519 private key is 32 bytes") from None

    def private_bytes(self) -> bytes:
        return self._k.private_bytes(_RAW, _RAWPRIV, _NOENC)

    def sign(self, message: bytes) -> bytes:
        return self._k.sign(message)

    @property
    def public(self) -> VerifyKey:
        return VerifyKey(self._k.public_key())

    @property
    def cryptography_key(self) -> Ed25519PrivateKey:
        return self._k

    def __repr__(self) -> str:
        return f"SigningKey(public={self.public.to_bytes().hex()[:16]}...)"


class KemPublicKey:
    __slots__ = ("_k", "_raw")

    def __init__(self, key: X25519PublicKey) -> None:
        self._k = key
        self._raw = key.public_bytes(_RAW, _RAWPUB)

    @classmethod
    def from_bytes(cls, b: bytes) -> KemPublicKey:
        try:
            return cls(X25519PublicKey.from_public_bytes(b))
        except ValueError:
            raise InvalidToken("invalid public key") from None

    def to_bytes(self) -> bytes:
        return self._raw

    def __repr__(self) -> str:
        return f"KemPublicKey({self._raw.hex()[:16]}...)"


class KemPrivateKey:
    __slots__ = ("_k",)

    def __init__(self, key: X25519PrivateKey) -> None:
        self._k = key

    @classmethod
    def generate(cls) -> KemPrivateKey:
        return cls(X25519PrivateKey.generate())

    @classmethod
    def from_private_bytes(cls, b: bytes) -> KemPrivateKey:
        try:
            return cls(X25519PrivateKey.from_private_bytes(b))
        except (ValueError, TypeError):
            raise ValidationError("an X25519 private key is 32 bytes") from None

    def private_bytes(self) -> bytes:
        return self._k.private_bytes(_RAW, _RAWPRIV, _NOENC)

    @property
    def public(self) -> KemPublicKey:
        return KemPublicKey(self._k.public_key())

    def __repr__(self) -> str:
        return f"KemPrivateKey(public={self.public.to_bytes().hex()[:16]}...)"


def _wrap_key(shared: bytes, eph: bytes, recipient: bytes, info: bytes) -> bytes:
    return hkdf(shared, salt=eph + recipient, info=b"pubguard-wrap:" + info, length=32)


def wrap(
    recipient: KemPublicKey, plaintext: bytes, *, info: bytes, rng: _random.Random | None = None
) -> bytes:
    """Encrypt ``plaintext`` to ``recipient``: ``eph_pub(32) || AEAD(HKDF(X25519), pt, aad=info)``.

    The ephemeral key and nonce come from the OS CSPRNG, or from ``rng`` in deterministic
    tests and simulations."""
    eph = (
        X25519PrivateKey.generate()
        if rng is None
        else X25519PrivateKey.from_private_bytes(random_bytes(32, rng))
    )
    eph_pub = eph.public_key().public_bytes(_RAW, _RAWPUB)
    shared = eph.exchange(recipient._k)
    key = _wrap_key(shared, eph_pub, recipient.to_bytes(), info)
    return eph_pub + seal(key, plaintext, aad=b"pubguard-wrap:" + info, rng=rng)


def unwrap(private: KemPrivateKey, blob: bytes, *, info: bytes) -> bytes:
    if len(blob) < 33:
        raise InvalidToken()
    eph_pub = blob[:32]
    try:
        shared = private._k.exchange(X25519PublicKey.from_public_bytes(eph_pub))
    except ValueError:
        raise InvalidToken() from None
    key = _wrap_key(shared, eph_pub, private.public.to_bytes(), info)
    return open_(key, blob[32:], aad=b"pubguard-wrap:" + info)
