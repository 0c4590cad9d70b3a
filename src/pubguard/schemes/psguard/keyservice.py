"""The psguard key service: the KDC of one deployment (psguard.txt §3) with its policy; its
client is :class:`~pubguard.schemes.psguard.client.PSGuardClient`.

It refuses filters no policy entry of the subscriber covers (DropError UNAUTHORISED), gives
publishers key trees only for their scopes (:class:`_ScopedKDC`), and changes keys per epoch
(psguard.txt §3.2): a client renews its filters' keys at an epoch change, a withdrawn filter
is not renewed, so its holder cannot read the new epoch's events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, cast

from pubguard.crypto import H
from pubguard.errors import DropError, DropReason, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import Filter
from pubguard.schemes.psguard.authority import Authority, FilterKeys
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import ProtectedFilterRows, Schema

__all__ = ["DEFAULT_EPOCH_LENGTH", "NEXT_EPOCH_WINDOW", "PSGuardKeyService", "filter_id"]

#: seconds before an epoch begins that its keys (and the default profile's subscribe permits)
#: are served and accepted, so subscriptions are renewed without a gap (pubguard.net.client.renewal)
NEXT_EPOCH_WINDOW: Final = 60.0
DEFAULT_EPOCH_LENGTH: Final = 30 * 86400.0  # psguard.txt §3.2 rekeying epochs (as eventguard §4.8)


class _ScopedKDC:
    """The KDC as a publisher sees it: key trees of its own scopes only."""

    __slots__ = ("_kdc", "_scopes")

    def __init__(self, kdc: KDC, scopes: frozenset[str] | None) -> None:
        self._kdc, self._scopes = kdc, scopes

    def __repr__(self) -> str:
        return "_ScopedKDC(<secret>)"

    def _allow(self, w: str) -> None:
        if self._scopes is not None and w not in self._scopes:
            raise DropError(DropReason.UNAUTHORISED, "no publish right for this scope")

    def for_epoch(self, epoch: int) -> _ScopedKDC:
        return _ScopedKDC(self._kdc.for_epoch(epoch), self._scopes)

    def topic(self, w: str, publisher: str | None = None) -> Any:
        self._allow(w)
        return self._kdc.topic(w, publisher)

    def topic_token(self, w: str) -> bytes:
        self._allow(w)
        return self._kdc.topic_token(w)


class PSGuardKeyService:
    """The KDC of one deployment (psguard.txt §3): tokens and keys for authorised filters,
    scoped key trees for publishers, one key generation per epoch.

    ``subscribers``: name -> filters it may subscribe to (a request must be covered by one of
    them); None allows every filter. ``publishers``: name -> scopes (topics, or
    ``"\\x01type:<name>"`` for types without a topic) it may publish on; None allows all."""

    def __init__(
        self,
        kdc: KDC,
        schema: Schema,
        *,
        subscribers: Mapping[str, Iterable[Filter | str]] | None = None,
        publishers: Mapping[str, Iterable[str]] | None = None,
        epoch_length: float = DEFAULT_EPOCH_LENGTH,
        origin: float = 0.0,
    ) -> None:
        if not epoch_length > 0:
            raise ValidationError("epoch_length must be positive")
        self._kdc, self.schema = kdc, schema
        self.epoch_length, self.origin = float(epoch_length), float(origin)
        self._subs: dict[str, list[Filter]] | None = None
        if subscribers is not None:
            self._subs = {n: [_as_filter(f) for f in fs] for n, fs in subscribers.items()}
        self._pubs = (
            None if publishers is None else {n: frozenset(s) for n, s in publishers.items()}
        )
        self._authorities: dict[int, Authority] = {}

    def __repr__(self) -> str:
        return f"PSGuardKeyService(types={sorted(self.schema.types)})"

    def epoch_at(self, now: float) -> int:
        return max(0, int((now - self.origin) // self.epoch_length))

    def authority(self, epoch: int) -> Authority:
        a = self._authorities.get(epoch)
        if a is None:
            if len(self._authorities) > 8:
                self._authorities.clear()
            a = self._authorities[epoch] = Authority(self._kdc, self.schema, epoch=epoch)
        return a

    def allowed(self, subscriber: str, f: Filter) -> bool:
        if self._subs is None:
            return True
        return any(g.covers(f) for g in self._subs.get(subscriber, ()))

    def authorise(
        self, subscriber: str, f: Filter, *, epoch: int
    ) -> tuple[ProtectedFilterRows, FilterKeys]:
        """psguard.txt §3.1/§4.1: the filter's routing tokens and its authorisation keys."""
        if not self.allowed(subscriber, f):
            raise DropError(DropReason.UNAUTHORISED, f"{subscriber} may not subscribe to {f}")
        a = self.authority(epoch)
        return a.protect_filter(f), a.authorise(f)

    def set_subscriber(self, subscriber: str, filters: Iterable[Filter | str]) -> None:
        """Replace a subscriber's rights (an empty list revokes it from the next epoch on)."""
        if self._subs is None:
            self._subs = {}
        self._subs[subscriber] = [_as_filter(f) for f in filters]

    def publisher(
        self, name: str, signing_key: Any, *, epoch: int, mode: str = "randomized"
    ) -> Publisher:
        if self._pubs is not None and name not in self._pubs:
            raise DropError(DropReason.UNAUTHORISED, f"{name} may not publish")
        scoped = _ScopedKDC(self._kdc, None if self._pubs is None else self._pubs[name])
        return Publisher(
            cast(KDC, scoped),
            self.schema,
            name=name,
            signing_key=signing_key,
            epoch=epoch,
            mode=mode,
        )


def _as_filter(f: Filter | str) -> Filter:
    return Filter.parse(f) if isinstance(f, str) else f


def filter_id(f: Filter) -> str:
    """A stable id for a filter without one (the KDC needs ids; brokers never see them)."""
    return f.id or "f-" + H(str(f).encode())[:8].hex()
