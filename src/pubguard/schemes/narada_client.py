"""Client face of the narada profile: publishers and subscribers holding KMC-issued topic keys
and security tokens (narada-secure-delivery.txt §IV-E..G, §V-B).

Theory of operation
-------------------
An entity has a CA-issued certificate and the matching Ed25519 key. For each secure topic it
obtains, from the topic's KMC, a :class:`~pubguard.keys.kmc.KeyDelivery` (the token, and the
topic key wrapped to its X25519 key) and installs it with :meth:`NaradaClient.install`.

Every message it sends carries the token, the certificate (DER), a millisecond timestamp and a
sequence number that orders messages within one millisecond (§V-B), and its signature
(:func:`pubguard.schemes.narada.signed_digest`). A publication encrypts ``M^P`` (all
attributes but ``topic``, the type and the payload) with the topic key under AEAD bound to the
topic, key version and event id (§IV-F). :meth:`open_event` checks the publisher's token (KMC
signature, topic, publish right, duration) and signature before decrypting, so a subscriber
never accepts a payload a broker could have forged or swapped.
"""

from __future__ import annotations

import random as _random
from collections.abc import Mapping
from typing import Any

import msgpack

from pubguard.crypto import (
    KemPrivateKey,
    SecretBytes,
    SigningKey,
    VerifyKey,
    open_,
    seal,
)
from pubguard.crypto.x509 import Certificate
from pubguard.errors import InvalidToken, StateError, ValidationError
from pubguard.keys.kmc_messages import (
    KeyDelivery,
    KeyRequest,
    Rights,
    SecurityToken,
    open_delivery,
    verify_token,
)
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.base import ProtectedEvent, ProtectedFilter
from pubguard.schemes.eventguard_client import topic_of
from pubguard.schemes.narada import NARADA, payload_aad, signed_digest
from pubguard.schemes.plain import new_event_id

__all__ = ["NaradaClient"]

TOPIC = "topic"


