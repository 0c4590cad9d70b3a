"""Narada Key Management Centre (narada-secure-delivery.txt §IV-B..E).

Theory of operation
-------------------
A KMC manages *secure topics*. For each it (1) generates the secret symmetric topic key
``K_T`` (§IV-B, first function) with the algorithm and key size the topic owner chose when
registering (§IV-C; validated against :data:`pubguard.crypto.ALGORITHMS`, where AEAD makes the
paper's padding scheme moot), (2) keeps the list of authorised entities with their rights
(publish, subscribe or both) and validity period, (3) issues security tokens

    ``A_T^X = S_KMC(C_X, Rights, T, Duration)``            (§IV-B)

and (4) delivers ``K_T`` with the token encrypted to the requesting entity's public key
(§IV-D/E; here X25519 + HKDF + AEAD via :func:`pubguard.crypto.wrap` in place of RSA).

Every request is a frozen dataclass signed with the sender's Ed25519 key and carrying its
CA-issued certificate; the KMC verifies the chain and the CRL (§IV-H1), the signature and the
timestamp before it looks at anything else. The token is self-contained: a broker holding only
the KMC's public key (or certificate, checked against the CA and CRL) verifies it with
:func:`verify_token` (§IV-H3: signature, topic, rights), and it carries the entity's public key
so the broker can check the publisher's message signature (§IV-F) without the certificate.

Refusals are typed: a certificate or authorisation that was revoked -> :class:`RevokedError`;
no authorisation, the wrong owner or an authorisation outside its validity ->
:class:`DropError` with ``DropReason.UNAUTHORISED``; bad signatures, stale requests, tampered or
expired tokens -> the opaque :class:`InvalidToken`; unknown topics -> :class:`StateError`.

State lives in SQLite (:mod:`pubguard.store`) and survives restarts. Topic keys are stored only
sealed (AEAD) under the KMC *storage key*, bound to topic and key version as associated data;
the plaintext key never touches the file. Revoking an entity rotates the topic key (new
version), so the revoked entity's copy stops opening new events. Time (``now``, seconds since
the Unix epoch) and randomness (``rng``) are arguments.
"""

from __future__ import annotations

import dataclasses
import random as _random
from collections.abc import Sequence
from typing import Final

from pubguard.crypto import (
    ALGORITHMS,
    KemPublicKey,
    SecretBytes,
    SigningKey,
    aad_for,
    open_,
    random_bytes,
    seal,
    wrap,
)
from pubguard.crypto.x509 import Certificate, RevocationList, Role, verify_chain
from pubguard.errors import (
    DropError,
    DropReason,
    InvalidToken,
    RevokedError,
    StateError,
    ValidationError,
)
from pubguard.keys.kmc_messages import (
    DEFAULT_TOKEN_LIFETIME,
    MAX_REQUEST_SKEW,
    Authorize,
    KeyDelivery,
    KeyRequest,
    RegisterTopic,
    RevokeEntity,
    Rights,
    SecurityToken,
    _Request,
    delivery_info,
    open_delivery,
    verify_token,
)
from pubguard.store import Database, Migration

__all__ = [
    "DEFAULT_TOKEN_LIFETIME",
    "KMC",
    "MAX_REQUEST_SKEW",
    "Authorize",
    "KeyDelivery",
    "KeyRequest",
    "RegisterTopic",
    "RevokeEntity",
    "Rights",
    "SecurityToken",
    "TopicInfo",
    "open_delivery",
    "verify_token",
]


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    """A registered secure topic (no key material)."""

    topic: str
    owner: str
    algorithm: str
    key_bits: int
    key_version: int
    created: float


@dataclasses.dataclass(frozen=True, slots=True)
class _AuthRow:
    topic: str
    entity: str
    rights: str
    not_before: float
    not_after: float
    revoked: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _KeyRow:
    topic: str
    version: int
    sealed_key: bytes
    created: float


VERIFIED_CACHE_SIZE: Final = 4096

