"""Narada's Key Management Centre hosted in the key service (narada-secure-delivery.txt §IV).

Theory of operation
-------------------
A cluster with a ``[keyservice]`` runs one KMC inside its key-service process, so a client
that holds only its TLS identity gets narada tokens and topic keys as it gets psguard keys or
eventguard permits: over the mutual-TLS connection, in its own certificate's name.

- **CA.** The cluster's CA is narada's CA (§IV-A): a client's TLS certificate (Ed25519) is its
  entity certificate ``C_X`` and its TLS key signs its narada messages (§IV-F). Brokers get that
  CA and the KMC's certificate in ``broker-keys.json`` (``ca_cert``, ``kmc_certs``).
- **KMC key.** The KMC's Ed25519 signing key and the key that seals topic keys at rest are
  derived from the process's KMC secret (:func:`kmc_signing_key`, :func:`kmc_storage_key`;
  HKDF-SHA256, which the cluster derives from its master, ``pubguard/cluster/narada-kmc``), so
  a restart signs with the same key and opens the same sealed topic keys. Its certificate
  (role ``kmc``, issued by ``cluster up``, which holds the CA) must certify that key, or the
  service refuses to start.
- **Topics and rights (§IV-C).** Every topic a client asks for is registered on first use with
  the KMC itself as owner (AES-256-GCM, a random ``K_T`` kept sealed in SQLite). The owner's
  authorisations follow the deployment's policy: the right to subscribe to ``T`` when the
  policy lets the entity subscribe to a filter with ``topic = T`` (or lets everyone
  subscribe), to publish on ``T`` when ``T`` is one of its publication scopes (or everyone may
  publish). An entity with neither right is refused (``unauthorised``).
- **Tokens (§IV-B, §IV-E).** ``kmc_key {req}``: the entity's signed
  :class:`~pubguard.keys.kmc_messages.KeyRequest` (its certificate, a timestamp, the topic and
  an X25519 key). The certificate must be the caller's own TLS certificate (no relaying); the
  KMC checks chain, CRL, signature and freshness and answers with the signed security token
  ``A_T^X = S_KMC(C_X, Rights, T, Duration)`` and ``K_T`` wrapped to the request's key
  (:func:`~pubguard.keys.discovery.encode_delivery`).

The paper has entities reach the KMC by publishing on its topic (§IV-B footnote 1, kept in
:mod:`pubguard.net.keyservice.kmc_node`); here the key service's authenticated channel carries
the same signed request and the same delivery. ``info`` answers ``kmc_cert`` (DER) so a client
can check tokens on receipt.
"""

from __future__ import annotations

import random as _random
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pubguard.crypto import SecretBytes, SigningKey, hkdf
from pubguard.crypto.x509 import Certificate, RevocationList
from pubguard.keys.discovery import encode_delivery
from pubguard.keys.kmc import KMC, Authorize, KeyRequest, RegisterTopic, Rights
from pubguard.keys.kmc_messages import DEFAULT_TOKEN_LIFETIME
from pubguard.model import Filter
from pubguard.model.constraints import Op as FilterOp
from pubguard.net.keyservice.protocol import Caller, Op, Refused, field
from pubguard.store import Database

__all__ = [
    "KMC_ALGORITHM",
    "KMC_DB",
    "KmcService",
    "kmc_signing_key",
    "kmc_storage_key",
    "policy_rights",
]

KMC_DB: Final = "keyservice-kmc.db"  # in the key service's state folder: sealed topic keys
KMC_ALGORITHM: Final = ("AES-256-GCM", 256)
_SIGNING_LABEL: Final = b"pubguard/narada-kmc/signing"
_STORAGE_LABEL: Final = b"pubguard/narada-kmc/storage"


def kmc_signing_key(secret: SecretBytes | bytes) -> SigningKey:
    """The hosted KMC's Ed25519 key: ``HKDF-SHA256(secret, info="pubguard/narada-kmc/signing")``."""
    return SigningKey.from_seed(hkdf(secret, info=_SIGNING_LABEL))


def kmc_storage_key(secret: SecretBytes | bytes) -> SecretBytes:
    """The key sealing topic keys at rest (``.../storage``)."""
    return SecretBytes(hkdf(secret, info=_STORAGE_LABEL))


