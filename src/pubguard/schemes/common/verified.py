"""The subscriber's cache of verified credentials (permits, security tokens).

Theory of operation
-------------------
Every delivery of the eventguard, narada and default profiles carries a credential signed by
the key service (EventGuard's MS advertisement permit, eventguard.txt §4.3; Narada's KMC
security token, narada §IV-E; the default authority's publish permit) next to the publisher's
own signature. The credential is the same on every publication of one publisher in one epoch,
so verifying its signature per delivery doubles a subscriber's cost (an Ed25519 verify is
~110 us, the rest of opening an event ~20-40 us). As brokers do (:class:`~pubguard.schemes.
guards.SignedRootVerifier`, narada §VI's verified-token cache), a subscriber verifies a
credential once and keeps the decoded result, keyed by the verifying key and the exact bytes
that were verified, until the credential ends or ``ttl`` passes, whichever comes first.

Only the signature check is cached: the caller still checks, on every delivery, what depends
on the delivery (topic, right, subject, epoch, validity at ``now``, revocation lists). A
credential with one byte changed is another key, so it is verified afresh. Bounded
(:data:`DEFAULT_CAPACITY`, least recently used dropped first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Generic, TypeVar

from pubguard.crypto import H
from pubguard.errors import ValidationError
from pubguard.schemes.common.guards import TTLCache

__all__ = ["DEFAULT_CAPACITY", "DEFAULT_TTL", "VerifiedCredentials"]

DEFAULT_CAPACITY: Final = 1024  # credentials a subscriber keeps verified (publishers x epochs)
DEFAULT_TTL: Final = 600.0  # seconds a verified credential is trusted without re-verifying

C = TypeVar("C")


class VerifiedCredentials(Generic[C]):
    """``check(signer, blob, verify, now)`` returns ``verify()``'s decoded credential,
    calling it only when ``(signer, blob)`` is not cached. ``verify`` must raise on any
    failure (nothing is cached then) and return the decoded credential; ``expires(c)`` gives
    its end (``None``: only ``ttl`` bounds it)."""

    __slots__ = ("_cache", "_expires", "ttl", "verifications")

    def __init__(
        self,
        expires: Callable[[C], float | None] = lambda c: None,
        *,
        ttl: float = DEFAULT_TTL,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        if not ttl > 0:
            raise ValidationError("credential cache ttl must be positive")
        self.ttl = ttl
        self._expires = expires
        self._cache: TTLCache[tuple[bytes, bytes], C] = TTLCache(capacity)
        self.verifications = 0  # signature checks actually performed

    def __repr__(self) -> str:
        return f"VerifiedCredentials(size={len(self._cache)}, verifications={self.verifications})"

    def __len__(self) -> int:
        return len(self._cache)

    def check(self, signer: bytes, blob: bytes, verify: Callable[[], C], *, now: float) -> C:
        ck = (signer, H(blob))
        c = self._cache.get(ck, now)
        if c is None:
            self.verifications += 1
            c = verify()
            end = self._expires(c)
            until = now + self.ttl if end is None else min(now + self.ttl, end)
            if until > now:
                self._cache.put(ck, c, until)
        return c

    def clear(self) -> None:
        self._cache.clear()