_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE kmc_topics (topic TEXT PRIMARY KEY, owner TEXT NOT NULL,"
            " algorithm TEXT NOT NULL, key_bits INTEGER NOT NULL, key_version INTEGER NOT NULL,"
            " created REAL NOT NULL)",
            "CREATE TABLE kmc_keys (topic TEXT NOT NULL REFERENCES kmc_topics(topic),"
            " version INTEGER NOT NULL, sealed_key BLOB NOT NULL, created REAL NOT NULL,"
            " PRIMARY KEY (topic, version))",
            "CREATE TABLE kmc_auth (topic TEXT NOT NULL REFERENCES kmc_topics(topic),"
            " entity TEXT NOT NULL, rights TEXT NOT NULL, not_before REAL NOT NULL,"
            " not_after REAL NOT NULL, revoked INTEGER NOT NULL, PRIMARY KEY (topic, entity))",
        ),
    ),
)


class KMC:
    """A Key Management Centre over a :class:`~pubguard.store.Database` (narada §IV-B)."""

    __slots__ = (
        "_ca",
        "_crl",
        "_db",
        "_lifetime",
        "_sk",
        "_storage",
        "_verified",
        "cert",
        "name",
    )

    COMPONENT: Final = "narada_kmc"

    def __init__(
        self,
        db: Database,
        *,
        signing_key: SigningKey,
        cert: Certificate,
        ca_cert: Certificate,
        storage_key: SecretBytes,
        crl: RevocationList | None = None,
        token_lifetime: float = DEFAULT_TOKEN_LIFETIME,
    ) -> None:
        if cert.verify_key != signing_key.public:
            raise ValidationError("the KMC certificate does not match its signing key")
        if cert.role is not Role.KMC:
            raise ValidationError(f"certificate role is {cert.role.value}, not kmc")
        if len(storage_key) < 16:
            raise ValidationError("the storage key must be at least 128 bits")
        db.migrate(self.COMPONENT, _MIGRATIONS)
        self._db = db
        self._sk = signing_key
        self.cert = cert
        self.name = cert.subject
        self._ca = ca_cert
        if crl is not None:
            crl.check(ca_cert, crl.last_update)  # signed by our CA (freshness: per request)
        self._crl = crl
        self._verified: dict[bytes, None] = {}  # fingerprints whose CA signature checked out
        self._storage = storage_key
        self._lifetime = token_lifetime

    def update_crl(self, crl: RevocationList, *, now: float) -> None:
        """Install a newer CRL from the CA (narada §IV-A: the CA notifies KMCs)."""
        crl.check(self._ca, now)
        self._crl = crl

    # -- request authentication -------------------------------------------------------------

    def _check_certificate(self, cert: Certificate, now: float) -> None:
        """Chain, validity and revocation (narada §IV-H1). The CA signature of a certificate
        is verified once and remembered by fingerprint (bounded); validity and the CRL are
        checked on every call, failing closed on a stale CRL."""
        fp = cert.fingerprint
        if fp in self._verified:
            if not cert.not_before.timestamp() <= now <= cert.not_after.timestamp():
                raise InvalidToken()
        else:
            verify_chain(cert, self._ca, now=now)
            if len(self._verified) >= VERIFIED_CACHE_SIZE:
                self._verified.pop(next(iter(self._verified)))
            self._verified[fp] = None
        crl = self._crl
        if crl is not None:
            nxt = crl.next_update
            if now < crl.last_update.timestamp() or (nxt is not None and now > nxt.timestamp()):
                raise InvalidToken()
            if crl.is_revoked(cert):
                raise RevokedError(
                    f"certificate {cert.subject} (serial {cert.serial:x}) is revoked"
                )

    def _authenticate(self, req: _Request, signature: bytes, now: float) -> Certificate:
        cert = Certificate.from_pem(req.cert_pem)
        self._check_certificate(cert, now)  # RevokedError / InvalidToken
        cert.verify_key.verify(signature, req.signed_bytes())
        if abs(req.timestamp_ms / 1000.0 - now) > MAX_REQUEST_SKEW:
            raise InvalidToken()
        return cert

    def _topic(self, topic: str) -> TopicInfo:
        info = self._db.select_one(TopicInfo, "kmc_topics", {"topic": topic})
        if info is None:
            raise StateError(f"unknown secure topic {topic!r}")
        return info

    def _owned(self, req: RegisterTopic | Authorize | RevokeEntity, now: float) -> TopicInfo:
        cert = self._authenticate(req, req.signature, now)
        info = self._topic(req.topic)
        if cert.subject != info.owner:
            raise DropError(DropReason.UNAUTHORISED, "only the topic owner may do this")
        return info

    # -- topic owner operations (narada §IV-C) ----------------------------------------------

    def register_topic(
        self, req: RegisterTopic, *, now: float, rng: _random.Random | None = None
    ) -> TopicInfo:
        if not req.topic:
            raise ValidationError("topic must not be empty")
        spec = ALGORITHMS.get(req.algorithm)
        if spec is None:
            valid = ", ".join(ALGORITHMS)
            raise ValidationError(f"unknown algorithm {req.algorithm!r} (valid: {valid})")
        if req.key_bits != spec[1] * 8:
            raise ValidationError(
                f"{req.algorithm} takes a {spec[1] * 8}-bit key, not {req.key_bits} bits"
            )
        owner = self._authenticate(req, req.signature, now)
        info = TopicInfo(req.topic, owner.subject, req.algorithm, req.key_bits, 1, now)
        with self._db.transaction():
            if self._db.select_one(TopicInfo, "kmc_topics", {"topic": req.topic}) is not None:
                raise StateError(f"secure topic {req.topic!r} is already registered")
            self._db.insert("kmc_topics", info)
            self._store_key(info, 1, now, rng)
        return info

    def authorize(self, req: Authorize, *, now: float) -> None:
        rights = Rights.parse(req.rights)
        if not req.entity:
            raise ValidationError("entity must be a certificate subject name")
        if req.not_after <= req.not_before:
            raise ValidationError("authorisation validity ends before it starts")
        info = self._owned(req, now)
        row = _AuthRow(info.topic, req.entity, rights.value, req.not_before, req.not_after, False)
        with self._db.transaction():
            self._db.insert("kmc_auth", row, replace=True)

    def revoke(self, req: RevokeEntity, *, now: float, rng: _random.Random | None = None) -> int:
        """Revoke ``entity`` on ``topic`` and rotate the topic key; returns the new version."""
        info = self._owned(req, now)
        with self._db.transaction():
            changed = self._db.execute(
                "UPDATE kmc_auth SET revoked = 1 WHERE topic = ? AND entity = ?",
                (info.topic, req.entity),
            )
            if not changed:
                raise StateError(f"{req.entity!r} is not authorised on {info.topic!r}")
            return self._rotate(info, now, rng)

    def rotate(self, topic: str, *, now: float, rng: _random.Random | None = None) -> int:
        """Periodic rekeying (narada §IV-C: shorter key lifetimes limit lost keys)."""
        with self._db.transaction():
            return self._rotate(self._topic(topic), now, rng)

    def _rotate(self, info: TopicInfo, now: float, rng: _random.Random | None) -> int:
        version = info.key_version + 1
        self._db.execute(
            "UPDATE kmc_topics SET key_version = ? WHERE topic = ?", (version, info.topic)
        )
        self._store_key(info, version, now, rng)
        return version

    # -- keys at rest ---------------------------------------------------------------------

    @staticmethod
    def _key_aad(topic: str, version: int) -> bytes:
        return aad_for("narada-kmc-topic-key", topic, version)

    def _store_key(
        self, info: TopicInfo, version: int, now: float, rng: _random.Random | None
    ) -> None:
        key = random_bytes(info.key_bits // 8, rng)  # narada §IV-B: KMC generates K_T
        sealed = seal(self._storage, key, aad=self._key_aad(info.topic, version), rng=rng)
        self._db.insert("kmc_keys", _KeyRow(info.topic, version, sealed, now))

    def _topic_key(self, topic: str, version: int) -> SecretBytes:
        row = self._db.select_one(_KeyRow, "kmc_keys", {"topic": topic, "version": version})
        if row is None:
            raise StateError(f"no key version {version} for {topic!r}")
        return SecretBytes(open_(self._storage, row.sealed_key, aad=self._key_aad(topic, version)))

    # -- tokens and key delivery (narada §IV-B, §IV-E) ----------------------------------------

    def _authorisation(self, topic: str, cert: Certificate, now: float) -> _AuthRow:
        row = self._db.select_one(_AuthRow, "kmc_auth", {"topic": topic, "entity": cert.subject})
        if row is None:
            self._topic(topic)  # an unknown topic is a StateError, not a refusal
            raise DropError(
                DropReason.UNAUTHORISED, f"{cert.subject} is not authorised on {topic!r}"
            )
        if row.revoked:
            raise RevokedError(f"{cert.subject} was revoked on {topic!r}")
        if not row.not_before <= now < row.not_after:
            raise DropError(
                DropReason.UNAUTHORISED, f"authorisation of {cert.subject} is not valid now"
            )
        return row

    def issue_token(
        self, topic: str, cert: Certificate, *, now: float, rng: _random.Random | None = None
    ) -> SecurityToken:
        """Sign ``A_T^X`` for an authorised, already authenticated entity."""
        auth = self._authorisation(topic, cert, now)
        return self._sign_token(topic, cert, auth, now, rng)

    def _sign_token(
        self,
        topic: str,
        cert: Certificate,
        auth: _AuthRow,
        now: float,
        rng: _random.Random | None,
    ) -> SecurityToken:
        not_after = min(auth.not_after, now + self._lifetime, cert.not_after.timestamp())
        unsigned = SecurityToken(
            kmc=self.name,
            topic=topic,
            entity=cert.subject,
            cert_fingerprint=cert.fingerprint,
            entity_key=cert.verify_key.to_bytes(),
            rights=Rights(auth.rights),
            not_before=int(now),
            not_after=max(int(now), int(not_after)),
            token_id=random_bytes(16, rng),
        )
        return dataclasses.replace(unsigned, signature=self._sk.sign(unsigned.signed_bytes()))

    def request_key(
        self, req: KeyRequest, *, now: float, rng: _random.Random | None = None
    ) -> KeyDelivery:
        """Authenticate the entity, check its authorisation, and deliver key + token (§IV-E)."""
        cert = self._authenticate(req, req.signature, now)
        info = self._topic(req.topic)
        auth = self._authorisation(info.topic, cert, now)
        kem = KemPublicKey.from_bytes(req.kem_public)
        token = self._sign_token(info.topic, cert, auth, now, rng)
        key = self._topic_key(info.topic, info.key_version)
        info_bytes = delivery_info(info.topic, info.key_version, token)
        wrapped = wrap(kem, key.reveal(), info=info_bytes)
        return KeyDelivery(info.topic, info.algorithm, info.key_version, token, wrapped)

    # -- inspection ------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        return self._db.select(TopicInfo, "kmc_topics", order_by="topic")

    def entities(self, topic: str) -> list[tuple[str, Rights, float, float, bool]]:
        self._topic(topic)
        rows = self._db.select(_AuthRow, "kmc_auth", {"topic": topic}, order_by="entity")
        return [(r.entity, Rights(r.rights), r.not_before, r.not_after, r.revoked) for r in rows]

    def key_versions(self, topic: str) -> Sequence[int]:
        return [
            r.version for r in self._db.select(_KeyRow, "kmc_keys", {"topic": topic}, "version")
        ]

    def __repr__(self) -> str:
        return f"KMC({self.name!r})"
