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
import random as _random
from dataclasses import dataclass
from typing import Final, TypeVar

from pubguard.crypto import H, SecretBytes, SigningKey, VerifyKey, random_bytes
from pubguard.crypto.primitives import KH_verify
from pubguard.errors import InvalidToken, ValidationError
from pubguard.keys.kdc import keyed_hash, label
from pubguard.keys.permits import (
    PERMIT_ID_BYTES,
    AdvertisementPermit,
    Permit,
    PermitKind,
    SubscriptionPermit,
    UnadvertisementPermit,
    UnsubscriptionPermit,
    _fixed,
    _time,
    decode_permit,
    verify_permit,
)

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

DEFAULT_EPOCH_LENGTH: Final = 30 * 86400.0  # eventguard.txt §4.8: "say, one month"
P = TypeVar("P", bound=Permit)


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
        self._kh = keyed_hash(master)  # native KH when the native backend is active
        self._signer = SigningKey.from_seed(self._kh(b"\x00ms-signing"))
        self.epoch_length = float(epoch_length)
        self.origin = _time("origin", origin)

    def __repr__(self) -> str:
        return f"MetaService(public={self.public_key.to_bytes().hex()[:16]}...)"

    @property
    def public_key(self) -> VerifyKey:
        """The key brokers verify permits with (the same for every replica)."""
        return self._signer.public

    def export_master(self) -> SecretBytes:
        """``rk``, to start a replica elsewhere (eventguard.txt §3.2: replicas share the one
        primary key). Hand it only to a trusted process, never to a log or a file in clear."""
        return self._rk

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
        return SecretBytes(keyed_hash(self._kh(str(epoch).encode()))(label("topic", w)))

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