def _topics(filters: Iterable[Filter | str]) -> set[str]:
    out = set()
    for f in filters:
        flt = Filter.parse(f) if isinstance(f, str) else f
        for c in flt.constraints:
            if c.name == "topic" and c.op is FilterOp.EQ and isinstance(c.value, str):
                out.add(c.value)
    return out


def policy_rights(
    subscribers: Mapping[str, Iterable[Filter | str]] | None,
    publishers: Mapping[str, Iterable[str]] | None,
    entity: str,
    topic: str,
) -> Rights | None:
    """The narada rights the deployment's policy gives ``entity`` on ``topic`` (see the module
    docstring; None: neither right)."""
    sub = subscribers is None or topic in _topics(subscribers.get(entity, ()))
    pub = publishers is None or topic in set(publishers.get(entity, ()))
    if sub and pub:
        return Rights.BOTH
    if sub:
        return Rights.SUBSCRIBE
    return Rights.PUBLISH if pub else None


class KmcService:
    """The hosted KMC as key-service ops (see the module docstring)."""

    def __init__(
        self,
        secret: SecretBytes | bytes,
        *,
        cert: Certificate,
        ca_cert: Certificate,
        db: Database,
        subscribers: Mapping[str, Iterable[Filter | str]] | None = None,
        publishers: Mapping[str, Iterable[str]] | None = None,
        crl: RevocationList | None = None,
        token_lifetime: float = DEFAULT_TOKEN_LIFETIME,
    ) -> None:
        self._sk = kmc_signing_key(secret)
        # ValidationError unless ``cert`` certifies the derived key and has the kmc role
        self.kmc = KMC(
            db,
            signing_key=self._sk,
            cert=cert,
            ca_cert=ca_cert,
            storage_key=kmc_storage_key(secret),
            crl=crl,
            token_lifetime=token_lifetime,
        )
        self.cert = cert
        self._subscribers, self._publishers = subscribers, publishers
        self._lifetime = token_lifetime
        self._registered = {t.topic for t in self.kmc.topics()}

    def __repr__(self) -> str:
        return f"KmcService({self.kmc.name!r}, topics={len(self._registered)})"

    def ops(self) -> dict[str, Op]:
        return {"kmc_key": self.key}

    def info(self) -> dict[str, Any]:
        return {"kmc_cert": self.cert.to_der()}

    def _own(self, topic: str, entity: str, rights: Rights, now: float) -> None:
        """Register ``topic`` (first use) and authorise ``entity`` as its owner, the KMC (§IV-C)."""
        if topic not in self._registered:
            alg, bits = KMC_ALGORITHM
            req = RegisterTopic.signed(
                self._sk, self.cert, topic=topic, algorithm=alg, key_bits=bits, now=now
            )
            self.kmc.register_topic(req, now=now)
            self._registered.add(topic)
        auth = Authorize.signed(
            self._sk,
            self.cert,
            topic=topic,
            entity=entity,
            rights=rights,
            not_before=now - 60,
            not_after=now + self._lifetime,
            now=now,
        )
        self.kmc.authorize(auth, now=now)

    def key(
        self, req: dict[str, Any], caller: Caller, now: float, rng: _random.Random | None
    ) -> dict[str, Any]:
        if caller.role != "client":
            raise Refused("unauthorised", "narada tokens are issued to client certificates only")
        kr = KeyRequest(
            field(req, "cert", bytes),
            field(req, "ts", int),
            field(req, "topic", str),
            field(req, "kem", bytes),
            field(req, "sig", bytes),
        )
        cert = Certificate.from_pem(kr.cert_pem)  # InvalidToken if malformed
        if cert.name != caller.name:
            raise Refused("unauthorised", "credentials of another identity")
        rights = policy_rights(self._subscribers, self._publishers, caller.name, kr.topic)
        if rights is None:
            raise Refused(
                "unauthorised",
                f"identity {caller.name!r} may neither publish nor subscribe on {kr.topic!r}",
            )
        self._own(kr.topic, cert.subject, rights, now)
        delivery = self.kmc.request_key(kr, now=now, rng=rng)
        return {"delivery": encode_delivery(delivery)}
