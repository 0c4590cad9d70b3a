"""Client face of the narada profile: publishers and subscribers holding KMC-issued topic keys
and security tokens (narada-secure-delivery.txt §IV-E..G, §V-B).

Theory of operation
-------------------
An entity has a CA-issued certificate and the matching Ed25519 key. For each secure topic it
obtains, from the topic's KMC, a :class:`~pubguard.keys.kmc.KeyDelivery` (the token, and the
topic key wrapped to its X25519 key) and installs it with :meth:`NaradaClient.install`.

Every message it sends carries the token, the certificate (DER), a millisecond timestamp and a
sequence number that orders messages within one millisecond (§V-B), and its signature
(:func:`pubguard.schemes.narada.broker.signed_digest`). A publication encrypts ``M^P`` (all
attributes but ``topic``, the type and the payload) with the topic key under AEAD bound to the
topic, key version and event id (§IV-F). :meth:`open_event` checks the publisher's token (KMC
signature, topic, publish right, duration) and signature before decrypting, so a subscriber
never accepts a payload a broker could have forged or swapped.

KMC service topics (§IV-B, §V-A; see :mod:`pubguard.schemes.narada.broker`). For a ``kmc/...`` topic
:meth:`NaradaClient.protect_event` sends the event's payload (an encoded key request) as is,
with ``meta {src}``; for a ``reply/...`` topic :meth:`NaradaClient.protect_filter` signs the
subscription with the entity's certificate and :meth:`NaradaClient.open_event` accepts only a
delivery signed by a KMC in ``kmc_keys``. :class:`KmcScheme` is the KMC's own face: it
subscribes to its listening topic and publishes signed replies.
"""

from __future__ import annotations

import random as _random
from collections.abc import Mapping
from functools import partial
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
from pubguard.keys.discovery import DiscoveryRequest
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
from pubguard.schemes.base import ClientScheme, ProtectedEvent, ProtectedFilter
from pubguard.schemes.common.verified import VerifiedCredentials
from pubguard.schemes.common.wire_id import WireIds
from pubguard.schemes.eventguard.client import topic_of
from pubguard.schemes.narada.broker import NARADA, payload_aad, service_kind, signed_digest
from pubguard.schemes.plain import new_event_id

__all__ = ["REPLY_LIFETIME", "KmcScheme", "NaradaClient"]

TOPIC = "topic"
REPLY_LIFETIME = 600  # seconds a reply-topic subscription stays valid


