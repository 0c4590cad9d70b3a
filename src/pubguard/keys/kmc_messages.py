"""Narada security tokens and KMC request/response messages (narada-secure-delivery.txt §IV).

Pure data and checks, no state: :class:`SecurityToken` is ``A_T^X = S_KMC(C_X, Rights, T,
Duration)`` (§IV-B) with a canonical, length-prefixed encoding; :func:`verify_token` is what a
broker holding only the KMC's key or certificate runs (§IV-H3); the request dataclasses are the
signed entity/owner -> KMC messages of §IV-C..E and :func:`open_delivery` is the entity's side of
the encrypted key delivery (§IV-D/E). The stateful centre is :mod:`pubguard.keys.kmc`.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import struct
from typing import Final

from pubguard.crypto import (
    KemPrivateKey,
    KemPublicKey,
    SecretBytes,
    SigningKey,
    VerifyKey,
    unwrap,
)
from pubguard.crypto.x509 import Certificate, RevocationList, Role, verify_chain
from pubguard.errors import InvalidToken, ValidationError

__all__ = [
    "DEFAULT_TOKEN_LIFETIME",
    "MAX_REQUEST_SKEW",
    "Authorize",
    "KeyDelivery",
    "KeyRequest",
    "RegisterTopic",
    "RevokeEntity",
    "Rights",
    "SecurityToken",
    "delivery_info",
    "open_delivery",
    "verify_token",
]

DEFAULT_TOKEN_LIFETIME: Final = 6 * 3600.0  # narada §VI: tokens "expire after several hours"
MAX_REQUEST_SKEW: Final = 300.0  # a signed request older or newer than this is refused
_TOKEN_TAG: Final = b"pubguard/narada-token/v1"
_REQ_TAG: Final = b"pubguard/narada-request/v1"
_DELIVERY_INFO: Final = b"pubguard/narada-delivery/v1:"


class Rights(enum.StrEnum):
    """An entity's rights over a secure topic (narada §IV-B)."""

    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    BOTH = "both"

    def allows(self, action: Rights | str) -> bool:
        a = Rights(action)
        return self is Rights.BOTH or (a is self and a is not Rights.BOTH)

    @classmethod
    def parse(cls, value: str) -> Rights:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(r.value for r in cls)
            raise ValidationError(f"unknown rights {value!r} (valid: {valid})") from None


# -- canonical encoding ----------------------------------------------------------------------

Field = bytes | str | int


def _enc(*fields: Field) -> bytes:
    """Length-prefixed, typed fields: unambiguous, so no two field lists encode alike."""
    out = bytearray()
    for f in fields:
        if isinstance(f, bool):
            raise TypeError("bool is not a field type")
        if isinstance(f, int):
            out += b"i" + struct.pack(">q", f)
        else:
            b = f.encode() if isinstance(f, str) else bytes(f)
            out += (b"s" if isinstance(f, str) else b"b") + struct.pack(">I", len(b)) + b
    return bytes(out)


def _dec(data: bytes, kinds: str) -> list[Field]:
    """Inverse of :func:`_enc` for the kind string (``i``/``s``/``b`` per field); strict."""
    out: list[Field] = []
    pos = 0
    try:
        for k in kinds:
            if data[pos : pos + 1] != k.encode():
                raise ValueError
            if k == "i":
                out.append(struct.unpack_from(">q", data, pos + 1)[0])
                pos += 9
                continue
            (n,) = struct.unpack_from(">I", data, pos + 1)
            b = data[pos + 5 : pos + 5 + n]
            if len(b) != n:
                raise ValueError
            out.append(b.decode() if k == "s" else b)
            pos += 5 + n
    except (ValueError, struct.error, UnicodeDecodeError):
        raise InvalidToken("malformed token") from None
    if pos != len(data):
        raise InvalidToken("malformed token")
    return out


