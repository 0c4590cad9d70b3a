"""The broker core's advertisement table (eventguard.txt §2.1, §4.3, §4.6).

Advertisements are flooded over the tree: a broker stores each one under ``(link, adv_id)``
and forwards it, renamed like a forwarded subscription, to every broker link except the one it
came on; an unadvertise withdraws it the same way. A broker link that (re)connects is sent the
advertisements from every other link (``Broker.link_up``). Publication routing does not depend
on them (see ``pubguard.broker.core``), so their arrival order can never lose an event; they
exist so every broker knows what is advertised and a scheme's advertise / unadvertise guards
(EventGuard's UAT permits) can check them.

:class:`AdvertisementTable` owns the stored advertisements, their lease ends and their rows in
the broker's store; the :class:`~pubguard.broker.core.Broker` runs the guards, decides which
links they flood to and when a lease has lapsed, and hands the table the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pubguard.broker.actions import Action, Forward
from pubguard.broker.profiles import Key, forward_id, skey
from pubguard.broker.state import BrokerState
from pubguard.wire.messages import Advertise, Unadvertise

__all__ = ["AdvertisementTable"]


class AdvertisementTable:
    """The advertisements a broker stores, by ``(link, adv_id)``, written through to
    ``store`` (table ``advertisements``) when there is one."""

    def __init__(self, broker_id: str, store: BrokerState | None) -> None:
        self._broker_id = broker_id
        self._store = store
        self._adverts: dict[Key, Advertise] = {}
        self._expiry: dict[Key, float] = {}  # lease ends (None: never, not kept)

    def __len__(self) -> int:
        return len(self._adverts)

    def get(self, key: Key) -> Advertise | None:
        return self._adverts.get(key)

    def lease_ends(self) -> Iterable[float]:
        return self._expiry.values()

    def put(
        self, key: Key, msg: Advertise, expires: float | None, to: Iterable[str]
    ) -> list[Action]:
        """Store ``msg`` under ``key`` with its lease end, and forward it on the links ``to``."""
        self.restore(key, msg, expires)
        if self._store is not None:
            self._store.put("advertisements", skey(key), {"link": key[0], "message": msg.to_wire()})
        return [self.forward(lk, key, msg) for lk in to]

    def restore(self, key: Key, msg: Advertise, expires: float | None) -> None:
        """Hold ``msg`` under ``key`` (from the store: not written back)."""
        self._adverts[key] = msg
        if expires is None:
            self._expiry.pop(key, None)
        else:
            self._expiry[key] = expires

    def remove(self, key: Key, meta: Mapping[str, Any], to: Iterable[str]) -> list[Action]:
        """Forget ``key`` and forward its withdrawal (with ``meta``) on the links ``to``."""
        adv = self._adverts.pop(key)
        self._expiry.pop(key, None)
        if self._store is not None:
            self._store.delete("advertisements", skey(key))
        fid = forward_id(self._broker_id, key)
        return [Forward(lk, Unadvertise(fid, adv.profile, meta)) for lk in to]

    def forward(self, link_id: str, key: Key, adv: Advertise) -> Forward:
        """``adv`` (stored under ``key``) as this broker forwards it on ``link_id``."""
        fid = forward_id(self._broker_id, key)
        return Forward(link_id, Advertise(fid, adv.profile, adv.filter, adv.meta))

    def announce(self, link_id: str) -> list[Forward]:
        """Every advertisement that did not come over ``link_id``, for a (re)connected broker
        link: idempotent at the peer."""
        return [self.forward(link_id, k, a) for k, a in self._adverts.items() if k[0] != link_id]

    def keys_of(self, link_id: str) -> list[Key]:
        """The keys of the advertisements that came over ``link_id``."""
        return [k for k in self._adverts if k[0] == link_id]

    def lapsed(self, lapses: Callable[[str, str, float], bool]) -> list[Key]:
        """The keys whose lease has lapsed: ``lapses(link, profile, lease_end)``."""
        adverts = self._adverts
        return [
            k
            for k, t in self._expiry.items()
            if k in adverts and lapses(k[0], adverts[k].profile, t)
        ]

    def snapshot(self) -> dict[str, Any]:
        """The stored advertisements by store key, sorted (``Broker.routing_snapshot``)."""
        return {skey(k): a.to_wire() for k, a in sorted(self._adverts.items())}
