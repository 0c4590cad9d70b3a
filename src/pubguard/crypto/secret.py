"""``SecretBytes``: key material that never shows itself in a repr, log line or exception."""

from __future__ import annotations

import hashlib
import hmac
import os
import random as _random

__all__ = ["SecretBytes", "random_bytes"]


class SecretBytes:
    """Immutable secret bytes. ``repr``/``str`` show only the length and a short fingerprint
    (a domain-separated SHA-256 prefix, useless for recovering the key); ``reveal()`` is the
    one explicit way to get the bytes. Equality is constant-time."""

    __slots__ = ("_b",)
    _b: bytes

    def __init__(self, b: bytes | bytearray | memoryview | SecretBytes) -> None:
        if type(b) is bytes:  # fast path: key trees create many of these
            _set_b(self, b)
            return
        if isinstance(b, SecretBytes):
            b = b._b
        if not isinstance(b, bytes | bytearray | memoryview):
            raise TypeError("SecretBytes needs bytes")
        _set_b(self, bytes(b))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SecretBytes is immutable")

    def reveal(self) -> bytes:
        return self._b

    def __len__(self) -> int:
        return len(self._b)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(b"pubguard-fingerprint\x00" + self._b).hexdigest()[:8]

    def __repr__(self) -> str:
        return f"SecretBytes(len={len(self._b)}, fp={self.fingerprint})"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SecretBytes):
            return hmac.compare_digest(self._b, other._b)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __reduce__(self) -> tuple[type, tuple[bytes]]:  # picklable for Spark executors
        return (SecretBytes, (self._b,))


_set_b = SecretBytes.__dict__["_b"].__set__  # the slot's own setter


def random_bytes(n: int, rng: _random.Random | None = None) -> bytes:
    """``n`` random bytes: from the OS CSPRNG, or from ``rng`` in deterministic tests/sims."""
    if rng is None:
        return os.urandom(n)
    return rng.randbytes(n)


def raw(k: bytes | SecretBytes) -> bytes:
    return k.reveal() if isinstance(k, SecretBytes) else k