class NaradaClient:
    """An entity on the narada profile. ``kmc_keys`` maps KMC subject names to their public keys
    (from their certificates) for checking publishers' tokens on receipt."""

    profile = NARADA

    def __init__(
        self,
        signing_key: SigningKey,
        cert: Certificate,
        *,
        kmc_keys: Mapping[str, VerifyKey] | None = None,
    ) -> None:
        if cert.verify_key != signing_key.public:
            raise ValidationError("the certificate does not match the signing key")
        self._sk = signing_key
        self.cert = cert
        self._cert_der = cert.to_der()
        self.kmc_keys: dict[str, VerifyKey] = dict(kmc_keys or {})
        self._tokens: dict[str, SecurityToken] = {}
        self._keys: dict[tuple[str, int], SecretBytes] = {}
        self._latest: dict[str, int] = {}
        self._last = (-1, -1)

    def __repr__(self) -> str:
        return f"NaradaClient({self.cert.subject!r}, topics={sorted(self._tokens)})"

    # -- keys and tokens -------------------------------------------------------------------------
    def key_request(self, topic: str, kem: KemPrivateKey, *, now: float) -> KeyRequest:
        """The signed request for ``topic``'s key and this entity's token (§IV-E)."""
        return KeyRequest.signed(self._sk, self.cert, topic=topic, kem_public=kem.public, now=now)

    def install(self, delivery: KeyDelivery, kem: KemPrivateKey) -> None:
        """Unwrap and keep a KMC delivery (the token must be this entity's)."""
        if delivery.token.cert_fingerprint != self.cert.fingerprint:
            raise ValidationError("this token was issued to another entity")
        key = open_delivery(delivery, kem)
        self._tokens[delivery.topic] = delivery.token
        self._keys[(delivery.topic, delivery.key_version)] = key
        self._latest[delivery.topic] = max(self._latest.get(delivery.topic, 0),
                                           delivery.key_version)  # fmt: skip

    def token(self, topic: str) -> SecurityToken:
        tok = self._tokens.get(topic)
        if tok is None:
            raise StateError(f"no security token for {topic!r}: request it from the KMC")
        return tok

    def _stamp(self, now: float) -> tuple[int, int]:
        """(ms timestamp, sequence) strictly increasing across this entity's messages (§V-B)."""
        ts = int(now * 1000)
        last_ts, last_seq = self._last
        self._last = (ts, 0) if ts > last_ts else (last_ts, last_seq + 1)
        return self._last

    # -- subscriptions ----------------------------------------------------------------------------
    def _filter(self, f: Filter, op: str, now: float) -> ProtectedFilter:
        topic = topic_of(f)
        tok = self.token(topic)
        blob = tok.encode()
        ts, seq = self._stamp(now)
        digest = signed_digest(op, "", topic, ts, seq, until=tok.not_after, token=blob)
        meta = {"tok": blob, "cert": self._cert_der, "ts": ts, "seq": seq,
                "sig": self._sk.sign(digest)}  # fmt: skip
        return ProtectedFilter({"topic": topic, "until": tok.not_after}, meta)

    def protect_filter(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        return self._filter(f, "subscribe", now)

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        return self._filter(f, "advertise", now)

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None, op: str = "unsubscribe"
    ) -> dict[str, Any]:
        """The signed withdrawal of this entity's subscription to ``f`` (or ``op="unadvertise"``).
        Must be made with the same token the subscription carried."""
        topic = topic_of(f)
        tok = self.token(topic)
        ts, seq = self._stamp(now)
        digest = signed_digest(op, "", topic, ts, seq, until=tok.not_after, token=tok.encode())
        return {"ts": ts, "seq": seq, "sig": self._sk.sign(digest)}

    def unadvertise_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> dict[str, Any]:
        return self.unsubscribe_meta(f, now=now, rng=rng, op="unadvertise")

    # -- publications ----------------------------------------------------------------------------
    def protect_event(
        self, event: Event, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedEvent:
        topic = event.get(TOPIC)
        if not isinstance(topic, str) or not topic:
            raise ValidationError("a narada event needs a string 'topic' attribute")
        tok = self.token(topic)
        kv = self._latest[topic]
        eid = event.id if event.id is not None else new_event_id(rng)
        attrs = {k: v for k, v in event.attrs.items() if k != TOPIC}
        mp = msgpack.packb({"a": attrs, "t": event.type, "p": event.payload}, use_bin_type=True)
        body = seal(self._keys[(topic, kv)], mp, aad=payload_aad(topic, kv, eid), rng=rng)
        blob = tok.encode()
        ts, seq = self._stamp(now)
        digest = signed_digest("publish", eid, topic, ts, seq, kv=kv, body=body, token=blob)
        meta = {"tok": blob, "cert": self._cert_der, "ts": ts, "seq": seq, "kv": kv,
                "sig": self._sk.sign(digest)}  # fmt: skip
        return ProtectedEvent(eid, {"topic": topic}, body, meta)

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        """Verify the publisher (§III: "validate the signature") and decrypt."""
        try:
            topic = routing["topic"]
            blob, kv, ts, seq, sig = (meta[k] for k in ("tok", "kv", "ts", "seq", "sig"))
            tok = SecurityToken.decode(blob)
            kmc = self.kmc_keys.get(tok.kmc)
            if kmc is None:
                raise InvalidToken()
            verify_token(tok, kmc, now=now, topic=topic, right=Rights.PUBLISH)
            digest = signed_digest("publish", event_id, topic, ts, seq, kv=kv, body=body,
                                   token=blob)  # fmt: skip
            tok.verify_key.verify(sig, digest)
            key = self._keys.get((topic, kv))
            if key is None:
                raise InvalidToken()
            mp = msgpack.unpackb(open_(key, body, aad=payload_aad(topic, kv, event_id)), raw=False)
            attrs = dict(mp["a"])
            attrs[TOPIC] = topic
            return Event(attrs, id=event_id, type=mp["t"], payload=mp["p"])
        except (KeyError, TypeError, ValueError, ValidationError):
            raise InvalidToken() from None
