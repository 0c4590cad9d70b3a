"""PSGuard's publication guard on the native backend: the check of
:meth:`~pubguard.schemes.psguard.broker.PSGuardBroker.broker_check` (profile ``psguard``: the
publisher's signature on the record or on its batch's Merkle root, then the timestamp window)
ported to Rust (``native/src/guard/psguard.rs``), one call per publication or per run,
sharing the scheme's native :class:`~pubguard.schemes.common.guards.SignedRootVerifier` and
reading its publishers and revoked names live. The Python method is the spec;
``tests/schemes/psguard/test_psguard_native.py`` compares the two. How the backend is chosen
and what ``"fallback"`` means: :mod:`pubguard.schemes.common.native_guard`.
"""

from __future__ import annotations

from typing import Any

from pubguard import native
from pubguard.crypto import VerifyKey
from pubguard.schemes.common.native_guard import is_native

__all__ = ["publication_guard"]


def publication_guard(
    roots: Any,
    *,
    max_delay_ms: int,
    publishers: dict[str, VerifyKey],
    revoked: set[str],
) -> Any | None:
    """The native guard for a scheme's publications, or None on the Python backend (or when
    ``roots`` is not the native verifier)."""
    mod = native.NATIVE
    if mod is None or not is_native(roots):
        return None
    return mod.PSGuardPublicationGuard(
        roots, max_delay_ms=max_delay_ms, publishers=publishers, revoked=revoked
    )
