"""EventGuard's meta-service (MS): topic tokens, epoch keys and signed permits.

Theory of operation (eventguard.txt §3.2, §4.1-4.8). The MS keeps exactly one secret, the
primary key ``rk`` (§3.2: "at most one small key"), and is otherwise stateless, so replicas
sharing ``rk`` issue interchangeable permits without talking to each other. From ``rk``:

* topic token ``T(w) = H(KH_rk(w))`` (§4.2); derived from the primary key, so tokens -- and
  every subscription and advertisement already in the network -- survive epochs (§4.8);
* epoch key ``K(w, e) = KH_{rk(MS, e)}(w)`` with ``rk(MS, e) = KH_rk(e)``, ``e`` in ASCII
  decimal (§4.8); subscribers and publishers fetch a new one each epoch (renewal);
* unsubscribe and unadvertise tokens ``UST = KH_rk(sbId)``, ``UAT = KH_rk(adId)`` (§4.5-4.6);
* the MS signing key: Ed25519 from the seed ``KH_rk(0x00 || "ms-signing")`` (replaces the
  paper's ElGamal-512). Ed25519 is deterministic, so the uniqueness the paper took from
  ElGamal's ``r`` component comes from a fresh random 16-byte nonce inside the signed bytes:
  the identifiers sbId, adId, usbId, uadId.

A permit is a frozen dataclass whose canonical bytes (:meth:`signed_bytes`) carry a domain tag,
the permit kind, the token, its identifier, the subject (subscriber or publisher), the epoch,
issue and expiry times, and the kind's extra fields (``pk(P)`` for advertisements, the
withdrawn sbId/adId for unsubscriptions/unadvertisements). Brokers hold only the MS public key
and call :func:`verify_permit`; every failure (bad signature, tampering, expiry, malformed
bytes) is the one opaque :class:`~pubguard.errors.InvalidToken`.

Grants (:class:`SubscriptionGrant`, :class:`AdvertisementGrant`) add what only the requester
may see: the epoch key and the UST/UAT, as :class:`~pubguard.crypto.SecretBytes`.

``rk(MS, e) = KH_rk(e)`` and ``KH_rk(w)`` share one input space (as the paper writes them):
harmless, because neither is ever released -- only ``H(KH_rk(w))`` (public) and
``KH_{KH_rk(e)}(w)`` leave the MS. UST/UAT inputs are random 16-byte ids chosen by the MS.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random as _random
import struct
from dataclasses import dataclass
from typing import ClassVar, Final, TypeVar

from pubguard.crypto import H, KeyedHash, SecretBytes, SigningKey, VerifyKey, random_bytes
from pubguard.crypto.primitives import KH, KH_verify
from pubguard.errors import InvalidToken, ValidationError
from pubguard.keys.kdc import label

__all__ = [
    "DEFAULT_EPOCH_LENGTH",
    "PERMIT_ID_BYTES",
    "AdvertisementGrant",
    "AdvertisementPermit",
    "MetaService",
    "Permit",
    "PermitKind",
    "SubscriptionGrant",
    "SubscriptionPermit",
    "UnadvertisementPermit",
    "UnsubscriptionPermit",
    "decode_permit",
    "verify_permit",
]

PERMIT_ID_BYTES: Final = 16
TOKEN_BYTES: Final = 32
SIGNATURE_BYTES: Final = 64
DEFAULT_EPOCH_LENGTH: Final = 30 * 86400.0  # eventguard.txt §4.8: "say, one month"
#: Issue times further in the future than this are refused (clock skew allowance).
MAX_CLOCK_SKEW: Final = 5.0
_MAGIC: Final = b"pubguard/eventguard/permit/v1\x00"
P = TypeVar("P", bound="Permit")


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


class Permit:
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
    def ident(self) -> bytes:
        """The permit's unique identifier (sbId, adId, usbId or uadId)."""
        raise NotImplementedError

    def _body(self) -> list[bytes]:
        raise NotImplementedError

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


@dataclass(frozen=True, slots=True)
class SubscriptionGrant:
    """What the MS returns to subscriber S: the permit, ``K(w, e)`` and ``UST_S(w)``."""

    permit: SubscriptionPermit
    key: SecretBytes
    ust: SecretBytes


