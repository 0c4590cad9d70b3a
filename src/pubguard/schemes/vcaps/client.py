"""The client faces of the v-CAPS profiles: the subscriber registers at the publisher, the
publisher matches and ships ``<RV, E_KN(N)>``, the subscriber decrypts.

Stage I (vcaps.txt §4.1) runs over "an auxiliary point-to-point channel" between subscriber and
publisher: a :class:`Registrar`. In the trusted process that holds both (the key bundle, a
test, the simulator) that is the publisher core (:class:`VcapsPublisher`) itself; over the
network it is ``pubguard.net.vcaps_registrar.RemoteRegistrar`` (mutual TLS to the publisher).
``K_N`` comes from :class:`NotificationKeys` (:class:`VcapsKeyService`, or the same remote
registrar) for the publisher named in the routing header and the epoch in meta.
"""

from __future__ import annotations

from collections.abc import Mapping
from random import Random
from typing import Any, Protocol

import msgpack

from pubguard.crypto import SecretBytes, open_
from pubguard.errors import InvalidToken, StateError, ValidationError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.base import ClientScheme, ProtectedEvent, ProtectedFilter
from pubguard.schemes.vcaps.keyservice import VcapsKeyService
from pubguard.schemes.vcaps.publisher import VcapsPublisher, event_aad

__all__ = ["NotificationKeys", "Registrar", "VcapsClient"]


class Registrar(Protocol):
    """Where a subscriber registers its filters (Stage I): the publisher, in process or over
    an authenticated channel."""

    profile: str

    def register(self, f: Filter, *, subscriber: str) -> dict[str, Any]: ...


class NotificationKeys(Protocol):
    """Where ``K_N`` comes from (vcaps.txt §1: the group key of a publisher's subscribers)."""

    def notification_key(self, publisher: str, epoch: int, *, requester: str) -> SecretBytes: ...


class VcapsClient(ClientScheme):
    """One identity's client face. ``registrar``: the publisher it subscribes at (Stage I);
    ``publisher``: its own publisher core when it publishes (None for a pure subscriber)."""

    def __init__(
        self,
        identity: str,
        keys: VcapsKeyService | NotificationKeys,
        *,
        registrar: VcapsPublisher | Registrar | None = None,
        publisher: VcapsPublisher | None = None,
    ) -> None:
        self.identity = identity
        self._keys = keys
        self._registrar = registrar
        self._publisher = publisher
        p = publisher if publisher is not None else registrar
        if p is None:
            raise ValidationError("a v-CAPS client needs a publisher to register at or its own")
        self.profile = p.profile

    def __repr__(self) -> str:
        return f"VcapsClient({self.identity!r}, {self.profile})"

    @property
    def registrar(self) -> VcapsPublisher | Registrar | None:
        """The publisher this client registers its filters at (Stage I)."""
        return self._registrar

    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        if self._registrar is None:
            raise StateError("this v-CAPS client has no publisher to register filters at")
        return ProtectedFilter(self._registrar.register(f, subscriber=self.identity))

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        if self._publisher is None:
            raise StateError(f"{self.identity!r} is not a v-CAPS publisher")
        return ProtectedFilter(self._publisher.advertisement())

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent:
        if self._publisher is None:
            raise StateError(f"{self.identity!r} is not a v-CAPS publisher")
        return self._publisher.publish(event, now=now)

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        pub, epoch = routing.get("pub"), meta.get("epoch")
        if type(pub) is not str or type(epoch) is not int:
            raise InvalidToken()
        kn = self._keys.notification_key(pub, epoch, requester=self.identity)
        pt = open_(kn, bytes(body), aad=event_aad(pub, epoch, event_id))
        try:  # the application's id travels inside E_KN(N) (VcapsPublisher.publish)
            attrs, etype, payload, app_id = msgpack.unpackb(pt, raw=False)
            return Event(attrs, id=app_id, type=etype, payload=payload)
        except (ValueError, TypeError):
            raise InvalidToken() from None

    def wire_id(self, event_id: str) -> str:
        """The opaque wire id of ``event_id``: a keyed hash under the publisher's signing key
        (``pubguard.schemes.common.wire_id``)."""
        if self._publisher is None:
            raise StateError(f"{self.identity!r} is not a v-CAPS publisher")
        return self._publisher.wire_id(event_id)