class _Stamper:
    """(ms timestamp, sequence) strictly increasing across one sender's messages (§V-B)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = (-1, -1)

    def __call__(self, now: float) -> tuple[int, int]:
        ts = int(now * 1000)
        last_ts, last_seq = self._last
        self._last = (ts, 0) if ts > last_ts else (last_ts, last_seq + 1)
        return self._last


def _service_event(event_id: str, topic: str, body: bytes) -> Event:
    return Event({TOPIC: topic}, id=event_id, payload=body)


class NaradaClient(ClientScheme):
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
        self._wire_ids = WireIds.for_key(signing_key)  # opaque wire ids (common/wire_id.py)
        self.cert = cert
        self._cert_der = cert.to_der()
        self.kmc_keys: dict[str, VerifyKey] = dict(kmc_keys or {})
        self._tokens: dict[str, SecurityToken] = {}
        self._keys: dict[tuple[str, int], SecretBytes] = {}
        self._latest: dict[str, int] = {}
        self._stamp = _Stamper()
        self._until: dict[str, int] = {}  # reply topic -> its subscription's validity
        #: publishers' tokens whose KMC signature was verified (schemes/common/verified.py)
        self._sig_checks = 0
        self._verified: VerifiedCredentials[SecurityToken] = VerifiedCredentials(
            lambda t: t.not_after
        )
        #: the identity the first broker authenticates this entity as (its client link name)
        self.source = cert.name

    @property
    def signature_checks(self) -> int:
        """Ed25519 verifications this client performed on receipt (publications, and tokens
        whose KMC signature was not already verified)."""
        return self._sig_checks + self._verified.verifications

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
        self._latest[delivery.topic] = max(
            self._latest.get(delivery.topic, 0), delivery.key_version
        )

    def token(self, topic: str) -> SecurityToken:
        tok = self._tokens.get(topic)
        if tok is None:
            raise StateError(f"no security token for {topic!r}: request it from the KMC")
        return tok

    def discovery_request(
        self, kem: KemPrivateKey, *, kmc: str, now: float, rng: _random.Random | None = None
    ) -> DiscoveryRequest:
        """A signed request to a topic discovery node for ``kmc``'s topic (§II-A)."""
        return DiscoveryRequest.signed(self._sk, self.cert, kem, kmc=kmc, now=now, rng=rng)

    # -- subscriptions ----------------------------------------------------------------------------
    def _filter(self, f: Filter, op: str, now: float) -> ProtectedFilter:
        topic = topic_of(f)
        if service_kind(topic) == "reply" and op == "subscribe":
            until = self._until[topic] = int(now) + REPLY_LIFETIME
            ts, seq = self._stamp(now)
            digest = signed_digest(op, "", topic, ts, seq, until=until)
            meta = {"cert": self._cert_der, "ts": ts, "seq": seq, "sig": self._sk.sign(digest)}
            return ProtectedFilter({"topic": topic, "until": until}, meta)
        tok = self.token(topic)
        blob = tok.encode()
        ts, seq = self._stamp(now)
        digest = signed_digest(op, "", topic, ts, seq, until=tok.not_after, token=blob)
        meta = {
            "tok": blob,
            "cert": self._cert_der,
            "ts": ts,
            "seq": seq,
            "sig": self._sk.sign(digest),
        }
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
        if topic in self._until:
            ts, seq = self._stamp(now)
            digest = signed_digest(op, "", topic, ts, seq, until=self._until.pop(topic))
            return {"ts": ts, "seq": seq, "sig": self._sk.sign(digest)}
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
        if service_kind(topic) == "kmc":  # a key request: self-authenticating, no token yet
            if not isinstance(event.payload, bytes) or not event.payload:
                raise ValidationError("a KMC request travels as the event's payload")
            eid = event.id if event.id is not None else new_event_id(rng)
            return ProtectedEvent(eid, {"topic": topic}, event.payload, {"src": self.source})
        tok = self.token(topic)
        kv = self._latest[topic]
        app_id = event.id if event.id is not None else new_event_id(rng)
        eid = self._wire_ids(app_id)  # the application's id travels inside the payload
        attrs = {k: v for k, v in event.attrs.items() if k != TOPIC}
        mp = msgpack.packb(
            {"a": attrs, "t": event.type, "p": event.payload, "i": app_id}, use_bin_type=True
        )
        body = seal(self._keys[(topic, kv)], mp, aad=payload_aad(topic, kv, eid), rng=rng)
        blob = tok.encode()
        ts, seq = self._stamp(now)
        digest = signed_digest("publish", eid, topic, ts, seq, kv=kv, body=body, token=blob)
        meta = {
            "tok": blob,
            "cert": self._cert_der,
            "ts": ts,
            "seq": seq,
            "kv": kv,
            "sig": self._sk.sign(digest),
        }
        return ProtectedEvent(eid, {"topic": topic}, body, meta)

    def wire_id(self, event_id: str) -> str:
        """The opaque wire id of ``event_id`` (a keyed hash under the entity's key); events on
        the KMC's service topics keep theirs (the library draws them at random)."""
        return self._wire_ids(event_id)

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
            if service_kind(topic) == "reply":
                ts, seq, sig = (meta[k] for k in ("ts", "seq", "sig"))
                kmc = self.kmc_keys.get(meta["kmc"])
                digest = signed_digest("publish", event_id, topic, ts, seq, body=body)
                if kmc is None or not kmc.is_valid(sig, digest):
                    raise InvalidToken()
                return _service_event(event_id, topic, body)
            blob, kv, ts, seq, sig = (meta[k] for k in ("tok", "kv", "ts", "seq", "sig"))
            tok = SecurityToken.decode(blob)
            kmc = self.kmc_keys.get(tok.kmc)
            if kmc is None:
                raise InvalidToken()
            # the KMC's signature once per (KMC key, token); its duration, topic and right on
            # every delivery (schemes/common/verified.py)
            self._verified.check(
                kmc.to_bytes(), blob, partial(verify_token, tok, kmc, now=now), now=now
            )
            if not tok.not_before <= now <= tok.not_after or tok.topic != topic:
                raise InvalidToken()
            if not tok.rights.allows(Rights.PUBLISH):
                raise InvalidToken()
            digest = signed_digest(
                "publish", event_id, topic, ts, seq, kv=kv, body=body, token=blob
            )
            self._sig_checks += 1
            tok.verify_key.verify(sig, digest)
            key = self._keys.get((topic, kv))
            if key is None:
                raise InvalidToken()
            mp = msgpack.unpackb(open_(key, body, aad=payload_aad(topic, kv, event_id)), raw=False)
            attrs = dict(mp["a"])
            attrs[TOPIC] = topic
            return Event(attrs, id=str(mp["i"]), type=mp["t"], payload=mp["p"])
        except (KeyError, TypeError, ValueError, ValidationError):
            raise InvalidToken() from None


