"""Narada secure topic discovery and the KMC's front door on the pub/sub network
(narada-secure-delivery.txt §II-A, §IV-B "Finally, the KMC also sets up a topic ...", §V-A).

Theory of operation
-------------------
No entity talks to a KMC directly: "All communications with the KMC are based on sending
messages to the topics that a KMC listens to" (§IV-B, footnote 1), so only its administrator
and its broker know where it runs. Entities learn that topic from *Topic Discovery Nodes*
(TDNs, §II-A) and only by presenting valid credentials (secure discovery), and they can check
the advertisement came from the KMC (provenance).

- :class:`TopicAdvertisement`: the KMC-signed statement "KMC ``kmc`` listens on ``topic``",
  with the discovery restriction (roles and/or subjects allowed to learn it) and a version.
  The topic is a fresh random 128-bit value (§V-A: "based on a randomly generated 128-bit
  UUID"), so it cannot be guessed.
- :class:`TopicDiscoveryNode`: stores advertisements (several TDNs hold copies, so losing one
  loses nothing) after checking their KMC certificate and signature; answers a
  :class:`DiscoveryRequest` only for a requester whose certificate chains to the CA, is not
  revoked, signed the request recently, and passes the restriction. The answer is wrapped to
  a KEM key inside the signed request, so a replayed request reveals nothing.
- :class:`KmcEndpoint`: the sans-IO front door. The driver hands it every message that arrives
  on the KMC's topic; valid key requests get a :class:`~pubguard.keys.kmc.KeyDelivery` to
  publish on the requester's reply topic. Under a flood of bogus requests (``flood_threshold``
  within ``flood_window`` seconds) it moves to a fresh random topic and re-advertises (§V-A:
  "the KMC will generate a new topic for communications and unsubscribe to messages issued to
  the old (and compromised) topic"); a source with ``source_threshold`` bogus requests is
  refused for ``ban`` seconds (§V-A: "rejecting communications from IP addresses that have
  made multiple bogus attempts"). Bogus requests get no answer at all.

Everything is pure: ``now`` and ``rng`` come in as arguments, results come out as values.
The network shells are :mod:`pubguard.net.keyservice.kmc_node` (the endpoint as a pub/sub client, and the
entity's discover-then-request flow) and :mod:`pubguard.net.keyservice.server` (a TDN behind mutual
TLS); the narada broker scheme's rules for the service topics are in
:mod:`pubguard.schemes.narada.broker`.
"""

from __future__ import annotations

import dataclasses
import random as _random
import struct
from collections.abc import Iterable
from typing import Final

import msgpack

from pubguard.crypto import KemPrivateKey, KemPublicKey, SigningKey, random_bytes, unwrap, wrap
from pubguard.crypto.x509 import Certificate, RevocationList, Role, verify_chain
from pubguard.errors import (
    DropError,
    DropReason,
    InvalidToken,
    PubguardError,
    RevokedError,
    ValidationError,
)
from pubguard.keys.kmc import KMC, KeyDelivery, KeyRequest, SecurityToken

__all__ = [
    "DISCOVERY_SKEW",
    "DiscoveryRequest",
    "EndpointResult",
    "KmcEndpoint",
    "TopicAdvertisement",
    "TopicDiscoveryNode",
    "decode_delivery",
    "decode_key_request",
    "encode_delivery",
    "encode_key_request",
    "new_service_topic",
    "open_discovery_reply",
]

DISCOVERY_SKEW: Final = 120.0  # seconds a signed discovery request stays valid
TOPIC_BITS: Final = 128
_ADV_TAG: Final = b"pubguard/narada-kmc-topic/v1"
_REQ_TAG: Final = b"pubguard/narada-discovery/v1"
_REPLY_INFO: Final = b"pubguard/narada-discovery-reply/v1"