# -- security token --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SecurityToken:
    """``A_T^X = S_KMC(C_X, Rights, T, Duration)`` (narada §IV-B).

    ``C_X`` is represented by the entity's distinguished name, the SHA-256 fingerprint of its
    certificate and its Ed25519 public key; ``Duration`` by ``[not_before, not_after]`` in whole
    seconds since the Unix epoch; ``token_id`` is a random identifier."""

    kmc: str
    topic: str
    entity: str
    cert_fingerprint: bytes
    entity_key: bytes
    rights: Rights
    not_before: int
    not_after: int
    token_id: bytes
    signature: bytes = b""

    def __post_init__(self) -> None:
        if not isinstance(self.rights, Rights):
            object.__setattr__(self, "rights", Rights.parse(self.rights))
        for name, kind in (("not_before", int), ("not_after", int), ("token_id", bytes)):
            value = getattr(self, name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValidationError(f"token field {name} must be {kind.__name__}")
        if self.not_after < self.not_before:
            raise ValidationError("token validity ends before it starts")

    def signed_bytes(self) -> bytes:
        return _TOKEN_TAG + _enc(
            self.kmc,
            self.topic,
            self.entity,
            self.cert_fingerprint,
            self.entity_key,
            self.rights.value,
            self.not_before,
            self.not_after,
            self.token_id,
        )

    def encode(self) -> bytes:
        body = self.signed_bytes()
        return _enc(body, self.signature)

    @classmethod
    def decode(cls, data: bytes) -> SecurityToken:
        body, sig = _dec(data, "bb")
        assert isinstance(body, bytes) and isinstance(sig, bytes)
        if not body.startswith(_TOKEN_TAG):
            raise InvalidToken("malformed token")
        f = _dec(body[len(_TOKEN_TAG) :], "sssbbsiib")
        try:
            kmc, topic, entity, fp, ek, rights, nb, na, tid = f
            return cls(kmc, topic, entity, fp, ek, rights, nb, na, tid, sig)  # type: ignore[arg-type]
        except ValidationError:
            raise InvalidToken("malformed token") from None

    @property
    def verify_key(self) -> VerifyKey:
        """The entity's key, to check its message signatures (narada §IV-F)."""
        return VerifyKey.from_bytes(self.entity_key)


def verify_token(
    token: SecurityToken | bytes,
    kmc: VerifyKey | Certificate,
    *,
    now: float,
    topic: str | None = None,
    right: Rights | str | None = None,
    ca_cert: Certificate | None = None,
    crl: RevocationList | None = None,
) -> SecurityToken:
    """Broker-side check (narada §IV-H3): the KMC's certificate (if given with ``ca_cert``) is
    valid and not revoked, the token is untampered and within its duration, names ``topic``
    and grants ``right``. Returns the decoded token; raises :class:`InvalidToken` (or
    :class:`RevokedError` when the KMC's certificate is on the CRL)."""
    tok = SecurityToken.decode(token) if isinstance(token, bytes) else token
    if isinstance(kmc, Certificate):
        if ca_cert is not None:
            verify_chain(kmc, ca_cert, crl, now=now, role=Role.KMC)
        key = kmc.verify_key
    else:
        key = kmc
    key.verify(tok.signature, tok.signed_bytes())
    if not tok.not_before <= now <= tok.not_after:
        raise InvalidToken()
    if topic is not None and tok.topic != topic:
        raise InvalidToken()
    if right is not None and not tok.rights.allows(right):
        raise InvalidToken()
    return tok


# -- signed requests -------------------------------------------------------------------------


def _now_field(now: float) -> int:
    return int(now * 1000)  # milliseconds, as narada §V-B timestamps


@dataclasses.dataclass(frozen=True, slots=True)
class _Request(abc.ABC):
    cert_pem: bytes
    timestamp_ms: int

    @abc.abstractmethod
    def fields(self) -> tuple[Field, ...]:
        """The request's own signed fields, after the certificate and timestamp."""

    def signed_bytes(self) -> bytes:
        return _REQ_TAG + _enc(
            type(self).__name__, self.cert_pem, self.timestamp_ms, *self.fields()
        )


def _sign(cls: type, key: SigningKey, cert: Certificate, now: float, **kw: object) -> object:
    unsigned = cls(cert_pem=cert.to_pem(), timestamp_ms=_now_field(now), signature=b"", **kw)
    return dataclasses.replace(unsigned, signature=key.sign(unsigned.signed_bytes()))


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterTopic(_Request):
    """Topic owner -> KMC: register ``topic`` with the owner's key parameters (narada §IV-C)."""

    topic: str
    algorithm: str
    key_bits: int
    signature: bytes

    def fields(self) -> tuple[Field, ...]:
        return (self.topic, self.algorithm, self.key_bits)

    @classmethod
    def signed(
        cls,
        key: SigningKey,
        cert: Certificate,
        *,
        topic: str,
        algorithm: str,
        key_bits: int,
        now: float,
    ) -> RegisterTopic:
        return _sign(cls, key, cert, now, topic=topic, algorithm=algorithm, key_bits=key_bits)  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True, slots=True)
