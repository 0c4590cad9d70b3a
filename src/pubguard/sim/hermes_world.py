"""An in-process Hermes deployment: real broker cores, real key groups, every frame captured.

Theory of operation
-------------------
The police network of hermes-encrypted-access-control.txt Fig. 1 (and any other) as
:class:`~pubguard.broker.Broker` cores running the Hermes schemes, wired into a tree whose
root is the type's rendezvous node (§2.1, Fig. 2: events climb to it and descend to the
subscribers). Every message crosses the wire codec (``to_wire`` -> msgpack -> ``handle``) and
each frame a broker receives is kept in :attr:`HermesWorld.frames`, so a test can look for a
canary in exactly what a broker saw. The type owner's key-group manager (:mod:`.keygroups`)
admits brokers by capability (Fig. 4) and its rekey broadcasts reach every member at once;
``tick`` runs its refresh timer and capability expiry (Fig. 5). Neighbours exchange their
credentials when a link is made (§3.4's handshake). Time is an argument, as for every core.
"""

from __future__ import annotations

import math
import random as _random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from pubguard.broker import Broker
from pubguard.broker.actions import DeliverTo, Drop, Forward
from pubguard.crypto import SigningKey
from pubguard.errors import DropError
from pubguard.model.events import Event, EventType
from pubguard.model.filters import Filter
from pubguard.schemes.base import LinkKind
from pubguard.schemes.hermes import (
    ALL,
    BrokerKeyring,
    Capability,
    HermesBroker,
    HermesClient,
    KeyGroupManager,
    NonceCounter,
    RevocationSet,
    SecureEventType,
)
from pubguard.wire.framing import pack

__all__ = ["HermesClientHandle", "HermesWorld", "WorldBroker"]


@dataclass
class WorldBroker:
    """One broker of the world: its domain, core, Hermes scheme and captured input frames."""

    name: str
    domain: str
    core: Broker
    scheme: HermesBroker
    frames: list[bytes] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)


@dataclass
class HermesClientHandle:
    name: str
    broker: str
    scheme: HermesClient
    received: list[Event] = field(default_factory=list)


