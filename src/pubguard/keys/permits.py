"""EventGuard permits: frozen dataclasses with one canonical signed encoding.

eventguard.txt §4.2-4.7. The four permits -- subscription ``sb(w)``, advertisement ``ad(w)``,
unsubscription ``usb(w)``, unadvertisement ``uad(w)`` -- are what the meta-service
(:mod:`pubguard.keys.ms`) signs and brokers check. :meth:`Permit.signed_bytes` is::

    "pubguard/eventguard/permit/v1" 0x00 kind 0x00 (len32 field)*

with fields token ``T(w)``, the permit's 16-byte id (sbId, adId, usbId, uadId), subject,
epoch (u64), issued_at and expires_at (f64 seconds), then ``pk(P)`` (advertisements) or the
withdrawn sbId/adId. :meth:`Permit.to_bytes` appends the Ed25519 signature as one more field.
Anything that does not parse, verify or is out of date is the opaque
:class:`~pubguard.errors.InvalidToken` (docs/key-derivation.md gives a worked vector).
"""

from __future__ import annotations

import abc
import enum
import math
import struct
from dataclasses import dataclass
from typing import ClassVar, Final

from pubguard.crypto import VerifyKey
from pubguard.errors import InvalidToken, ValidationError
from pubguard.keys.kdc import label

__all__ = [
    "MAX_CLOCK_SKEW",
    "PERMIT_ID_BYTES",
    "AdvertisementPermit",
    "Permit",
    "PermitKind",
    "SubscriptionPermit",
    "UnadvertisementPermit",
    "UnsubscriptionPermit",
    "decode_permit",
    "verify_permit",
]

PERMIT_ID_BYTES: Final = 16
TOKEN_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64
#: Issue times further in the future than this are refused (clock skew allowance).
MAX_CLOCK_SKEW: Final = 5.0
_MAGIC: Final = b"pubguard/eventguard/permit/v1\x00"


class PermitKind(enum.StrEnum):
    SUBSCRIPTION = "sb"
    ADVERTISEMENT = "ad"
    UNSUBSCRIPTION = "usb"
    UNADVERTISEMENT = "uad"


def _fixed(name: str, v: object, n: int) -> bytes:
    if not isinstance(v, bytes) or len(v) != n:
        raise ValidationError(f"{name} must be {n} bytes")
    return v


def _time(name: str, t: object) -> float:
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
        raise ValidationError(f"{name} must be a finite number of seconds, got {t!r}")
    return float(t)


class Permit(abc.ABC):
    """Behaviour shared by the four permit dataclasses (they define ``_body`` and fields)."""

    __slots__ = ()
    KIND: ClassVar[PermitKind]
    token: bytes
    subject: str
    epoch: int
    issued_at: float
    expires_at: float
    signature: bytes

    @property
    @abc.abstractmethod
    def ident(self) -> bytes:
        """The permit's unique identifier (sbId, adId, usbId or uadId)."""

    @abc.abstractmethod
    def _body(self) -> list[bytes]:
        """The kind-specific signed fields."""

    def _check_common(self) -> None:
        _fixed("token", self.token, TOKEN_BYTES)
        _fixed("permit id", self.ident, PERMIT_ID_BYTES)
        label("subject", self.subject)
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 0:
            raise ValidationError(f"epoch must be a non-negative integer, got {self.epoch!r}")
        issued = _time("issued_at", self.issued_at)
        if _time("expires_at", self.expires_at) < issued:
            raise ValidationError("a permit cannot expire before it is issued")
        if not isinstance(self.signature, bytes) or len(self.signature) not in (0, 64):
            raise ValidationError("signature must be empty or 64 bytes")

    def signed_bytes(self) -> bytes:
        """Canonical encoding of everything the MS signs (all fields but the signature)."""
        parts = [
            self.token,
            self.ident,
            self.subject.encode(),
            struct.pack(">Q", self.epoch),
            struct.pack(">d", self.issued_at),
            struct.pack(">d", self.expires_at),
            *self._body(),
        ]
        return _MAGIC + self.KIND.value.encode() + b"\x00" + _pack(parts)

    def to_bytes(self) -> bytes:
        """Wire form: ``signed_bytes || len || signature``."""
        return self.signed_bytes() + _pack([self.signature])