class Authorize(_Request):
    """Topic owner -> KMC: ``entity`` (a certificate subject DN) gets ``rights`` on ``topic``
    from ``not_before`` to ``not_after`` (narada §IV-C, last paragraph)."""

    topic: str
    entity: str
    rights: str
    not_before: int
    not_after: int
    signature: bytes

    def fields(self) -> tuple[Field, ...]:
        return (self.topic, self.entity, self.rights, self.not_before, self.not_after)

    @classmethod
    def signed(
        cls,
        key: SigningKey,
        cert: Certificate,
        *,
        topic: str,
        entity: str,
        rights: Rights | str,
        not_before: float,
        not_after: float,
        now: float,
    ) -> Authorize:
        return _sign(  # type: ignore[return-value]
            cls,
            key,
            cert,
            now,
            topic=topic,
            entity=entity,
            rights=str(rights),
            not_before=int(not_before),
            not_after=int(not_after),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class RevokeEntity(_Request):
    """Topic owner -> KMC: withdraw ``entity``'s authorisation; the topic key is rotated."""

    topic: str
    entity: str
    signature: bytes

    def fields(self) -> tuple[Field, ...]:
        return (self.topic, self.entity)

    @classmethod
    def signed(
        cls, key: SigningKey, cert: Certificate, *, topic: str, entity: str, now: float
    ) -> RevokeEntity:
        return _sign(cls, key, cert, now, topic=topic, entity=entity)  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True, slots=True)
class KeyRequest(_Request):
    """Entity -> KMC: send me ``topic``'s key and my token, wrapped to ``kem_public`` (§IV-E)."""

    topic: str
    kem_public: bytes
    signature: bytes

    def fields(self) -> tuple[Field, ...]:
        return (self.topic, self.kem_public)

    @classmethod
    def signed(
        cls,
        key: SigningKey,
        cert: Certificate,
        *,
        topic: str,
        kem_public: KemPublicKey,
        now: float,
    ) -> KeyRequest:
        return _sign(cls, key, cert, now, topic=topic, kem_public=kem_public.to_bytes())  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True, slots=True)
class KeyDelivery:
    """KMC -> entity: the token (public) and the topic key wrapped to the entity (§IV-E)."""

    topic: str
    algorithm: str
    key_version: int
    token: SecurityToken
    wrapped_key: bytes

    def __repr__(self) -> str:
        return (
            f"KeyDelivery(topic={self.topic!r}, version={self.key_version}, alg={self.algorithm})"
        )


def delivery_info(topic: str, version: int, token: SecurityToken) -> bytes:
    return _DELIVERY_INFO + _enc(topic, version, token.encode())


def open_delivery(delivery: KeyDelivery, kem_private: KemPrivateKey) -> SecretBytes:
    """Entity side: unwrap the topic key (any tampering, including of the token, fails)."""
    info = delivery_info(delivery.topic, delivery.key_version, delivery.token)
    return SecretBytes(unwrap(kem_private, delivery.wrapped_key, info=info))
