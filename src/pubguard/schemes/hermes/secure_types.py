"""Secure event types (hermes-encrypted-access-control.txt §2.2, §3.1-3.2).

Theory of operation
-------------------
A secure event type is an :class:`~pubguard.model.events.EventType` with an *owner* (the type
owner, PITO in the paper's Fig. 1) who signs its definition with Ed25519, so any broker can
check its integrity and authenticity. Its names are globally unique:

- the *type id* is ``SHA-256(owner name || type name)`` (§2.1 uses SHA-1 of the name; the owner
  is prefixed so two owners' ``Numberplate`` types never collide, §2.2), and it routes
  publications: brokers see it, never the type name;
- each *attribute id* is ``SHA-256`` of the attribute's fully qualified name
  ``owner/type/attribute`` (§3.2: the type id defines a namespace in which the attribute id is
  a fully qualified name). It names the attribute's key group and hides which attributes an
  event carries from brokers that do not know the type.

Both are length-prefixed before hashing, so ``("ab", "c")`` and ``("a", "bc")`` differ.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pubguard.crypto import SigningKey, VerifyKey
from pubguard.errors import ValidationError
from pubguard.model.events import EventType

__all__ = ["SecureEventType", "attribute_id", "type_id"]


def _lp(*parts: str) -> bytes:
    out = b""
    for p in parts:
        b = p.encode()
        out += struct.pack(">I", len(b)) + b
    return out


def type_id(owner: str, type_name: str) -> bytes:
    """§3.1: ``SHA-256(owner || type name)``, the routing and key-group name of a type."""
    if not owner or not type_name:
        raise ValidationError("type owner and type name must be non-empty")
    return hashlib.sha256(b"pubguard-hermes-type\x00" + _lp(owner, type_name)).digest()


def attribute_id(owner: str, type_name: str, attribute: str) -> bytes:
    """§3.2: ``SHA-256`` of the fully qualified attribute name ``owner/type/attribute``."""
    if not attribute:
        raise ValidationError("attribute name must be non-empty")
    return hashlib.sha256(b"pubguard-hermes-attr\x00" + _lp(owner, type_name, attribute)).digest()


def _definition_bytes(owner: str, etype: EventType) -> bytes:
    body = {"owner": owner, "type": etype.to_json()}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class SecureEventType:
    """An event type, its owner, the owner's verify key and the owner's signature over both."""

    owner: str
    etype: EventType
    owner_key: VerifyKey
    signature: bytes

    @classmethod
    def define(cls, owner: str, etype: EventType, owner_signing: SigningKey) -> SecureEventType:
        """The type owner signs a type definition (§2.2)."""
        type_id(owner, etype.name)  # checks the names
        sig = owner_signing.sign(_definition_bytes(owner, etype))
        return cls(owner, etype, owner_signing.public, sig)

    def verify(self) -> None:
        """Raise :class:`~pubguard.errors.InvalidToken` unless the owner signed exactly this definition."""
        self.owner_key.verify(self.signature, _definition_bytes(self.owner, self.etype))

    @property
    def name(self) -> str:
        return self.etype.name

    @property
    def type_id(self) -> bytes:
        return type_id(self.owner, self.etype.name)

    def attribute_id(self, attribute: str) -> bytes:
        self.etype.attribute(attribute)  # ValidationError for an unknown attribute
        return attribute_id(self.owner, self.etype.name, attribute)

    @property
    def attribute_ids(self) -> dict[str, bytes]:
        """Attribute name -> attribute id, in definition order."""
        return {
            a.name: attribute_id(self.owner, self.etype.name, a.name) for a in self.etype.attributes
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "type": self.etype.to_json(),
            "owner_key": self.owner_key.to_bytes().hex(),
            "signature": self.signature.hex(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SecureEventType:
        """Parse and verify a signed definition (:class:`~pubguard.errors.InvalidToken` if the signature fails)."""
        try:
            t = cls(
                str(d["owner"]),
                EventType.from_json(d["type"]),
                VerifyKey.from_bytes(bytes.fromhex(d["owner_key"])),
                bytes.fromhex(d["signature"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                raise
            raise ValidationError("malformed secure event type") from None
        t.verify()
        return t
