"""Capabilities: authorisation certificates issued by a type owner (hermes §2.3, §4).

Theory of operation
-------------------
The type owner grants a node (a client or a broker, named by its authenticated identity) a
capability ``<type, action, attributes>`` (§4: ``<NP, subscribe, *>`` lets its holder subscribe
to Numberplate events and read every attribute). The paper uses SPKI authorisation
certificates; here a capability is the same tuple plus its holder, a validity period and a
serial, signed by the owner with Ed25519.

The same capability authorises three things (§4):

- a *client* request at its hosting broker, where both the client and the broker must hold one
  for the action (the broker is the client's proxy in the network);
- a *broker* joining the key group of the type (event encryption) or of each attribute it
  grants (attribute encryption): the key-group manager checks it (Fig. 4);
- what a hosting broker hands a subscriber: only the attributes its capability grants.

Validity and revocation: a capability is valid in ``[not_before, not_after)`` and until its
serial appears in the owner's :class:`RevocationSet` (the "on-line checks back towards the
issuer" of §4.2), or its holder does: the owner's signed :class:`RevocationList` names the
holders it revoked, so a later re-issue of their capabilities does not readmit them. Every failed check raises :class:`~pubguard.errors.DropError` with a
machine-readable reason (``unauthorised``, ``stale``, ``revoked``, ``forged``) and no secret.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from pubguard.crypto import SigningKey, VerifyKey
from pubguard.errors import DropError, DropReason, InvalidToken, ValidationError

__all__ = [
    "ACTIONS",
    "ALL",
    "VERIFIED_MAX",
    "Capability",
    "REVOCATIONS_MAX",
    "RevocationList",
    "RevocationSet",
    "VerifiedCapabilities",
    "check_capability",
]

ALL: Final = "*"
VERIFIED_MAX: Final = 4096  # verified capabilities a broker remembers
ACTIONS: Final = ("publish", "subscribe")
#: entries (holders and serials) of one revocation list: a bounded file to parse and verify
REVOCATIONS_MAX: Final = 65536


def _body(c: Capability) -> bytes:
    d = {
        "holder": c.holder,
        "type_id": c.type_id.hex(),
        "action": c.action,
        "attributes": list(c.attributes),
        "not_before": c.not_before,
        "not_after": None if math.isinf(c.not_after) else c.not_after,
        "serial": c.serial,
    }
    return b"pubguard-hermes-capability\x00" + json.dumps(d, sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class Capability:
    """``<type, action, attributes>`` granted to ``holder`` by the type owner (§2.3, §4)."""

    holder: str
    type_id: bytes
    action: str
    attributes: tuple[str, ...]  # ("*",) grants every attribute
    not_before: float
    not_after: float
    serial: int
    signature: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        if not self.holder:
            raise ValidationError("capability holder must be non-empty")
        if self.action not in ACTIONS:
            raise ValidationError(f"capability action must be one of {ACTIONS}")
        if len(self.type_id) != 32:
            raise ValidationError("capability type id must be 32 bytes")
        if not self.attributes:
            raise ValidationError("a capability grants at least one attribute (or '*')")
        object.__setattr__(self, "attributes", tuple(sorted(set(self.attributes))))
        if not self.not_before < self.not_after:
            raise ValidationError("capability validity period is empty")

    @classmethod
    def issue(
        cls,
        owner: SigningKey,
        *,
        holder: str,
        type_id: bytes,
        action: str,
        attributes: Iterable[str] = (ALL,),
        not_before: float,
        not_after: float = math.inf,
        serial: int,
    ) -> Capability:
        """The type owner signs a capability."""
        unsigned = cls(holder, type_id, action, tuple(attributes), not_before, not_after, serial)
        return _with_signature(unsigned, owner.sign(_body(unsigned)))

    def grants(self, attribute: str) -> bool:
        return ALL in self.attributes or attribute in self.attributes

    def granted(self, names: Iterable[str]) -> frozenset[str]:
        """The subset of ``names`` this capability grants."""
        return frozenset(n for n in names if self.grants(n))

    def valid_at(self, now: float) -> bool:
        return self.not_before <= now < self.not_after

    def to_bytes(self) -> bytes:
        """The wire form as one msgpack field (a client's ``meta`` stays a flat map)."""
        return bytes(msgpack.packb(self.to_wire(), use_bin_type=True))

    @classmethod
    def from_bytes(cls, blob: bytes) -> Capability:
        try:
            d = msgpack.unpackb(blob, raw=False, max_map_len=16, max_array_len=1024)
        except (ValueError, TypeError, msgpack.UnpackException):
            raise ValidationError("malformed capability") from None
        if not isinstance(d, dict):
            raise ValidationError("malformed capability")
        return cls.from_wire(d)

    def to_wire(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "type_id": self.type_id,
            "action": self.action,
            "attributes": list(self.attributes),
            "not_before": self.not_before,
            "not_after": None if math.isinf(self.not_after) else self.not_after,
            "serial": self.serial,
            "sig": self.signature,
        }

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Capability:
        """Parse (not verify: :func:`check_capability` does); ValidationError if malformed."""
        try:
            na = d["not_after"]
            c = cls(
                str(d["holder"]),
                bytes(d["type_id"]),
                str(d["action"]),
                tuple(str(a) for a in d["attributes"]),
                float(d["not_before"]),
                math.inf if na is None else float(na),
                int(d["serial"]),
                bytes(d["sig"]),
            )
        except ValidationError:
            raise
        except (KeyError, TypeError, ValueError):
            raise ValidationError("malformed capability") from None
        return c


def _with_signature(c: Capability, sig: bytes) -> Capability:
    return Capability(
        c.holder, c.type_id, c.action, c.attributes, c.not_before, c.not_after, c.serial, sig
    )


class VerifiedCapabilities:
    """Capabilities by their wire bytes, each signature checked once (a client sends the same
    capability with every publication; an Ed25519 verify costs about 65 us). Bounded: cleared
    when ``limit`` entries are held."""

    __slots__ = ("_by_blob", "limit")

    def __init__(self, limit: int = VERIFIED_MAX) -> None:
        self._by_blob: dict[tuple[bytes, bytes], Capability] = {}
        self.limit = limit

    def get(self, blob: bytes, owner_key: VerifyKey) -> Capability:
        """The capability of ``blob``, its owner signature verified (DropError ``forged``)."""
        k = (blob, owner_key.to_bytes())
        cap = self._by_blob.get(k)
        if cap is None:
            cap = Capability.from_bytes(blob)
            try:
                owner_key.verify(cap.signature, _body(cap))
            except InvalidToken:
                raise DropError(
                    DropReason.FORGED, "capability not signed by the type owner"
                ) from None
            if len(self._by_blob) >= self.limit:
                self._by_blob.clear()
            self._by_blob[k] = cap
        return cap


class RevocationSet:
    """The type owner's revoked capability serials (§4.2's on-line check back to the issuer)
    and revoked *holders*: a holder's revocation covers every capability naming it, also ones
    issued after it (a re-issue does not readmit; :class:`RevocationList`)."""

    __slots__ = ("_holders", "_serials")

    def __init__(self, serials: Iterable[int] = (), holders: Iterable[str] = ()) -> None:
        self._serials: set[int] = set(serials)
        self._holders: set[str] = set(holders)

    def revoke(self, serial: int) -> None:
        self._serials.add(serial)

    def revoke_holder(self, holder: str) -> None:
        self._holders.add(holder)

    def holder_revoked(self, holder: str) -> bool:
        return holder in self._holders

    @property
    def holders(self) -> frozenset[str]:
        return frozenset(self._holders)

    def __contains__(self, serial: object) -> bool:
        return serial in self._serials

    def __len__(self) -> int:
        return len(self._serials)


def _list_body(
    type_id: bytes, holders: tuple[str, ...], serials: tuple[int, ...], issued: float
) -> bytes:
    d: dict[str, Any] = {
        "type_id": type_id.hex(),
        "holders": list(holders),
        "serials": list(serials),
    }
    d["issued"] = issued
    return b"pubguard-hermes-revocations\x00" + json.dumps(d, sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class RevocationList:
    """The type owner's signed revocation list (§4.2): the holders it revoked and the serials.
    It outlives a re-issue of the capabilities (``cluster up`` issues none to a listed holder,
    the key-group manager refuses a listed holder's join whatever its capability), and only
    the owner can extend or shorten it: :meth:`verify` checks its Ed25519 signature."""

    type_id: bytes
    holders: tuple[str, ...]
    serials: tuple[int, ...]
    issued: float
    signature: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        if len(self.type_id) != 32:
            raise ValidationError("revocation list type id must be 32 bytes")
        if len(self.holders) + len(self.serials) > REVOCATIONS_MAX:
            raise ValidationError(f"a revocation list holds at most {REVOCATIONS_MAX} entries")
        if any(not isinstance(h, str) or not h for h in self.holders):
            raise ValidationError("revoked holders are non-empty names")
        object.__setattr__(self, "holders", tuple(sorted(set(self.holders))))
        object.__setattr__(self, "serials", tuple(sorted(set(self.serials))))

    @classmethod
    def issue(
        cls,
        owner: SigningKey,
        *,
        type_id: bytes,
        holders: Iterable[str] = (),
        serials: Iterable[int] = (),
        issued: float,
    ) -> RevocationList:
        """The type owner signs the list."""
        u = cls(type_id, tuple(holders), tuple(int(x) for x in serials), float(issued))
        sig = owner.sign(_list_body(u.type_id, u.holders, u.serials, u.issued))
        return cls(u.type_id, u.holders, u.serials, u.issued, sig)

    def verify(self, owner_key: VerifyKey, type_id: bytes) -> None:
        """InvalidToken unless the owner of ``type_id`` signed this list for that type."""
        if self.type_id != type_id:
            raise InvalidToken()
        owner_key.verify(
            self.signature, _list_body(self.type_id, self.holders, self.serials, self.issued)
        )

    def revocation_set(self) -> RevocationSet:
        return RevocationSet(self.serials, self.holders)

    def to_json(self) -> dict[str, Any]:
        return {
            "type_id": self.type_id.hex(),
            "holders": list(self.holders),
            "serials": list(self.serials),
            "issued": self.issued,
            "sig": self.signature.hex(),
        }

    @classmethod
    def from_json(cls, d: Any) -> RevocationList:
        """Parse (not verify); ValidationError if malformed."""
        try:
            return cls(
                bytes.fromhex(d["type_id"]),
                tuple(str(h) for h in d["holders"]),
                tuple(int(x) for x in d["serials"]),
                float(d["issued"]),
                bytes.fromhex(d["sig"]),
            )
        except ValidationError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValidationError("malformed revocation list") from None


def check_capability(
    cap: Capability,
    owner_key: VerifyKey,
    *,
    holder: str | None,
    type_id: bytes,
    action: str | None,
    now: float,
    revoked: RevocationSet | None = None,
    signature_checked: bool = False,
) -> None:
    """Raise :class:`DropError` unless ``cap`` is the owner's, for this holder, type and
    action (``action=None``: either, as for key-group membership), valid at ``now`` and not
    revoked (``signature_checked``: :class:`VerifiedCapabilities` did the signature)."""

    def refuse(reason: DropReason, why: str) -> DropError:
        return DropError(reason, f"capability {cap.serial}: {why}", holder=cap.holder)

    if not signature_checked:
        try:
            owner_key.verify(cap.signature, _body(cap))
        except InvalidToken:
            raise refuse(DropReason.FORGED, "not signed by the type owner") from None
    if holder is not None and cap.holder != holder:
        raise refuse(DropReason.UNAUTHORISED, "held by another identity")
    if cap.type_id != type_id:
        raise refuse(DropReason.UNAUTHORISED, "for another event type")
    if action is not None and cap.action != action:
        raise refuse(DropReason.UNAUTHORISED, f"does not grant {action}")
    if not cap.valid_at(now):
        raise refuse(DropReason.STALE, "outside its validity period")
    if revoked is not None and cap.serial in revoked:
        raise refuse(DropReason.REVOKED, "revoked by the type owner")
    if revoked is not None and revoked.holder_revoked(cap.holder):
        raise refuse(DropReason.REVOKED, "its holder was revoked by the type owner")
