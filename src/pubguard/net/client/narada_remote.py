"""A narada entity whose tokens and topic keys come from the key service's KMC.

Theory of operation
-------------------
:class:`RemoteNaradaClient` is :class:`~pubguard.schemes.narada.client.NaradaClient` (the
profile's wire forms and checks, unchanged) plus one rule: when it needs the security token
of a topic it does not hold, or whose token has run out, it asks the KMC hosted in the key
service (:mod:`pubguard.net.keyservice.kmc_service`, op ``kmc_key``) with a signed
:class:`~pubguard.keys.kmc_messages.KeyRequest` and a fresh X25519 key, and installs the
:class:`~pubguard.keys.kmc_messages.KeyDelivery` (narada-secure-delivery.txt §IV-E: the token
``A_T^X`` and ``K_T`` wrapped to the entity). The entity's certificate and signing key are
its TLS identity's (the cluster CA is narada's CA, §IV-A).

The KMC's public key, which checks every publisher's token on receipt (§IV-H3), is the pinned
one (``kmc_certs``) or, when none is pinned, the ``kmc_cert`` of the key service's ``info``
answer over the authenticated channel (its certificate must carry the key-service role); it
must carry the ``kmc`` role either way.
"""

from __future__ import annotations

import random as _random
import time
from collections.abc import Iterable
from typing import Final

from pubguard.crypto import KemPrivateKey, SigningKey
from pubguard.crypto.x509 import Certificate, Role
from pubguard.errors import DropError, DropReason, StateError, ValidationError
from pubguard.keys.discovery import decode_delivery
from pubguard.keys.kmc_messages import KeyDelivery, Rights, SecurityToken
from pubguard.model import Filter
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.schemes.base import ProtectedFilter
from pubguard.schemes.eventguard.client import topic_of
from pubguard.schemes.narada.broker import service_kind
from pubguard.schemes.narada.client import NaradaClient

__all__ = ["TOKEN_RENEW_BEFORE", "RemoteNaradaClient"]

#: seconds before a token runs out when the next one is fetched
TOKEN_RENEW_BEFORE: Final = 60.0


class RemoteNaradaClient(NaradaClient):
    """A narada entity fetching its tokens and topic keys from ``keyservice`` on demand."""

    def __init__(
        self,
        signing_key: SigningKey,
        cert: Certificate,
        keyservice: KeyServiceClient,
        *,
        kmc_certs: Iterable[Certificate] = (),
    ) -> None:
        super().__init__(signing_key, cert)
        self._ks = keyservice
        for c in kmc_certs:
            self._trust(c)

    def __repr__(self) -> str:
        return f"RemoteNaradaClient({self.cert.name!r}, topics={len(self.kmc_keys)})"

    def _trust(self, kmc: Certificate) -> None:
        if kmc.role is not Role.KMC:
            raise ValidationError(f"{kmc.name!r} is not a KMC certificate")
        self.kmc_keys[kmc.subject] = kmc.verify_key

    def _kmc_from_info(self) -> None:
        der = self._ks.call("info").get("kmc_cert")
        if type(der) is not bytes:
            raise StateError("this key service hosts no narada KMC")
        self._trust(Certificate.from_der(der))

    def fetch(self, topic: str, *, now: float | None = None) -> KeyDelivery:
        """Ask the KMC for ``topic``'s key and this entity's token, and install them."""
        if not self.kmc_keys:
            self._kmc_from_info()
        kem = KemPrivateKey.generate()
        req = self.key_request(topic, kem, now=time.time() if now is None else now)
        ok = self._ks.call(
            "kmc_key",
            cert=req.cert_pem,
            ts=req.timestamp_ms,
            topic=req.topic,
            kem=req.kem_public,
            sig=req.signature,
        )
        delivery = decode_delivery(ok.get("delivery") or b"")
        self.install(delivery, kem)
        return delivery

    def protect_filter(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        """As the profile's, refused here (one typed error, nothing sent) when the KMC's token
        carries no subscribe right: a broker would drop it (§IV-H3)."""
        topic = topic_of(f)
        if service_kind(topic) is None:
            tok = self.token(topic)
            if not tok.rights.allows(Rights.SUBSCRIBE):
                raise DropError(
                    DropReason.UNAUTHORISED,
                    f"the KMC grants {self.cert.name!r} no subscribe right on {topic!r}",
                )
        return super().protect_filter(f, now=now, rng=rng)

    def token(self, topic: str) -> SecurityToken:
        """This entity's token for ``topic``, fetched when it has none or it runs out."""
        try:
            tok = super().token(topic)
        except StateError:
            return self.fetch(topic).token
        if tok.not_after - time.time() < TOKEN_RENEW_BEFORE:
            return self.fetch(topic).token
        return tok
