"""The broker face of the v-CAPS profiles: BFPoset matching by routing vector, token guards.

Theory of operation
-------------------
A broker of ``vcaps-rv`` / ``vcaps-srv`` / ``vcaps-srv-fast`` never sees a filter or a value:
``decode_filter`` yields ``(publisher, token)`` (:mod:`pubguard.schemes.vcaps.tokens`),
``decode_event`` ``(publisher, routing header)``. The core's matcher is a :class:`VcapsMatcher`:
one :class:`BFPoset` per publisher ("independent BFPoset data structures for each",
vcaps.txt §6.1) whose recipients are the core's ``(link, sub_id)`` keys; a child broker's
link is one compaction group, a client link's subscriptions are never compacted (each is
named in the delivery).

Upward forwarding is the core's Siena covering (``ForwardSet``) with :meth:`VcapsBroker.covers`
answered from the tokens, which is Stage II's "forward only when no predecessor is held": a
token with a held cover is not forwarded. (The core also withdraws upstream copies a new
cover makes redundant, and re-forwards what a withdrawn filter covered; the paper forwards
and never withdraws, and compacts upstream instead. Both are correct; ours keeps the parent's
poset smaller.)

Guards (ours; the paper's brokers check nothing): a subscription token must carry a valid
signature of a publisher in ``BrokerKeys.publishers`` (else ``unauthorised`` for an unknown
publisher, ``forged`` for a bad signature), checked at every hop; a notification's signature
over ``<RV, E_KN(N)>`` is checked at the first broker (the one its publisher is attached to),
so a tampered routing vector goes no further. Inner hops trust their mutually authenticated
parent, which checked it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from pubguard.crypto import VerifyKey
from pubguard.errors import DropReason, ValidationError
from pubguard.schemes.base import BrokerScheme, CheckContext, LinkKind, Matcher
from pubguard.schemes.vcaps.bfposet import BFPoset
from pubguard.schemes.vcaps.publisher import PROFILES
from pubguard.schemes.vcaps.tokens import (
    ADVERT,
    Token,
    decode_routing,
    decode_token,
    notification_message,
    token_message,
)

__all__ = ["VcapsBroker", "VcapsMatcher"]

Key = tuple[str, str]


class VcapsMatcher:
    """The core's matcher for one v-CAPS profile: a BFPoset per publisher."""

    def __init__(self, broker_links: set[str]) -> None:
        self._broker_links = broker_links
        self.posets: dict[str, BFPoset[Key]] = {}
        self._of: dict[Hashable, tuple[str, bytes]] = {}

    def _group(self, key: Key) -> Hashable | None:
        return key[0] if key[0] in self._broker_links else None

    def add(self, key: Hashable, pf: Any) -> None:
        pub, token = pf
        if key in self._of:
            self.remove(key)
        bf = self.posets.get(pub)
        if bf is None:
            bf = self.posets[pub] = BFPoset(self._group)
        bf.insert(token, key)  # type: ignore[arg-type]
        self._of[key] = (pub, token.handle)

    def remove(self, key: Hashable) -> None:
        at = self._of.pop(key, None)
        if at is not None:
            self.posets[at[0]].remove(at[1], key)  # type: ignore[arg-type]

    def match(self, pe: Any) -> set[Hashable]:
        bf = self.posets.get(pe[0])
        return set() if bf is None else bf.match(pe[1])  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._of)


class VcapsBroker(BrokerScheme):
    """The broker face of one v-CAPS profile. ``publishers``: publisher name -> verify key."""

    rewrites_outgoing = False
    checks_messages = True

    def __init__(
        self,
        profile: str,
        publishers: Mapping[str, VerifyKey],
        *,
        check_every_hop: bool = False,
    ) -> None:
        """``check_every_hop``: verify a notification's signature whatever link it came on
        (a Spark executor is the first broker, on a link that is not a client's)."""
        if profile not in PROFILES:
            raise ValidationError(f"unknown v-CAPS profile {profile!r}")
        self.profile = profile
        self._publishers = dict(publishers)
        self._every_hop = check_every_hop
        self._broker_links: set[str] = set()  # child-broker links seen by the guard

    def __repr__(self) -> str:
        return f"VcapsBroker({self.profile}, publishers={sorted(self._publishers)})"

    def decode_filter(self, wire: Mapping[str, Any]) -> tuple[str, Token | None]:
        """``(publisher, token)``; ``(publisher, None)`` for an advertisement."""
        pub = wire.get("pub") if isinstance(wire, Mapping) else None
        if type(pub) is not str:
            raise ValidationError("v-CAPS token names its publisher")
        if set(wire) == {"pub", "adv", "sig"}:
            if wire["adv"] != ADVERT + self.profile.encode():
                raise ValidationError("malformed v-CAPS advertisement")
            return pub, None
        return pub, decode_token(self.profile, wire)

    def decode_event(self, routing: Mapping[str, Any]) -> tuple[str, Any]:
        return routing["pub"], decode_routing(self.profile, routing)

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        op = message.op
        if op == "subscribe" or op == "advertise":
            w = message.filter
            body = w.get("adv" if op == "advertise" else "tok")
            if type(body) is not bytes:
                return DropReason.MALFORMED  # an advertisement as a subscription, or back
            if op == "subscribe" and ctx.link.kind is LinkKind.CHILD:
                self._broker_links.add(ctx.link.link_id)
            vk = self._publishers.get(w.get("pub"))
            if vk is None:
                return DropReason.UNAUTHORISED
            sig = w.get("sig")
            if type(sig) is not bytes or not vk.is_valid(sig, token_message(w["pub"], body)):
                return DropReason.FORGED
            return None
        if op == "publish":
            if ctx.link.kind is not LinkKind.CLIENT and not self._every_hop:
                return None  # checked by the first broker (see the module docstring)
            vk = self._publishers.get(message.routing.get("pub"))
            if vk is None:
                return DropReason.UNAUTHORISED
            meta = message.meta
            epoch, sig = meta.get("epoch"), meta.get("sig")
            if type(epoch) is not int or type(sig) is not bytes:
                return DropReason.MALFORMED
            signed = notification_message(
                message.event_id, self.profile, message.routing, epoch, message.body
            )
            return None if vk.is_valid(sig, signed) else DropReason.FORGED
        return None

    def covers(self, f1: tuple[str, Token], f2: tuple[str, Token]) -> bool:
        return f1[0] == f2[0] and f1[1].covers(f2[1])  # type: ignore[arg-type]

    def broker_match(self, pf: tuple[str, Token], pe: tuple[str, Any]) -> bool:
        bf: BFPoset[int] = BFPoset()
        bf.insert(pf[1], 0)
        return pf[0] == pe[0] and bool(bf.match(pe[1]))

    def new_matcher(self) -> Matcher:
        return VcapsMatcher(self._broker_links)

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message
