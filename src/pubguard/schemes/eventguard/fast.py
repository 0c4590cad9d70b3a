"""EventGuard's publication guard on the native backend (eventguard.txt §4.4, §4.7): the
routing guard of :meth:`~pubguard.schemes.eventguard.broker.EventGuardBroker._check_publish`
ported to Rust (``native/src/guard/core.rs``), one call per publication or per batch, sharing
the scheme's native :class:`~pubguard.schemes.common.guards.SignedRootVerifier`, its permit
cache (``permit``), its revoked keys (read live) and its keys. The Python method is the spec;
``tests/schemes/eventguard/test_eventguard_native.py`` compares the two. How the backend is
chosen and what ``"fallback"`` means: :mod:`pubguard.schemes.common.native_guard`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pubguard import native
from pubguard.crypto import VerifyKey
from pubguard.keys.ms import AdvertisementPermit, Permit
from pubguard.schemes.common.native_guard import is_native
from pubguard.schemes.eventguard.wire import LEAF_TAG

__all__ = ["publication_guard"]

AdFields = tuple[bytes, str, int, bytes, float, float]


def _ad_fields(permit: Callable[[Any, float], Permit]) -> Callable[[bytes, float], Any]:
    def fields(blob: bytes, now: float) -> AdFields | None:
        p = permit(blob, now)  # decoded and MS-verified (cached); raises as the scheme does
        if not isinstance(p, AdvertisementPermit):
            return None
        return (p.token, p.subject, p.epoch, p.publisher_key, p.issued_at, p.expires_at)

    return fields


def publication_guard(
    roots: Any,
    *,
    max_delay: float,
    permit: Callable[[Any, float], Permit],
    revoked: set[bytes],
    batch_verify: bool = True,
) -> Any | None:
    """The native guard for a scheme's publications, sharing its verifier ``roots``, its
    verified-permit lookup ``permit(blob, now)`` and its set of ``revoked`` keys (read live);
    None on the Python backend (or when ``roots`` is not the native verifier).
    ``batch_verify``: a run's single-signature publications have their signatures verified
    as one Ed25519 batch first (RFC 8032 §5.1.7; ``native/src/guard/batch.rs``), with the
    verdicts and state of one check per frame."""
    mod = native.NATIVE
    if mod is None or not is_native(roots):
        return None
    return mod.EventGuardPublicationGuard(
        roots,
        max_delay=max_delay,
        leaf_tag=LEAF_TAG,
        permit_fields=_ad_fields(permit),
        revoked=revoked,
        key_of=VerifyKey.from_bytes,
        batch_verify=batch_verify,
    )
