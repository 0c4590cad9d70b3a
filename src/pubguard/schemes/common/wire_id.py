"""Wire identifiers that carry no application data, and what travels inside the ciphertext
in their place.

Theory of operation
-------------------
Every broker needs an identifier per publication: the core's duplicate window
(eventguard.txt §4.7, "the identifiers seen in the last max_delay time units"; in memory, so
it is the *downstream* brokers' windows that catch a copy re-sent after a broker restarted),
the hop acks of the reliable link, catch-up routing and the durable subscribers' queues all
key on it, and the secure profiles sign it. So the key of a wire id must outlive the
publisher's process: here it derives from the publisher's signing key; Hermes, whose PHB
computes wire ids for key-less clients, keeps its secret sealed on the broker
(:mod:`pubguard.schemes.hermes.wire_secret`). None of them needs the
*application's* identifier: a hospital that numbers its events by medical record number would
otherwise hand every broker the very value its secret attribute encrypts. So the wire carries

    wire id = hex(KH(K_id, "pubguard/wire-id/v1" || app id)[:16])      (32 hex characters)

with ``K_id = HKDF(publisher's Ed25519 seed, info="pubguard/wire-id/v1/key")``
(:class:`WireIds`). It is a keyed hash under the publisher's key, so it is

- *opaque*: without ``K_id`` it is a pseudo-random 128-bit string (HMAC-SHA256 is a PRF);
- *stable*: the same application event, protected again by the same publisher (a re-publish
  after a crash, across an epoch, from another process holding the same key), gets the same
  wire id, so every broker still drops it as ``duplicate`` (and a re-sent frame is the same
  bytes anyway);
- *per publisher*: two publishers that happen to use the same application id no longer
  collide in the brokers' duplicate windows.

The application id travels inside the body under the content key (psguard / default: the
payload's plaintext is :func:`pack_inner`; eventguard's ``pbl`` and narada's payload carry it
as ``i``), and the subscriber restores it on the opened event.

Secret-attribute names (psguard.txt §3: sealed under ``K(e)``; Hermes §3.2 names attributes
by hashed ids) are replaced on the wire by *keyed labels* (:func:`secret_labels`):
``hex(KH(KH(K(e), "pubguard/secret-label/v1"), lp(wire id) || lp(name))[:16])``. Only a holder
of ``K(e)`` (an authorised subscriber, who knows the type from the hint and so the candidate
names) can map a label back to its name; the label differs per event, so the labels do not
link events of one schema either. What a broker still learns is the *number* of sealed
attributes (docs/profiles.md, metadata).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

from pubguard.crypto import KeyedHash, SecretBytes, SigningKey, hkdf, random_bytes
from pubguard.errors import ValidationError

__all__ = [
    "MAX_APP_ID_BYTES",
    "SECRET_LABEL_HEX",
    "WIRE_ID_HEX",
    "WireIds",
    "pack_inner",
    "secret_labels",
    "unpack_inner",
]

_ID_TAG: Final = b"pubguard/wire-id/v1"
_KEY_INFO: Final = b"pubguard/wire-id/v1/key"
_LABEL_TAG: Final = b"pubguard/secret-label/v1"
#: hex characters of a wire id (128 bits: collisions need ~2**64 publications of one publisher)
WIRE_ID_HEX: Final = 32
#: hex characters of a secret-attribute label (128 bits)
SECRET_LABEL_HEX: Final = 32
_INNER_VERSION: Final = 1
_U32 = struct.Struct(">I")
#: longest application id carried inside a body (the wire's id limit, in UTF-8 bytes)
MAX_APP_ID_BYTES: Final = 1024


class WireIds:
    """``wire_ids(app_id) -> wire id``: the keyed hash above under one publisher's key.

    Build it from the publisher's signing key (:meth:`for_key`, deterministic: the same key
    gives the same ids in every process and epoch) or, for a publisher without one,
    :meth:`random` (stable for the object's lifetime only). Holds the key only as HMAC
    states; its ``repr`` shows nothing of it."""

    __slots__ = ("_kh",)

    def __init__(self, key: bytes | SecretBytes) -> None:
        self._kh = KeyedHash(hkdf(key, info=_KEY_INFO))

    @classmethod
    def for_key(cls, signing_key: SigningKey) -> WireIds:
        return cls(SecretBytes(signing_key.private_bytes()))

    @classmethod
    def random(cls) -> WireIds:
        return cls(SecretBytes(random_bytes(32)))

    def __call__(self, app_id: str) -> str:
        if not isinstance(app_id, str) or not app_id:
            raise ValidationError("an event id must be a non-empty string")
        return self._kh(_ID_TAG + app_id.encode())[: WIRE_ID_HEX // 2].hex()

    def __repr__(self) -> str:
        return "WireIds(<secret>)"


def secret_labels(k_e: bytes | SecretBytes, wire_id: str, names: Iterable[str]) -> dict[str, str]:
    """``{name: label}`` for the secret attributes of one event sealed under ``k_e``."""
    kh = KeyedHash(KeyedHash(k_e)(_LABEL_TAG))
    w = wire_id.encode()
    head = _U32.pack(len(w)) + w
    out = {}
    for n in names:
        b = n.encode()
        out[n] = kh(head + _U32.pack(len(b)) + b)[: SECRET_LABEL_HEX // 2].hex()
    return out


def pack_inner(app_id: str, payload: bytes) -> bytes:
    """The plaintext a psguard / default payload seals: ``0x01 || u32(len id) || id || payload``."""
    b = app_id.encode()
    if not b or len(b) > MAX_APP_ID_BYTES:
        raise ValidationError(f"an event id must be 1..{MAX_APP_ID_BYTES} bytes of UTF-8")
    return bytes((_INNER_VERSION,)) + _U32.pack(len(b)) + b + payload


def unpack_inner(pt: bytes) -> tuple[str, bytes]:
    """The inverse of :func:`pack_inner`; ValidationError on anything else."""
    if len(pt) < 5 or pt[0] != _INNER_VERSION:
        raise ValidationError("malformed sealed payload")
    (n,) = _U32.unpack_from(pt, 1)
    if not 0 < n <= MAX_APP_ID_BYTES or 5 + n > len(pt):
        raise ValidationError("malformed sealed payload")
    try:
        app_id = pt[5 : 5 + n].decode()
    except UnicodeDecodeError:
        raise ValidationError("malformed sealed payload") from None
    return app_id, pt[5 + n :]
