"""Secrets at rest the way the TLS identities' keys are kept: PKCS#8 PEM, ``0600``, encrypted
with a passphrase (``BestAvailableEncryption``).

- :func:`save_signing_key` / :func:`load_signing_key`: an Ed25519 publication key (a psguard
  publisher's, which its brokers know by its public half), encrypted iff a passphrase is given
  (as :func:`~pubguard.crypto.x509.issue_tls_identity` writes the identities' keys).
- :func:`save_secret` / :func:`load_secret`: a 32-byte master secret, always encrypted. It is
  stored as the seed of an Ed25519 private key in an encrypted PKCS#8 file, so the file is the
  same standard container as every other key of a deployment (``openssl pkey`` opens it with
  the passphrase) and no container format is invented here. :func:`load_secret` refuses a file
  that others may read (mode beyond ``0600``).

Every failure is a :class:`~pubguard.errors.ConfigError` naming the file, never its bytes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from pubguard.crypto.secret import SecretBytes, raw
from pubguard.crypto.signing import SigningKey
from pubguard.errors import ConfigError, ValidationError

__all__ = [
    "SECRET_SIZE",
    "load_secret",
    "load_signing_key",
    "save_secret",
    "save_signing_key",
]

#: bytes of a master secret kept in a file (an Ed25519 seed is 32 bytes)
SECRET_SIZE: Final = 32
_PEM = serialization.Encoding.PEM
_PKCS8 = serialization.PrivateFormat.PKCS8


def _write_0600(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (``0600`` from creation; replaced atomically if it exists)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _encryption(passphrase: bytes | None) -> serialization.KeySerializationEncryption:
    if passphrase is None:
        return serialization.NoEncryption()
    if not passphrase:
        raise ValidationError("empty passphrase")
    return serialization.BestAvailableEncryption(passphrase)


def _load(path: Path, passphrase: bytes | None, what: str) -> Ed25519PrivateKey:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror}", path=str(path)) from None
    encrypted = data.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    if encrypted and not passphrase:
        raise ConfigError(
            f"{path}: {what} is encrypted and no passphrase is set (PUBGUARD_TLS_PASSPHRASE)",
            path=str(path),
        )
    try:
        key = serialization.load_pem_private_key(data, password=passphrase if encrypted else None)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{path}: cannot open {what} (not a PKCS#8 key, or a wrong passphrase)",
            path=str(path),
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: {what} is not an Ed25519 key", path=str(path))
    return key


def save_signing_key(path: Path, key: SigningKey, passphrase: bytes | None) -> None:
    """Write ``key`` to ``path`` (PKCS#8 PEM, ``0600``; encrypted iff ``passphrase``)."""
    pem = key.cryptography_key.private_bytes(_PEM, _PKCS8, _encryption(passphrase))
    _write_0600(Path(path), pem)


def load_signing_key(path: Path, passphrase: bytes | None) -> SigningKey:
    """The key :func:`save_signing_key` wrote (ConfigError if it cannot be opened)."""
    return SigningKey(_load(Path(path), passphrase, "the publication key"))


def save_secret(path: Path, secret: SecretBytes | bytes, passphrase: bytes) -> None:
    """Write the 32-byte ``secret`` to ``path``, encrypted with ``passphrase`` (required)."""
    b = raw(secret)
    if len(b) != SECRET_SIZE:
        raise ValidationError(f"a master secret file holds {SECRET_SIZE} bytes, got {len(b)}")
    if not passphrase:
        raise ValidationError("a master secret is never written without a passphrase")
    key = Ed25519PrivateKey.from_private_bytes(b)
    _write_0600(Path(path), key.private_bytes(_PEM, _PKCS8, _encryption(passphrase)))


def load_secret(path: Path, passphrase: bytes | None) -> SecretBytes:
    """The secret :func:`save_secret` wrote. ConfigError if the file is readable by others
    than its owner, not encrypted, or cannot be opened with ``passphrase``."""
    p = Path(path)
    try:
        mode = stat.S_IMODE(p.stat().st_mode)
    except OSError as exc:
        raise ConfigError(
            f"{p}: cannot read the master secret: {exc.strerror}", path=str(p)
        ) from None
    if mode & 0o077:
        raise ConfigError(
            f"{p}: the master secret file is mode {mode:04o}; it must be 0600", path=str(p)
        )
    with p.open("rb") as fh:
        if not fh.read(64).startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----"):
            raise ConfigError(f"{p}: the master secret file is not encrypted", path=str(p))
    key = _load(p, passphrase, "the master secret")
    seed = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return SecretBytes(seed)
