"""The Hermes client scheme: clients hold no keys (hermes-encrypted-access-control.txt §3).

A Hermes client trusts its hosting broker (§2.1) and talks to it over mutually authenticated
TLS (§2.4); it encrypts nothing. What it sends is the plaintext event or filter, the name of
its secure event type and the capability the type owner issued it (§4: the hosting broker
checks it, and its own, before acting for the client). What it receives is the event its
broker decrypted for it, cut to the attributes its capability grants.
"""

from __future__ import annotations

from collections.abc import Mapping
from random import Random
from typing import Any

from pubguard.errors import ValidationError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.base import ClientScheme, ProtectedEvent, ProtectedFilter
from pubguard.schemes.hermes.broker import HERMES_ATTRIBUTE, HERMES_EVENT, TYPE_KEY
from pubguard.schemes.hermes.capability import Capability
from pubguard.schemes.plain import new_event_id

__all__ = ["HermesClient"]


class HermesClient(ClientScheme):
    """One client's side of a Hermes profile for one secure event type."""

    def __init__(
        self,
        profile: str,
        type_name: str,
        *,
        publish: Capability | None = None,
        subscribe: Capability | None = None,
    ) -> None:
        if profile not in (HERMES_EVENT, HERMES_ATTRIBUTE):
            raise ValidationError("hermes client profile must be hermes-event or hermes-attribute")
        self.profile = profile
        self.type_name = type_name
        self._pub = publish
        self._sub = subscribe

    def __repr__(self) -> str:
        return f"HermesClient({self.profile!r}, {self.type_name!r})"

    def _cap(self, cap: Capability | None, action: str) -> dict[str, Any]:
        if cap is None:
            raise ValidationError(f"this client holds no {action} capability")
        return {"cap": cap.to_bytes()}

    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        wire = {"type": self.type_name, "constraints": [c.to_json() for c in f.constraints]}
        return ProtectedFilter(wire, self._cap(self._sub, "subscribe"))

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter(
            {"type": self.type_name, "advert": True}, self._cap(self._pub, "publish")
        )

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent:
        if event.payload:
            raise ValidationError("hermes events carry typed attributes only, no payload")
        if TYPE_KEY in event.attrs:
            raise ValidationError(f"{TYPE_KEY!r} is not an attribute name")
        if event.type is not None and event.type != self.type_name:
            raise ValidationError(f"this client publishes {self.type_name!r} events")
        return ProtectedEvent(
            event_id=event.id if event.id is not None else new_event_id(rng),
            routing={TYPE_KEY: self.type_name, **event.attrs},
            meta=self._cap(self._pub, "publish"),
        )

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        name = routing.get(TYPE_KEY)
        if not isinstance(name, str):
            raise ValidationError("not a delivery of a hermes hosting broker")
        return Event({k: v for k, v in routing.items() if k != TYPE_KEY}, id=event_id, type=name)