class KmcScheme(ClientScheme):
    """The KMC's face on the pub/sub network: it subscribes to its listening topic
    (``kmc/...``) and publishes replies on requesters' ``reply/...`` topics, each signed with
    the KMC's key (``sign``: the KMC's signing function, e.g. ``KmcEndpoint.sign``)."""

    profile = NARADA

    def __init__(self, name: str, sign: Any) -> None:
        self.name = name
        self._sign = sign
        self._stamp = _Stamper()
        self._until: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"KmcScheme({self.name!r})"

    def _signed(
        self, op: str, ref: str, topic: str, now: float, *, until: int = 0, body: bytes = b""
    ) -> dict[str, Any]:
        ts, seq = self._stamp(now)
        sig = self._sign(signed_digest(op, ref, topic, ts, seq, until=until, body=body))
        return {"kmc": self.name, "ts": ts, "seq": seq, "sig": sig}

    def protect_filter(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        topic = topic_of(f)
        if service_kind(topic) != "kmc":
            raise ValidationError("a KMC subscribes only to its kmc/... service topic")
        until = self._until[topic] = int(now) + 365 * 86400
        return ProtectedFilter(
            {"topic": topic, "until": until}, self._signed("subscribe", "", topic, now, until=until)
        )

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedFilter:
        raise ValidationError("a KMC advertises through topic discovery nodes, not brokers")

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: _random.Random | None = None
    ) -> dict[str, Any]:
        topic = topic_of(f)
        until = self._until.pop(topic, None)
        if until is None:
            raise StateError(f"not subscribed to {topic!r}")
        return self._signed("unsubscribe", "", topic, now, until=until)

    def protect_event(
        self, event: Event, *, now: float, rng: _random.Random | None = None
    ) -> ProtectedEvent:
        topic = event.get(TOPIC)
        if not isinstance(topic, str) or service_kind(topic) != "reply":
            raise ValidationError("a KMC publishes only on reply/... topics")
        if not isinstance(event.payload, bytes) or not event.payload:
            raise ValidationError("a KMC reply travels as the event's payload")
        eid = event.id if event.id is not None else new_event_id(rng)
        meta = self._signed("publish", eid, topic, now, body=event.payload)
        return ProtectedEvent(eid, {"topic": topic}, event.payload, meta)

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        """A request on the KMC's topic: the payload and the sender the first broker checked."""
        topic, src = routing.get("topic"), meta.get("src")
        if not isinstance(topic, str) or service_kind(topic) != "kmc" or not isinstance(src, str):
            raise InvalidToken()
        return Event({TOPIC: topic, "src": src}, id=event_id, payload=body)
