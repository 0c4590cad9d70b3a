"""AEAD under caller-chosen, counter-based nonces (hermes-encrypted-access-control.txt §3.5).

Theory of operation
-------------------
Hermes seals events and attributes at the publisher hosting broker with AES-EAX; its nonce is
the 64-bit millisecond timestamp followed by the broker's public key, and the broker keeps its
timestamps strictly increasing (§3.5). That nonce does not fit the 96-bit nonce of AES-GCM, so
the recipe here splits the nonce's two jobs:

- the *broker identity* goes into the key: every broker seals under its own subkey
  ``HKDF(K, "pubguard-hermes-subkey" || broker id)`` of the group key ``K``
  (:func:`broker_subkey`), so two brokers never share a (key, nonce) pair;
- the *monotonic timestamp* becomes a strictly increasing 64-bit counter, the nonce being
  ``0x00000000 || counter`` (big-endian). The caller owns the counter and must never reuse a
  value under one subkey (``pubguard.schemes.hermes.nonces.NonceCounter`` persists it).

:class:`CounterAead` keeps one cipher context per key, so a run of attributes or a micro-batch
of events pays the key schedule once (the paper's "initialisation of the encryption
algorithm", §3.2, is what made its attribute encryption slow). Every failure to open is the
same opaque :class:`~pubguard.errors.InvalidToken`; associated data is mandatory, as in
:mod:`pubguard.crypto.aead`.
"""

from __future__ import annotations

import struct
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pubguard import native as nb
from pubguard.crypto.primitives import hkdf
from pubguard.crypto.secret import SecretBytes, raw
from pubguard.errors import InvalidToken, ValidationError

__all__ = [
    "COUNTER_MAX",
    "NONCE_BYTES",
    "TAG_BYTES",
    "CounterAead",
    "broker_subkey",
    "nonce_of",
    "open_batch",
    "open_each",
    "seal_batch",
    "seal_each",
]

NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
#: the counter is 64 bits (the paper's 64-bit millisecond timestamp)
COUNTER_MAX: Final = 2**64 - 1
_NONCE: Final = struct.Struct(">IQ")


def broker_subkey(key: bytes | SecretBytes, broker_id: str) -> SecretBytes:
    """The per-broker AES-256 subkey of a group key: ``HKDF(K, broker id)`` (see the module
    docstring): the broker identity the paper puts in the nonce, moved into the key."""
    if not broker_id:
        raise ValidationError("broker id must not be empty")
    return SecretBytes(hkdf(key, info=b"pubguard-hermes-subkey\x00" + broker_id.encode()))


def nonce_of(counter: int) -> bytes:
    """The 96-bit nonce of one counter value."""
    if isinstance(counter, bool) or not isinstance(counter, int) or not 0 <= counter <= COUNTER_MAX:
        raise ValidationError("nonce counter must be an integer in [0, 2**64)")
    return _NONCE.pack(0, counter)


class CounterAead:
    """AES-256-GCM under one key, nonces from counters. Not thread-safe; ``repr`` hides the key.
    ``gcm``: the same key's schedule in the native extension (``pubguard._native.GcmKey``),
    for :func:`seal_batch` / :func:`open_batch`; None on the Python backend."""

    __slots__ = ("_decrypt", "_encrypt", "gcm")

    def __init__(self, key: bytes | SecretBytes) -> None:
        k = raw(key)
        if len(k) != 32:
            raise ValidationError("CounterAead needs a 32-byte key")
        cipher = AESGCM(k)
        self._encrypt = cipher.encrypt
        self._decrypt = cipher.decrypt
        nat = nb.NATIVE
        self.gcm: object | None = None if nat is None else nat.GcmKey(k)

    def __repr__(self) -> str:
        return "CounterAead(<secret>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("CounterAead is not picklable")

    def seal(self, counter: int, plaintext: bytes, aad: bytes) -> bytes:
        """``ciphertext || tag`` of ``plaintext`` under nonce ``counter``, bound to ``aad``."""
        if not aad:
            raise ValidationError("associated data is required")
        return self._encrypt(nonce_of(counter), plaintext, aad)

    def seal_many(self, first: int, items: list[tuple[bytes, bytes]]) -> list[bytes]:
        """Seal ``(plaintext, aad)`` pairs under counters ``first, first + 1, ...`` (one key
        schedule for the whole run: an event's attributes, or a micro-batch of events)."""
        if first < 0 or first + len(items) - 1 > COUNTER_MAX:
            raise ValidationError("nonce counter out of range")
        enc = self._encrypt
        pack = _NONCE.pack
        out = []
        for i, (pt, aad) in enumerate(items):
            if not aad:
                raise ValidationError("associated data is required")
            out.append(enc(pack(0, first + i), pt, aad))
        return out

    def open(self, counter: int, blob: bytes, aad: bytes) -> bytes:
        """The plaintext, or :class:`InvalidToken` for any failure (key, nonce, aad, tamper)."""
        if type(counter) is not int or not 0 <= counter <= COUNTER_MAX or len(blob) < TAG_BYTES:
            raise InvalidToken()
        try:
            return self._decrypt(_NONCE.pack(0, counter), blob, aad)
        except InvalidTag:
            raise InvalidToken() from None