class HermesWorld:
    """Brokers in domains on a tree rooted at ``root`` (the rendezvous node), one secure type."""

    def __init__(
        self,
        profile: str,
        etype: EventType,
        *,
        owner: str,
        brokers: Mapping[str, str],
        parent: Mapping[str, str],
        now: float,
        grace: float = 30.0,
        refresh_every: float = math.inf,
        seed: int = 0,
        counters: Mapping[str, NonceCounter] | None = None,
    ) -> None:
        self.rng = _random.Random(seed)
        self.owner_key = SigningKey.from_seed(self.rng.randbytes(32))
        self.stype = SecureEventType.define(owner, etype, self.owner_key)
        self.profile = profile
        self.revoked = RevocationSet()
        mode = "event" if profile == "hermes-event" else "attribute"
        self.manager = KeyGroupManager(
            self.stype, mode, revoked=self.revoked, grace=grace, refresh_every=refresh_every
        )
        self._serial = 0
        self.brokers: dict[str, WorldBroker] = {}
        for name, domain in brokers.items():
            counter = (counters or {}).get(name) or NonceCounter(name)
            scheme = HermesBroker(
                profile,
                name,
                types=[self.stype],
                keyring=BrokerKeyring(name, grace=grace),
                counter=counter,
                revoked=self.revoked,
                # each PHB's wire-id secret, from the seed: two worlds of one seed agree
                wire_id_key=_random.Random(f"{seed}:{name}").randbytes(32),
            )
            self.brokers[name] = WorldBroker(name, domain, Broker(name, [scheme]), scheme)
        for child, par in parent.items():
            self.brokers[child].core.add_link(par, LinkKind.PARENT, peer=par)
            self.brokers[par].core.add_link(child, LinkKind.CHILD, peer=child)
        self.parent = dict(parent)
        self.clients: dict[str, HermesClientHandle] = {}
        self.now = now
        self.refused: dict[str, str] = {}

    # -- capabilities and key groups ----------------------------------------------------------
    def capability(
        self,
        holder: str,
        action: str,
        attributes: Iterable[str] = (ALL,),
        *,
        not_before: float | None = None,
        not_after: float = math.inf,
    ) -> Capability:
        """The type owner issues a capability (§2.3)."""
        self._serial += 1
        return Capability.issue(
            self.owner_key,
            holder=holder,
            type_id=self.stype.type_id,
            action=action,
            attributes=tuple(attributes),
            not_before=self.now if not_before is None else not_before,
            not_after=not_after,
            serial=self._serial,
        )

    def authorise(
        self, broker: str, attributes: Iterable[str] = (ALL,), *, not_after: float = math.inf
    ) -> bool:
        """Give ``broker`` publish and subscribe capabilities and let it join the key groups
        (Fig. 4); False (and the reason in ``refused``) if the manager refuses."""
        attrs = tuple(attributes)
        caps = [
            self.capability(broker, a, attrs, not_after=not_after) for a in ("publish", "subscribe")
        ]
        return self.join(broker, caps)

    def join(self, broker: str, caps: list[Capability]) -> bool:
        wb = self.brokers[broker]
        try:
            res = self.manager.join(broker, caps[0], now=self.now, rng=self.rng)
        except DropError as exc:
            self.refused[broker] = exc.reason.value
            return False
        for c in caps:
            wb.scheme.add_capability(c)
        wb.scheme.keyring.welcome(res.welcomes)
        self._broadcast(res.rekeys)
        self.handshake()
        return True

    def _broadcast(self, rekeys: list[Any]) -> None:
        for wb in self.brokers.values():
            wb.scheme.keyring.apply(rekeys)

    def leave(self, broker: str) -> None:
        self._broadcast(self.manager.leave(broker, now=self.now, rng=self.rng))

    def revoke(self, serial: int) -> None:
        self._broadcast(self.manager.revoke(serial, now=self.now, rng=self.rng))

    def tick(self, now: float) -> None:
        self.now = now
        self._broadcast(self.manager.tick(now=now, rng=self.rng))
        self.handshake()

    def handshake(self) -> None:
        """§3.4: neighbours present their credentials to each other."""
        for child, par in self.parent.items():
            a, b = self.brokers[child].scheme, self.brokers[par].scheme
            a.learn_neighbour(par, b.credentials(), now=self.now)
            b.learn_neighbour(child, a.credentials(), now=self.now)

    # -- clients ------------------------------------------------------------------------------
    def attach(
        self,
        client: str,
        broker: str,
        *,
        publish: Iterable[str] | None = None,
        subscribe: Iterable[str] | None = None,
        not_after: float = math.inf,
    ) -> HermesClientHandle:
        """A client on ``broker`` holding the capabilities named by attribute lists."""
        pub = (
            None
            if publish is None
            else self.capability(client, "publish", publish, not_after=not_after)
        )
        sub = (
            None
            if subscribe is None
            else self.capability(client, "subscribe", subscribe, not_after=not_after)
        )
        scheme = HermesClient(self.profile, self.stype.name, publish=pub, subscribe=sub)
        self.brokers[broker].core.add_link(f"c:{client}", LinkKind.CLIENT, peer=client)
        h = self.clients[client] = HermesClientHandle(client, broker, scheme)
        return h

    def subscribe(self, client: str, f: Filter, sub_id: str | None = None) -> None:
        h = self.clients[client]
        pf = h.scheme.protect_filter(f, now=self.now)
        msg = {
            "op": "subscribe",
            "sub_id": sub_id or f"{client}-{f}",
            "profile": self.profile,
            "filter": dict(pf.filter),
            "meta": dict(pf.meta),
        }
        self._run(h.broker, f"c:{client}", msg)

    def publish(self, client: str, attrs: Mapping[str, Any], event_id: str | None = None) -> None:
        h = self.clients[client]
        pe = h.scheme.protect_event(Event(dict(attrs)), now=self.now, rng=self.rng)
        msg = {
            "op": "publish",
            "event_id": event_id or pe.event_id,
            "profile": self.profile,
            "routing": dict(pe.routing),
            "meta": dict(pe.meta),
        }
        self._run(h.broker, f"c:{client}", msg)

    # -- the pump -----------------------------------------------------------------------------
    def _run(self, broker: str, link: str, wire: dict[str, Any]) -> None:
        queue: deque[tuple[str, str, bytes]] = deque([(broker, link, pack(wire))])
        while queue:
            at, lk, frame = queue.popleft()
            wb = self.brokers[at]
            if not lk.startswith("c:"):
                wb.frames.append(frame)
            msg = msgpack.unpackb(frame, raw=False)
            for a in wb.core.handle(msg, lk, self.now):
                if isinstance(a, Forward):
                    queue.append((a.link, at, pack(a.message.to_wire())))
                elif isinstance(a, DeliverTo):
                    h = self.clients[a.link[2:]]
                    ev = a.message.event
                    h.received.append(
                        h.scheme.open_event(ev.event_id, ev.routing, ev.body, ev.meta, now=self.now)
                    )
                elif isinstance(a, Drop):
                    wb.drops.append(a)

    def inject(self, broker: str, from_link: str, wire: dict[str, Any]) -> None:
        """Hand ``broker`` a message as if it came on ``from_link`` (an attacker's frame)."""
        self._run(broker, from_link, wire)

    def readable_by(self, broker: str) -> list[str]:
        """The attributes ``broker`` holds keys for now (what it could read, §4)."""
        wb = self.brokers[broker]
        groups = wb.scheme.keyring.groups()
        if self.profile == "hermes-event":
            return (
                [a.name for a in self.stype.etype.attributes]
                if self.stype.type_id.hex() in groups
                else []
            )
        return [n for n, aid in self.stype.attribute_ids.items() if aid.hex() in groups]
