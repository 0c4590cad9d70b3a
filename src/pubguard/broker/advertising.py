"""Advertisement handling for the broker core (eventguard.txt §2.1, §4.3, §4.6).

Advertisements are flooded over the tree: a broker stores each one under ``(link, adv_id)``
and forwards it, renamed like a forwarded subscription, to every broker link except the one it
came on; an unadvertise withdraws it the same way. A broker link that (re)connects is sent the
advertisements from every other link (``Broker.link_up``). Publication routing does not depend
on them (see ``pubguard.broker.core``), so their arrival order can never lose an event; they
exist so every broker knows what is advertised and a scheme's advertise / unadvertise guards
(EventGuard's UAT permits) can check them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pubguard.broker.actions import Action, Forward
from pubguard.errors import DropReason, PubguardError
from pubguard.schemes.base import LinkInfo, LinkKind
from pubguard.wire.messages import Advertise, Unadvertise

if TYPE_CHECKING:
    from pubguard.broker.core import _Profile
    from pubguard.schemes.base import BrokerScheme

__all__ = ["DECODE_ERRORS", "AdvertisementRouting", "Key", "skey", "why"]

Key = tuple[str, str]  # (link_id, sub_id or adv_id)

# what a scheme hook may raise on bad input (-> malformed); anything else is a bug and propagates
DECODE_ERRORS = (PubguardError, TypeError, ValueError, KeyError, IndexError, AttributeError)


def why(exc: BaseException) -> str:
    """Drop detail for a decoding failure: our own messages, never a foreign repr."""
    if isinstance(exc, PubguardError):
        return str(exc)
    return f"undecodable ({type(exc).__name__})"


def skey(key: Key) -> str:
    """The store key of a ``(link, id)`` pair."""
    return f"{key[0]}\x00{key[1]}"


class CoreHooks:
    """The Broker methods the routing mixins call (declared for the type checker only; the
    Broker in broker/core.py defines them)."""

    if TYPE_CHECKING:

        def _profile(self, name: str) -> _Profile | None: ...
        def _drop(
            self,
            reason: DropReason,
            detail: str,
            link: LinkInfo,
            ref: str | None,
            op: str | None = None,
        ) -> list[Action]: ...
        def _check(
            self, scheme: BrokerScheme, msg: Any, link: LinkInfo, now: float, prior: Any
        ) -> list[Action] | None: ...
        def _ack(self, link: LinkInfo, msg: Any) -> list[Action]: ...
        def _outgoing(
            self, actions: list[Action], now: float, scheme: BrokerScheme | None = None
        ) -> list[Action]: ...
        def _persist(self, table: str, key: str, value: Mapping[str, Any]) -> None: ...
        def _unpersist(self, table: str, key: str) -> None: ...
        def _fwd_id(self, key: Key) -> str: ...
        def _lease_advert(self, key: Key, msg: Advertise) -> None: ...


class AdvertisementRouting(CoreHooks):
    """Mixin of :class:`~pubguard.broker.core.Broker`: the advertise / unadvertise handlers."""

    links: dict[str, LinkInfo]
    _advs: dict[Key, Advertise]
    _adv_expiry: dict[Key, float]
    counters: Counter[str]

    def _on_advertise(self, msg: Advertise, link: LinkInfo, now: float) -> list[Action]:
        prof = self._profile(msg.profile)
        if prof is None:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.adv_id, msg.op)
        try:
            prof.scheme.decode_filter(msg.filter)
        except DECODE_ERRORS as exc:
            return self._drop(DropReason.MALFORMED, why(exc), link, msg.adv_id, msg.op)
        key = (link.link_id, msg.adv_id)
        prior = self._advs.get(key)
        refused = self._check(prof.scheme, msg, link, now, prior)
        if refused is not None:
            return refused
        out: list[Action] = []
        if prior != msg:
            self._advs[key] = msg
            self._lease_advert(key, msg)
            self._persist("advertisements", skey(key), {"link": key[0], "message": msg.to_wire()})
            for lk in self._broker_links(except_=link.link_id):
                out.append(self._advertise_to(lk, key, msg))
        return self._ack(link, msg) + self._outgoing(out, now)

    def _on_unadvertise(self, msg: Unadvertise, link: LinkInfo, now: float) -> list[Action]:
        prof = self._profile(msg.profile)
        if prof is None:
            return self._drop(DropReason.UNKNOWN_TYPE, "unknown profile", link, msg.adv_id, msg.op)
        key = (link.link_id, msg.adv_id)
        prior = self._advs.get(key)
        if prior is None:
            self.counters["unadvertise.unknown"] += 1
            return self._ack(link, msg)
        if prior.profile != msg.profile:
            return self._drop(
                DropReason.MALFORMED,
                "profile differs from the advertisement",
                link,
                msg.adv_id,
                msg.op,
            )
        refused = self._check(prof.scheme, msg, link, now, prior)
        if refused is not None:
            return refused
        return self._ack(link, msg) + self._outgoing(
            self._remove_adv(key, msg.meta, link.link_id), now
        )

    def _remove_adv(self, key: Key, meta: Mapping[str, Any], src: str) -> list[Action]:
        adv = self._advs.pop(key)
        self._adv_expiry.pop(key, None)
        self._unpersist("advertisements", skey(key))
        fid = self._fwd_id(key)
        return [
            Forward(lk, Unadvertise(fid, adv.profile, meta))
            for lk in self._broker_links(except_=src)
        ]

    def _advertise_to(self, link_id: str, key: Key, adv: Advertise) -> Forward:
        return Forward(link_id, Advertise(self._fwd_id(key), adv.profile, adv.filter, adv.meta))

    def _broker_links(self, except_: str) -> list[str]:
        return sorted(
            lk for lk, i in self.links.items() if i.kind is not LinkKind.CLIENT and lk != except_
        )