def seal_each(first: int, items: list[tuple[CounterAead, bytes, bytes]]) -> list[bytes]:
    """Seal ``(cipher, plaintext, aad)`` triples under counters ``first, first + 1, ...``:
    one event's attributes, each under its own key (hermes §3.2), checked once and sealed in
    one loop (the per-call checks of :meth:`CounterAead.seal` hoisted out of it)."""
    if isinstance(first, bool) or not isinstance(first, int):
        raise ValidationError("nonce counter must be an integer")
    if first < 0 or first + len(items) - 1 > COUNTER_MAX:
        raise ValidationError("nonce counter out of range")
    pack = _NONCE.pack
    out = []
    for i, (c, pt, aad) in enumerate(items):
        if not aad:
            raise ValidationError("associated data is required")
        out.append(c._encrypt(pack(0, first + i), pt, aad))
    return out


def open_each(
    first: int, items: list[tuple[CounterAead, bytes, bytes] | None]
) -> list[bytes | None]:
    """Open ``(cipher, ciphertext||tag, aad)`` triples under counters ``first + i`` (None
    entries are skipped: attributes the caller holds no key for); each result is the
    plaintext or None when it fails to authenticate (never which check failed)."""
    if type(first) is not int or not 0 <= first or first + len(items) - 1 > COUNTER_MAX:
        return [None] * len(items)
    pack = _NONCE.pack
    out: list[bytes | None] = []
    for i, it in enumerate(items):
        if it is None or len(it[1]) < TAG_BYTES:
            out.append(None)
            continue
        try:
            out.append(it[0]._decrypt(pack(0, first + i), it[1], it[2]))
        except InvalidTag:
            out.append(None)
    return out


def seal_batch(items: list[tuple[CounterAead, int, bytes, bytes]]) -> list[bytes]:
    """Seal ``(cipher, counter, plaintext, aad)`` quadruples in one call: a micro-batch of
    events, every attribute under its own key and nonce (hermes §3.2, §3.5), the checks of
    :meth:`CounterAead.seal` applied to each. The caller owns the counters (never reused
    under one key). Native (``native/src/aead.rs``) when the backend is; this is the
    reference, and words the errors."""
    nat = nb.NATIVE
    if nat is not None and items:
        try:
            return nat.gcm_seal_batch(items)  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError, OverflowError):
            pass  # refused (or a cipher made on the Python backend): the reference decides
    return _seal_batch(items)


def _seal_batch(items: list[tuple[CounterAead, int, bytes, bytes]]) -> list[bytes]:
    pack = _NONCE.pack
    out = []
    for c, n, pt, aad in items:
        if type(n) is not int or not 0 <= n <= COUNTER_MAX:
            raise ValidationError("nonce counter must be an integer in [0, 2**64)")
        if not aad:
            raise ValidationError("associated data is required")
        out.append(c._encrypt(pack(0, n), pt, aad))
    return out


def open_batch(items: list[tuple[CounterAead, int, bytes, bytes] | None]) -> list[bytes | None]:
    """Open ``(cipher, counter, ciphertext||tag, aad)`` quadruples in one call; None entries
    are skipped, and each result is the plaintext or None when it fails to authenticate
    (never which check failed). Native when the backend is (``native/src/aead.rs``)."""
    nat = nb.NATIVE
    if nat is not None and items:
        try:
            return nat.gcm_open_batch(items)  # type: ignore[no-any-return]
        except (TypeError, ValueError, AttributeError, OverflowError):
            pass  # an item the extension cannot take (malformed, or no native key)
    return _open_batch(items)


def _open_batch(items: list[tuple[CounterAead, int, bytes, bytes] | None]) -> list[bytes | None]:
    pack = _NONCE.pack
    out: list[bytes | None] = []
    for it in items:
        if it is None:
            out.append(None)
            continue
        c, n, blob, aad = it
        if type(n) is not int or not 0 <= n <= COUNTER_MAX or len(blob) < TAG_BYTES:
            out.append(None)
            continue
        try:
            out.append(c._decrypt(pack(0, n), blob, aad))
        except InvalidTag:
            out.append(None)
    return out
