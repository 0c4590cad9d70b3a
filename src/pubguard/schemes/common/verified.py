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

One cache per process
---------------------
A process often hosts many subscribers (an application with one client per user, the
bench's 32 subscribers in one process). Each delivery of a Merkle batch carries the same
root signature and the same publisher credential, so per-subscriber caches verify each
batch's root once *per subscriber* it reaches: with fan-out one and 32 subscribers, a batch of
64 publications costs up to 32 Ed25519 verifies instead of one (eventguard.txt §4.4, §4.7:
the signature and the permit travel with every publication, and every receiver checks them).
:class:`SharedRoots` and :class:`SharedCredentials` are a subscriber's face of one
process-wide cache per profile: whether a signature verifies is a pure function of public
inputs (the signer's public key, the signed bytes, the signature), so a result one subscriber
established is exactly what another would compute, and sharing it gives nothing away and
trusts nothing new. What stays per subscriber and per delivery is unchanged: the leaf and its
Merkle path are recomputed up to an authenticated node of the verified tree, the credential's
subject, topic, epoch, validity and revocation are checked against the delivery, and the
payload is opened with the subscriber's own keys. The caches are locked (a client may open a
delivery in a worker thread), and each face counts the signature checks made on its behalf
(a client's ``signature_checks``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Generic, TypeVar

from pubguard.crypto import H, VerifyKey
from pubguard.errors import ValidationError
from pubguard.schemes.common.guards import SignedRootVerifier, TTLCache

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_TTL",
    "SharedCredentials",
    "SharedRoots",
    "VerifiedCredentials",
]

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


# -- one cache per process -------------------------------------------------------------------

#: guards every process-wide cache below and their registry (one lock: a client's hot path
#: takes it once per delivery, uncontended unless openings run in worker threads)
_LOCK: Final = threading.Lock()
_ROOTS: dict[tuple[bytes, float], SignedRootVerifier] = {}
_CREDENTIALS: dict[tuple[str, float], VerifiedCredentials[Any]] = {}


class SharedRoots:
    """A subscriber's face of the process-wide :class:`SignedRootVerifier` for ``tag`` (one
    per signed-root tag and ``ttl``; see "One cache per process" above). ``verify`` is
    ``SignedRootVerifier.verify``; :attr:`verifications` counts the signature checks made for
    this face."""

    __slots__ = ("_inner", "verifications")

    def __init__(self, tag: bytes, *, ttl: float) -> None:
        with _LOCK:
            inner = _ROOTS.get((tag, ttl))
            if inner is None:
                inner = _ROOTS[(tag, ttl)] = SignedRootVerifier(tag, ttl=ttl)
        self._inner = inner
        self.verifications = 0

    def __repr__(self) -> str:
        return f"SharedRoots(verifications={self.verifications})"

    def verify(
        self,
        key: VerifyKey,
        leaf: bytes,
        sig: bytes,
        *,
        now: float,
        index: int = 0,
        size: int = 1,
        path: Sequence[bytes] | bytes = (),
    ) -> bytes:
        """The verified root; :class:`~pubguard.errors.InvalidToken` on any failure."""
        inner = self._inner
        with _LOCK:
            before = inner.verifications
            try:
                return inner.verify(key, leaf, sig, now=now, index=index, size=size, path=path)
            finally:
                self.verifications += inner.verifications - before


class SharedCredentials(Generic[C]):
    """A subscriber's face of the process-wide :class:`VerifiedCredentials` of one ``kind``
    of credential (a name such as ``"default/publish-permit"``: one decoder and verifier per
    kind, so a cached result is always of the kind asked for). ``expires`` and ``ttl`` are
    those of :class:`VerifiedCredentials` and fixed by the first face of a kind and ``ttl``."""

    __slots__ = ("_inner", "verifications")

    def __init__(
        self, kind: str, expires: Callable[[C], float | None], *, ttl: float = DEFAULT_TTL
    ) -> None:
        with _LOCK:
            inner = _CREDENTIALS.get((kind, ttl))
            if inner is None:
                inner = _CREDENTIALS[(kind, ttl)] = VerifiedCredentials(expires, ttl=ttl)
        self._inner: VerifiedCredentials[C] = inner
        self.verifications = 0

    def __repr__(self) -> str:
        return f"SharedCredentials(verifications={self.verifications})"

    def check(self, signer: bytes, blob: bytes, verify: Callable[[], C], *, now: float) -> C:
        """:meth:`VerifiedCredentials.check` on the process-wide cache."""
        inner = self._inner
        with _LOCK:
            before = inner.verifications
            try:
                return inner.check(signer, blob, verify, now=now)
            finally:
                self.verifications += inner.verifications - before
