"""The publication guard's backend: the Rust core (``pubguard._native``, ``native/src/guard/``)
when :data:`pubguard.native.NATIVE` is active, the Python classes of
:mod:`pubguard.schemes.common.guards` otherwise.

Theory of operation
-------------------
The Python guard is the spec. The native core is a port of it, behind the same API, and it is
chosen when a broker scheme is built (``with pubguard.native.use("python")`` around the
construction gives the reference). :func:`root_verifier` returns a
:class:`~pubguard.schemes.common.guards.SignedRootVerifier` or its native twin: the same
``verify`` / ``verify_packed`` (the cache of verified roots, eventguard.txt §4.4 amortised by
a Merkle tree, and of a batch's authenticated inner nodes, so its leaves share their path),
the same ``InvalidToken`` on a bad path or signature, the same ``verifications`` count. The
signature itself is checked by the key's own ``verify`` (``pubguard.crypto``, OpenSSL's
Ed25519) on a cache miss, so the native core needs no signature crate.

A profile's whole publication guard (:mod:`pubguard.schemes.eventguard.fast`,
:mod:`pubguard.schemes.default.fast`) shares its scheme's native verifier, so the caches and the counters are one. It returns, per
publication, ``""`` (pass), a drop reason's value, or ``"fallback"``: the frame holds a value
the port does not model (an integer beyond 64 bits, a ``str``/``bytes`` subclass, a string
that is not UTF-8), decided before any state changes, and the Python guard runs on it whole.
Exceptions raised by the scheme's callbacks (a forged permit's ``InvalidToken``, a malformed
one's ``ValidationError``) pass through unchanged, as the Python guard raises them to
:func:`~pubguard.schemes.common.guard_check.checked`.
"""

from __future__ import annotations

from typing import Any, Final

from pubguard import native
from pubguard.errors import DropReason, ValidationError
from pubguard.schemes.common.guards import DEFAULT_MAX_NODES, SignedRootVerifier
from pubguard.schemes.common.replay import DEFAULT_CACHE_CAPACITY

__all__ = ["FALLBACK", "REASONS", "is_native", "root_verifier"]

#: the native guard's verdict when the Python guard must decide
FALLBACK: Final = "fallback"
#: the native guard's drop verdicts, by value
REASONS: Final = {r.value: r for r in DropReason}


def root_verifier(
    tag: bytes,
    *,
    ttl: float,
    capacity: int = DEFAULT_CACHE_CAPACITY,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> SignedRootVerifier:
    """A :class:`~pubguard.schemes.common.guards.SignedRootVerifier` on the active backend."""
    if capacity < 1:
        raise ValidationError("cache capacity must be positive")
    if max_nodes < 0:
        raise ValidationError("max_nodes must be >= 0")
    mod = native.NATIVE
    if mod is None:
        return SignedRootVerifier(tag, ttl=ttl, capacity=capacity, max_nodes=max_nodes)
    verifier: SignedRootVerifier = mod.SignedRootVerifier(
        tag, ttl=ttl, capacity=capacity, max_nodes=max_nodes
    )
    return verifier


def is_native(verifier: Any) -> bool:
    """Whether ``verifier`` is the native twin (a scheme's guard then runs natively too)."""
    mod = native.NATIVE
    return mod is not None and type(verifier) is mod.SignedRootVerifier
