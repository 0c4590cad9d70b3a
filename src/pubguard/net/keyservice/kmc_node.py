"""Narada's KMC reached only through the pub/sub network, and secure topic discovery
(narada-secure-delivery.txt §II-A, §IV-B footnote 1, §V-A).

Theory of operation
-------------------
The KMC has no listening socket: :class:`KmcNode` runs a sans-IO
:class:`~pubguard.keys.discovery.KmcEndpoint` as an ordinary pub/sub client of one broker. It
subscribes to the endpoint's random 128-bit topic (``kmc/<32 hex>``, §V-A) and places the
KMC-signed :class:`~pubguard.keys.discovery.TopicAdvertisement` at the topic discovery nodes
(TDNs, served over mutual TLS by :mod:`pubguard.net.keyservice.server`). Every request that arrives
goes to ``KmcEndpoint.handle`` with the sender's identity as the first broker authenticated it
(``meta.src``, checked by the narada broker scheme); a valid one is answered by publishing the
:class:`~pubguard.keys.kmc.KeyDelivery` on the requester's reply topic, signed by the KMC.
When the endpoint reports a flood it has moved to a fresh topic: the node subscribes to the
new one, withdraws the old subscription (so brokers stop forwarding the old topic's traffic)
and re-advertises. Sources of repeated bogus requests are refused by the endpoint (§V-A).

An entity obtains a topic's key with :func:`fetch_topic_key`: a signed discovery request to a
TDN (only valid credentials the advertisement admits learn the KMC's topic; the reply is
wrapped to the request's KEM key), a check of the advertisement's provenance (KMC certificate
and signature, §II-A), a subscription to a fresh random reply topic, and a key request
published on the KMC's topic. It never learns where the KMC runs: it talks to its own broker
and to a TDN only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from pubguard.crypto import KemPrivateKey, random_bytes
from pubguard.crypto.x509 import Certificate, RevocationList
from pubguard.errors import InvalidToken, StateError, TransportError, ValidationError
from pubguard.keys.discovery import (
    KmcEndpoint,
    TopicAdvertisement,
    decode_delivery,
    encode_key_request,
    open_discovery_reply,
)
from pubguard.keys.kmc_messages import KeyDelivery
from pubguard.model import Event
from pubguard.net.client.client import Client, Delivery, Subscription
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.schemes.narada.broker import REPLY_TOPIC_PREFIX
from pubguard.schemes.narada.client import KmcScheme, NaradaClient

__all__ = ["KmcNode", "discover_kmc_topic", "fetch_topic_key", "new_reply_topic"]

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT: Final = 3.0  # seconds to wait for one reply before re-requesting


def new_reply_topic() -> str:
    """A fresh random 128-bit reply topic."""
    return REPLY_TOPIC_PREFIX + random_bytes(16).hex()


class KmcNode:
    """A KMC on the pub/sub network (see the module docstring). Create with :meth:`attach`;
    ``tdns``: key-service clients of the topic discovery nodes (KMC TLS identity)."""

    def __init__(
        self,
        endpoint: KmcEndpoint,
        client: Client,
        *,
        tdns: Sequence[KeyServiceClient] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(client.scheme, KmcScheme):
            raise ValidationError("the KMC's client must speak KmcScheme")
        self.endpoint, self.client, self.tdns, self.clock = endpoint, client, tdns, clock
        self.stats: Counter[str] = Counter()
        self.heard: Counter[str] = Counter()  # requests received per topic
        self._sub: Subscription | None = None
        self._lock = asyncio.Lock()

    @staticmethod
    def scheme_for(endpoint: KmcEndpoint) -> KmcScheme:
        return KmcScheme(endpoint.kmc.name, endpoint.sign)

    def __repr__(self) -> str:
        return f"KmcNode({self.endpoint.kmc.name!r}, version={self.endpoint.version})"

    @property
    def topic(self) -> str:
        return self.endpoint.topic

    async def start(self) -> None:
        """Listen on the current topic and advertise it at every TDN."""
        self._sub = await self._listen(self.topic)
        await self._advertise(self.endpoint.advertisement)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def _listen(self, topic: str) -> Subscription:
        sub = await self.client.subscribe(f'topic = "{topic}"', handler=self._on_request)
        await self.client.flush()
        return sub

    async def _advertise(self, adv: TopicAdvertisement) -> None:
        for tdn in self.tdns:
            await asyncio.to_thread(tdn.tdn_advertise, adv)

    async def _on_request(self, d: Delivery) -> None:
        async with self._lock:  # one request at a time: a rotation completes before the next
            topic, src = d.event.get("topic"), d.event.get("src")
            if not isinstance(topic, str) or not isinstance(src, str):
                return
            self.heard[topic] += 1
            # one certificate is one source, whatever link suffix it connects with
            source = src.split("/", 1)[0]
            res = self.endpoint.handle(topic, d.event.payload or b"", source, now=self.clock())
            if res.refused is not None:
                self.stats[f"refused:{res.refused.value}"] += 1
                log.info("kmc: refused a request from %s: %s", source, res.refused.value)
            if res.reply is not None:
                reply_topic, payload = res.reply
                await self.client.publish(Event({"topic": reply_topic}, payload=payload))
                self.stats["served"] += 1
            if res.rotated is not None:
                await self._rotate(res.rotated)

    async def _rotate(self, adv: TopicAdvertisement) -> None:
        """§V-A: listen on the fresh topic, drop the compromised one, tell the TDNs."""
        old = self._sub
        self._sub = await self._listen(adv.topic)
        if old is not None:
            await old.unsubscribe()
        await self._advertise(adv)
        self.stats["rotations"] += 1
        log.warning(
            "kmc: flood of bogus requests; moved to a fresh topic (version %d)", adv.version
        )


def discover_kmc_topic(
    scheme: NaradaClient,
    tdn: KeyServiceClient,
    *,
    kmc: str,
    ca_cert: Certificate,
    crl: RevocationList | None = None,
    now: float,
) -> TopicAdvertisement:
    """Ask a TDN (blocking) which topic ``kmc`` listens on, and check the answer's provenance.
    Raises :class:`~pubguard.errors.DropError` (unauthorised) or InvalidToken when the TDN
    reveals nothing to these credentials."""
    kem = KemPrivateKey.generate()
    req = scheme.discovery_request(kem, kmc=kmc, now=now)
    ads = [a for a in open_discovery_reply(tdn.discover(req), kem, req) if a.names(kmc)]
    if not ads:
        raise InvalidToken()
    adv = max(ads, key=lambda a: a.version)
    adv.verify(ca_cert, crl, now=now)  # §II-A provenance: signed by a certified KMC
    return adv


async def fetch_topic_key(
    client: Client,
    tdn: KeyServiceClient,
    *,
    kmc: str,
    topic: str,
    ca_cert: Certificate,
    crl: RevocationList | None = None,
    timeout: float = 20.0,
    attempt_timeout: float = ATTEMPT_TIMEOUT,
) -> KeyDelivery:
    """Discover ``kmc``'s topic at ``tdn``, request ``topic``'s key through ``client``'s broker
    and install the delivery in ``client.scheme`` (a :class:`NaradaClient`)."""
    scheme = client.scheme
    if not isinstance(scheme, NaradaClient):
        raise ValidationError("fetch_topic_key needs a client speaking the narada profile")
    adv = await asyncio.to_thread(
        discover_kmc_topic, scheme, tdn, kmc=kmc, ca_cert=ca_cert, crl=crl, now=time.time()
    )
    reply = new_reply_topic()
    sub = await client.subscribe(f'topic = "{reply}"')
    await client.flush()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            # the reply subscription may still be on its way to the KMC's broker: re-request
            kem = KemPrivateKey.generate()
            req = scheme.key_request(topic, kem, now=time.time())
            await client.publish(
                Event({"topic": adv.topic}, payload=encode_key_request(req, reply))
            )
            wait = min(attempt_timeout, max(0.05, deadline - time.monotonic()))
            try:
                d = await sub.next(timeout=wait)
            except TimeoutError:
                continue
            delivery = decode_delivery(d.event.payload or b"")
            scheme.install(delivery, kem)
            return delivery
    finally:
        try:
            await sub.unsubscribe()
        except (TransportError, StateError):  # pragma: no cover - the link went away
            pass
    raise TransportError(f"no key delivery for {topic!r} within {timeout:.0f} s")