def _pack(parts: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


@dataclass(frozen=True, slots=True)
class SubscriptionPermit(Permit):
    """eventguard.txt §4.2 ``sb(w)``, public part: ``sig_MS(T(w) || sbId || S || e || ts)``."""

    KIND: ClassVar[PermitKind] = PermitKind.SUBSCRIPTION
    token: bytes
    sb_id: bytes
    subject: str
    epoch: int
    issued_at: float
    expires_at: float
    signature: bytes = b""

    def __post_init__(self) -> None:
        self._check_common()

    @property
    def ident(self) -> bytes:
        return self.sb_id

    def _body(self) -> list[bytes]:
        return []


@dataclass(frozen=True, slots=True)
class AdvertisementPermit(Permit):
    """eventguard.txt §4.3 ``ad(w)``, public part: ``sig_MS(T(w) || P || pk(P) || adId ...)``."""

    KIND: ClassVar[PermitKind] = PermitKind.ADVERTISEMENT
    token: bytes
    ad_id: bytes
    subject: str
    publisher_key: bytes
    epoch: int
    issued_at: float
    expires_at: float
    signature: bytes = b""

    def __post_init__(self) -> None:
        self._check_common()
        _fixed("publisher key", self.publisher_key, 32)

    @property
    def ident(self) -> bytes:
        return self.ad_id

    def _body(self) -> list[bytes]:
        return [self.publisher_key]


@dataclass(frozen=True, slots=True)
class UnsubscriptionPermit(Permit):
    """eventguard.txt §4.5 ``usb(w) = sig_MS(T(w) || sbId)``, identifier usbId."""

    KIND: ClassVar[PermitKind] = PermitKind.UNSUBSCRIPTION
    token: bytes
    usb_id: bytes
    sb_id: bytes
    subject: str
    epoch: int
    issued_at: float
    expires_at: float
    signature: bytes = b""

    def __post_init__(self) -> None:
        self._check_common()
        _fixed("sbId", self.sb_id, PERMIT_ID_BYTES)

    @property
    def ident(self) -> bytes:
        return self.usb_id

    def _body(self) -> list[bytes]:
        return [self.sb_id]


@dataclass(frozen=True, slots=True)
class UnadvertisementPermit(Permit):
    """eventguard.txt §4.6 ``uad(w) = sig_MS(T(w) || P || adId)``, identifier uadId."""

    KIND: ClassVar[PermitKind] = PermitKind.UNADVERTISEMENT
    token: bytes
    uad_id: bytes
    ad_id: bytes
    subject: str
    epoch: int
    issued_at: float
    expires_at: float
    signature: bytes = b""

    def __post_init__(self) -> None:
        self._check_common()
        _fixed("adId", self.ad_id, PERMIT_ID_BYTES)

    @property
    def ident(self) -> bytes:
        return self.uad_id

    def _body(self) -> list[bytes]:
        return [self.ad_id]


_CLASSES: dict[bytes, type] = {
    c.KIND.value.encode(): c
    for c in (SubscriptionPermit, AdvertisementPermit, UnsubscriptionPermit, UnadvertisementPermit)
}


def decode_permit(blob: bytes) -> Permit:
    """Parse :meth:`Permit.to_bytes`; anything malformed is :class:`InvalidToken`."""
    try:
        if not blob.startswith(_MAGIC):
            raise ValueError
        kind, _, rest = blob[len(_MAGIC) :].partition(b"\x00")
        cls = _CLASSES[kind]
        parts: list[bytes] = []
        pos = 0
        while pos < len(rest):
            (n,) = struct.unpack_from(">I", rest, pos)
            if pos + 4 + n > len(rest):
                raise ValueError
            parts.append(rest[pos + 4 : pos + 4 + n])
            pos += 4 + n
        token, ident, subject, epoch, issued, expires, *extra, signature = parts
        common = dict(
            token=token,
            subject=subject.decode(),
            epoch=struct.unpack(">Q", epoch)[0],
            issued_at=struct.unpack(">d", issued)[0],
            expires_at=struct.unpack(">d", expires)[0],
            signature=signature,
        )
        if cls is SubscriptionPermit and not extra:
            return SubscriptionPermit(sb_id=ident, **common)
        if cls is AdvertisementPermit and len(extra) == 1:
            return AdvertisementPermit(ad_id=ident, publisher_key=extra[0], **common)
        if cls is UnsubscriptionPermit and len(extra) == 1:
            return UnsubscriptionPermit(usb_id=ident, sb_id=extra[0], **common)
        if cls is UnadvertisementPermit and len(extra) == 1:
            return UnadvertisementPermit(uad_id=ident, ad_id=extra[0], **common)
        raise ValueError
    except (ValueError, KeyError, struct.error, UnicodeDecodeError, TypeError):
        raise InvalidToken() from None


def verify_permit(
    permit: Permit, ms_key: VerifyKey, *, now: float, max_delay: float | None = None
) -> None:
    """What a broker checks, holding only the MS public key (eventguard.txt §4.7).

    Raises :class:`InvalidToken` unless the signature is the MS's over the permit's canonical
    bytes, ``issued_at <= now + MAX_CLOCK_SKEW`` and ``now <= expires_at``; with ``max_delay``
    also unless ``|now - issued_at| <= max_delay`` (the routing guard's freshness rule).
    """
    if not isinstance(permit, Permit) or not permit.signature:
        raise InvalidToken()
    ms_key.verify(permit.signature, permit.signed_bytes())
    if permit.issued_at > now + MAX_CLOCK_SKEW or now > permit.expires_at:
        raise InvalidToken()
    if max_delay is not None and abs(now - permit.issued_at) > max_delay:
        raise InvalidToken()