@dataclass(frozen=True, slots=True)
class AdvertisementGrant:
    """What the MS returns to publisher P: the permit, ``K(w, e)`` and ``UAT_P(w)``."""

    permit: AdvertisementPermit
    key: SecretBytes
    uat: SecretBytes


class MetaService:
    """A stateless MS replica. ``now`` (seconds) and ``rng`` come in as arguments.

    Epoch ``e`` spans ``[origin + e * epoch_length, origin + (e + 1) * epoch_length)``; permits
    expire at the end of the epoch in which they are issued.
    """

    __slots__ = ("_kh", "_rk", "_signer", "epoch_length", "origin")

    def __init__(
        self,
        master: SecretBytes,
        *,
        epoch_length: float = DEFAULT_EPOCH_LENGTH,
        origin: float = 0.0,
    ) -> None:
        if not isinstance(master, SecretBytes) or len(master) < 16:
            raise ValidationError("the MS master secret must be a SecretBytes of >= 16 bytes")
        if _time("epoch_length", epoch_length) <= 0:
            raise ValidationError("epoch_length must be positive")
        self._rk = master
        self._kh = KeyedHash(master)
        self._signer = SigningKey.from_seed(self._kh(b"\x00ms-signing"))
        self.epoch_length = float(epoch_length)
        self.origin = _time("origin", origin)

    def __repr__(self) -> str:
        return f"MetaService(public={self.public_key.to_bytes().hex()[:16]}...)"

    @property
    def public_key(self) -> VerifyKey:
        """The key brokers verify permits with (the same for every replica)."""
        return self._signer.public

    # -- derivations -------------------------------------------------------------------------

    def epoch_at(self, now: float) -> int:
        t = _time("now", now)
        if t < self.origin:
            raise ValidationError("time is before the MS epoch origin")
        return int((t - self.origin) // self.epoch_length)

    def epoch_end(self, epoch: int) -> float:
        return self.origin + (epoch + 1) * self.epoch_length

    def topic_token(self, w: str) -> bytes:
        """eventguard.txt §4.2: ``T(w) = H(KH_rk(w))``."""
        return H(self._kh(label("topic", w)))

    def epoch_key(self, w: str, epoch: int) -> SecretBytes:
        """eventguard.txt §4.8: ``K(w, e) = KH_{KH_rk(e)}(w)``, ``e`` in ASCII decimal."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValidationError(f"epoch must be a non-negative integer, got {epoch!r}")
        return SecretBytes(KH(self._kh(str(epoch).encode()), label("topic", w)))

    def ust(self, sb_id: bytes) -> SecretBytes:
        """eventguard.txt §4.5: ``UST = KH_rk(sbId)``."""
        return SecretBytes(self._kh(_fixed("sbId", sb_id, PERMIT_ID_BYTES)))

    def uat(self, ad_id: bytes) -> SecretBytes:
        """eventguard.txt §4.6: ``UAT = KH_rk(adId)``."""
        return SecretBytes(self._kh(_fixed("adId", ad_id, PERMIT_ID_BYTES)))

    # -- issuing -----------------------------------------------------------------------------

    def _sign(self, permit: P) -> P:
        return dataclasses.replace(permit, signature=self._signer.sign(permit.signed_bytes()))  # type: ignore[type-var]

    def _times(self, now: float) -> tuple[int, float, float]:
        e = self.epoch_at(now)
        return e, float(now), self.epoch_end(e)

    def subscribe(
        self, subscriber: str, w: str, *, now: float, rng: _random.Random | None = None
    ) -> SubscriptionGrant:
        """eventguard.txt §4.2 subscribe guard: issue ``sb(w)`` to ``subscriber``."""
        e, ts, exp = self._times(now)
        sb_id = random_bytes(PERMIT_ID_BYTES, rng)
        permit = SubscriptionPermit(self.topic_token(w), sb_id, subscriber, e, ts, exp)
        signed = self._sign(permit)
        return SubscriptionGrant(signed, self.epoch_key(w, e), self.ust(sb_id))

    def advertise(
        self,
        publisher: str,
        publisher_key: VerifyKey | bytes,
        w: str,
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> AdvertisementGrant:
        """eventguard.txt §4.3 advertise guard: ``ad(w)`` binds ``P`` to ``pk(P)``."""
        pk = publisher_key.to_bytes() if isinstance(publisher_key, VerifyKey) else publisher_key
        e, ts, exp = self._times(now)
        ad_id = random_bytes(PERMIT_ID_BYTES, rng)
        permit = AdvertisementPermit(self.topic_token(w), ad_id, publisher, pk, e, ts, exp)
        signed = self._sign(permit)
        return AdvertisementGrant(signed, self.epoch_key(w, e), self.uat(ad_id))

    def _check_own(self, permit: Permit, cls: type, secret: bytes | SecretBytes) -> None:
        if not isinstance(permit, cls) or not permit.signature:
            raise InvalidToken()
        self.public_key.verify(permit.signature, permit.signed_bytes())
        s = secret.reveal() if isinstance(secret, SecretBytes) else secret
        if not isinstance(s, bytes) or not KH_verify(self._rk, permit.ident, s):
            raise InvalidToken()

    def check_ust(self, permit: SubscriptionPermit, ust: bytes | SecretBytes) -> None:
        """InvalidToken unless ``permit`` is the MS's and ``ust == KH_rk(sbId)``."""
        self._check_own(permit, SubscriptionPermit, ust)

    def check_uat(self, permit: AdvertisementPermit, uat: bytes | SecretBytes) -> None:
        """InvalidToken unless ``permit`` is the MS's and ``uat == KH_rk(adId)``."""
        self._check_own(permit, AdvertisementPermit, uat)

    def unsubscribe(
        self,
        permit: SubscriptionPermit,
        ust: bytes | SecretBytes,
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> UnsubscriptionPermit:
        """eventguard.txt §4.5 unsubscribe guard: ``usb(w)`` for the holder of the UST."""
        self.check_ust(permit, ust)
        e, ts, exp = self._times(now)
        usb = UnsubscriptionPermit(
            permit.token,
            random_bytes(PERMIT_ID_BYTES, rng),
            permit.sb_id,
            permit.subject,
            e,
            ts,
            exp,
        )
        signed = self._sign(usb)
        return signed

    def unadvertise(
        self,
        permit: AdvertisementPermit,
        uat: bytes | SecretBytes,
        *,
        now: float,
        rng: _random.Random | None = None,
    ) -> UnadvertisementPermit:
        """eventguard.txt §4.6 unadvertise guard: ``uad(w)`` for the holder of the UAT."""
        self.check_uat(permit, uat)
        e, ts, exp = self._times(now)
        uad = UnadvertisementPermit(
            permit.token,
            random_bytes(PERMIT_ID_BYTES, rng),
            permit.ad_id,
            permit.subject,
            e,
            ts,
            exp,
        )
        signed = self._sign(uad)
        return signed

    def _renewable(self, permit: Permit, w: str, now: float) -> int:
        e = self.epoch_at(now)
        if permit.token != self.topic_token(w) or not e - 1 <= permit.epoch <= e:
            raise InvalidToken()
        return e

    def renew_subscription(
        self, permit: SubscriptionPermit, ust: bytes | SecretBytes, w: str, *, now: float
    ) -> SubscriptionGrant:
        """eventguard.txt §4.8 per-epoch renewal: same sbId (the network's subscription and
        the UST stay valid), new epoch, expiry and ``K(w, e)``. Accepts a permit of the
        current or the previous epoch."""
        self.check_ust(permit, ust)
        e = self._renewable(permit, w, now)
        fresh = SubscriptionPermit(
            permit.token, permit.sb_id, permit.subject, e, float(now), self.epoch_end(e)
        )
        signed = self._sign(fresh)
        return SubscriptionGrant(signed, self.epoch_key(w, e), self.ust(permit.sb_id))

    def renew_advertisement(
        self, permit: AdvertisementPermit, uat: bytes | SecretBytes, w: str, *, now: float
    ) -> AdvertisementGrant:
        """Per-epoch renewal of an advertisement (same adId and ``pk(P)``)."""
        self.check_uat(permit, uat)
        e = self._renewable(permit, w, now)
        fresh = AdvertisementPermit(
            permit.token,
            permit.ad_id,
            permit.subject,
            permit.publisher_key,
            e,
            float(now),
            self.epoch_end(e),
        )
        signed = self._sign(fresh)
        return AdvertisementGrant(signed, self.epoch_key(w, e), self.uat(permit.ad_id))