def _canon(tag: bytes, *fields: bytes | str | int | float) -> bytes:
    out = bytearray(tag)
    for f in fields:
        if isinstance(f, bool):
            raise ValidationError("bool is not a signed field")
        if isinstance(f, int):
            out += b"i" + struct.pack(">q", f)
        elif isinstance(f, float):
            out += b"f" + struct.pack(">d", f)
        else:
            b = f.encode() if isinstance(f, str) else bytes(f)
            out += b"b" + struct.pack(">I", len(b)) + b
    return bytes(out)


def new_service_topic(rng: _random.Random | None = None) -> str:
    """A fresh random 128-bit topic (hex), like the paper's UUIDs (§V-A)."""
    return "kmc/" + random_bytes(TOPIC_BITS // 8, rng).hex()


@dataclasses.dataclass(frozen=True, slots=True)
class TopicAdvertisement:
    """KMC -> TDNs: the topic the KMC listens on, who may discover it, and a version."""

    kmc: str
    kmc_cert: bytes  # DER
    topic: str
    roles: tuple[str, ...]  # empty: any role
    subjects: tuple[str, ...]  # empty: any subject
    version: int
    issued_at: float
    signature: bytes = b""

    def signed_bytes(self) -> bytes:
        return _canon(
            _ADV_TAG,
            self.kmc,
            self.kmc_cert,
            self.topic,
            len(self.roles),
            *self.roles,
            len(self.subjects),
            *self.subjects,
            self.version,
            float(self.issued_at),
        )

    def to_bytes(self) -> bytes:
        return msgpack.packb(list(dataclasses.astuple(self)), use_bin_type=True)  # type: ignore[no-any-return]

    @classmethod
    def from_bytes(cls, blob: bytes) -> TopicAdvertisement:
        try:
            kmc, cert, topic, roles, subjects, version, issued, sig = msgpack.unpackb(blob)
            adv = cls(kmc, cert, topic, tuple(roles), tuple(subjects), version, issued, sig)
            if not all(isinstance(x, str) for x in (kmc, topic, *adv.roles, *adv.subjects)):
                raise TypeError
            if not isinstance(version, int) or not isinstance(sig, bytes):
                raise TypeError
            return adv
        except (ValueError, TypeError, msgpack.UnpackException):
            raise InvalidToken("malformed advertisement") from None

    def verify(self, ca_cert: Certificate, crl: RevocationList | None, *, now: float) -> None:
        """Provenance (§II-A): signed by a KMC certified by the CA and not revoked."""
        cert = Certificate.from_der(self.kmc_cert)
        verify_chain(cert, ca_cert, crl, now=now, role=Role.KMC)
        if cert.subject != self.kmc:
            raise InvalidToken()
        cert.verify_key.verify(self.signature, self.signed_bytes())

    def names(self, kmc: str) -> bool:
        """Whether ``kmc`` (empty: any) is this KMC's distinguished name or common name."""
        return not kmc or kmc == self.kmc or kmc == Certificate.from_der(self.kmc_cert).name

    def admits(self, cert: Certificate) -> bool:
        """Secure discovery (§II-A): may the holder of ``cert`` learn this topic?"""
        if self.roles and cert.role.value not in self.roles:
            return False
        return not self.subjects or cert.subject in self.subjects


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveryRequest:
    """Entity -> TDN: "which topic does KMC ``kmc`` listen on?", signed, with a KEM key."""

    cert: bytes  # DER
    kmc: str
    kem_public: bytes
    timestamp_ms: int
    nonce: bytes
    signature: bytes = b""

    def signed_bytes(self) -> bytes:
        return _canon(_REQ_TAG, self.cert, self.kmc, self.kem_public, self.timestamp_ms, self.nonce)

    @classmethod
    def signed(
        cls,
        key: SigningKey,
        cert: Certificate,
        kem: KemPrivateKey,
        *,
        kmc: str,
        now: float,
        rng: _random.Random | None = None,
    ) -> DiscoveryRequest:
        r = cls(cert.to_der(), kmc, kem.public.to_bytes(), int(now * 1000), random_bytes(16, rng))
        return dataclasses.replace(r, signature=key.sign(r.signed_bytes()))


def open_discovery_reply(
    blob: bytes, kem: KemPrivateKey, req: DiscoveryRequest
) -> list[TopicAdvertisement]:
    """Entity side: unwrap the TDN's answer to ``req``."""
    plain = unwrap(kem, blob, info=_REPLY_INFO + req.nonce)
    try:
        items = msgpack.unpackb(plain)
        return [TopicAdvertisement.from_bytes(b) for b in items]
    except (ValueError, TypeError, msgpack.UnpackException):
        raise InvalidToken() from None


class TopicDiscoveryNode:
    """A TDN (§II-A): keeps verified KMC topic advertisements, reveals them only to entities
    with valid credentials that the advertisement's restriction admits."""

    def __init__(self, ca_cert: Certificate, crl: RevocationList | None = None) -> None:
        self.ca_cert = ca_cert
        self.crl = crl
        self._ads: dict[str, TopicAdvertisement] = {}

    def update_crl(self, crl: RevocationList, *, now: float) -> None:
        crl.check(self.ca_cert, now)
        self.crl = crl

    def advertise(self, adv: TopicAdvertisement, *, now: float) -> None:
        """Store a KMC's advertisement (a newer version replaces an older one)."""
        adv.verify(self.ca_cert, self.crl, now=now)
        cur = self._ads.get(adv.kmc)
        if cur is not None and cur.version >= adv.version:
            raise DropError(DropReason.REPLAYED, "an advertisement at least as new is stored")
        self._ads[adv.kmc] = adv

    def discover(
        self, req: DiscoveryRequest, *, now: float, rng: _random.Random | None = None
    ) -> bytes:
        """The wrapped list of advertisements the requester may see; raises for bad requests
        (InvalidToken, RevokedError) and DropError(UNAUTHORISED) when nothing is revealed."""
        cert = Certificate.from_der(req.cert)
        verify_chain(cert, self.ca_cert, self.crl, now=now)
        cert.verify_key.verify(req.signature, req.signed_bytes())
        if abs(req.timestamp_ms / 1000.0 - now) > DISCOVERY_SKEW:
            raise InvalidToken()
        ads = [a for a in self._ads.values() if a.names(req.kmc) and a.admits(cert)]
        if not ads:
            raise DropError(DropReason.UNAUTHORISED, "no advertisement for these credentials")
        payload = msgpack.packb([a.to_bytes() for a in ads], use_bin_type=True)
        kem = KemPublicKey.from_bytes(req.kem_public)
        return wrap(kem, payload, info=_REPLY_INFO + req.nonce, rng=rng)


# -- KMC requests and deliveries over the pub/sub network --------------------------------------


def encode_key_request(req: KeyRequest, reply_topic: str) -> bytes:
    return msgpack.packb([reply_topic, *dataclasses.astuple(req)], use_bin_type=True)  # type: ignore[no-any-return]


def decode_key_request(blob: bytes) -> tuple[str, KeyRequest]:
    try:
        reply, cert_pem, ts, topic, kem, sig = msgpack.unpackb(blob)
        if not isinstance(reply, str) or not reply.startswith("reply/"):
            raise TypeError
        return reply, KeyRequest(cert_pem, ts, topic, kem, sig)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise InvalidToken("malformed key request") from None


def encode_delivery(d: KeyDelivery) -> bytes:
    return msgpack.packb(  # type: ignore[no-any-return]
        [d.topic, d.algorithm, d.key_version, d.token.encode(), d.wrapped_key], use_bin_type=True
    )


def decode_delivery(blob: bytes) -> KeyDelivery:
    try:
        topic, alg, version, tok, wrapped = msgpack.unpackb(blob)
        return KeyDelivery(topic, alg, version, SecurityToken.decode(tok), wrapped)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise InvalidToken("malformed key delivery") from None


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointResult:
    """What the driver must do: publish ``reply`` (topic, payload); on ``rotated`` unsubscribe
    ``old_topic``, subscribe to the advertisement's topic and send it to the TDNs."""

    reply: tuple[str, bytes] | None = None
    refused: DropReason | None = None
    rotated: TopicAdvertisement | None = None
    old_topic: str | None = None


class KmcEndpoint:
    """The KMC's presence on the pub/sub network (see the module docstring)."""

    def __init__(
        self,
        kmc: KMC,
        signing_key: SigningKey | None = None,
        *,
        now: float,
        rng: _random.Random | None = None,
        roles: Iterable[Role | str] = (Role.CLIENT,),
        subjects: Iterable[str] = (),
        flood_threshold: int = 50,
        flood_window: float = 10.0,
        source_threshold: int = 5,
        ban: float = 300.0,
    ) -> None:
        if signing_key is None:
            signing_key = kmc._sk  # the KMC's own key (same package)
        if signing_key.public != kmc.cert.verify_key:
            raise ValidationError("the signing key is not the KMC's")
        self.kmc = kmc
        self._sk = signing_key
        self._rng = rng
        self.roles = tuple(Role(r).value for r in roles)
        self.subjects = tuple(subjects)
        self.flood_threshold, self.flood_window = flood_threshold, flood_window
        self.source_threshold, self.ban = source_threshold, ban
        self._bogus: list[float] = []
        self._by_source: dict[str, int] = {}
        self._banned: dict[str, float] = {}
        self.version = 0
        self.advertisement = self._new_topic(now)

    @property
    def topic(self) -> str:
        return self.advertisement.topic

    def sign(self, data: bytes) -> bytes:
        """The KMC's signature (its replies on the pub/sub network are signed, §IV-B)."""
        return self._sk.sign(data)

    def _new_topic(self, now: float) -> TopicAdvertisement:
        self.version += 1
        adv = TopicAdvertisement(
            self.kmc.name,
            self.kmc.cert.to_der(),
            new_service_topic(self._rng),
            self.roles,
            self.subjects,
            self.version,
            float(now),
        )
        return dataclasses.replace(adv, signature=self._sk.sign(adv.signed_bytes()))

    def handle(self, topic: str, payload: bytes, source: str, *, now: float) -> EndpointResult:
        """One message that arrived on ``topic`` from ``source`` (the client link or peer
        identity the broker reports)."""
        until = self._banned.get(source)
        if until is not None and now < until:
            return EndpointResult(refused=DropReason.FLOOD)
        if topic != self.topic:
            return EndpointResult(refused=DropReason.STALE)  # the old, abandoned topic
        try:
            reply, req = decode_key_request(payload)
            delivery = self.kmc.request_key(req, now=now, rng=self._rng)
        except DropError as exc:
            return self._bogus_from(source, now, exc.reason)
        except RevokedError:
            return self._bogus_from(source, now, DropReason.REVOKED)
        except (InvalidToken, PubguardError):
            return self._bogus_from(source, now, DropReason.FORGED)
        return EndpointResult(reply=(reply, encode_delivery(delivery)))

    def _bogus_from(self, source: str, now: float, reason: DropReason) -> EndpointResult:
        n = self._by_source.get(source, 0) + 1
        self._by_source[source] = n
        if n >= self.source_threshold:
            self._banned[source] = now + self.ban
            self._by_source.pop(source, None)
        self._bogus = [t for t in self._bogus if t > now - self.flood_window] + [now]
        if len(self._bogus) >= self.flood_threshold:
            old = self.topic
            self.advertisement = self._new_topic(now)
            self._bogus = []
            return EndpointResult(refused=reason, rotated=self.advertisement, old_topic=old)
        return EndpointResult(refused=reason)

    def banned(self, source: str, now: float) -> bool:
        until = self._banned.get(source)
        return until is not None and now < until
