"""The default profile's publication guard on the native backend: the guard of
:meth:`~pubguard.schemes.default.broker.DefaultBroker._check_publish` (eventguard.txt §4.4,
§4.7 signatures and window; narada §V-B replay) ported to Rust (``native/src/guard/core.rs``),
sharing the scheme's native :class:`~pubguard.schemes.common.guards.SignedRootVerifier`, its
verified permits (``permit``), its revocations (read live) and its replay state, whose
accepted ``(ts, seq)`` still commit with the broker's batch (``before_commit``). The Python
method is the spec; ``tests/schemes/default/test_default_native.py`` compares the two. How
the backend is chosen and what ``"fallback"`` means: :mod:`pubguard.schemes.common.native_guard`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pubguard import native
from pubguard.crypto import H, VerifyKey
from pubguard.schemes.common.native_guard import is_native

__all__ = ["publication_guard"]


def publication_guard(
    roots: Any,
    *,
    max_delay: float,
    permit: Callable[[bytes, float], Any],
    key_of: Callable[[bytes], VerifyKey],
    revoked_keys: set[bytes],
    revoked_serials: set[int],
    replay: Callable[[str, bytes, int, int], Any],
    replay_state: Callable[[str], Any] | None = None,
    batch_verify: bool = True,
) -> Any | None:
    """The native guard for a scheme's publications, or None on the Python backend (or when
    ``roots`` is not the native verifier). ``permit(blob, now)``: the verified permit (raising
    as the scheme does); ``key_of(raw)``: its parsed key; ``revoked_keys``,
    ``revoked_serials``: the scheme's sets of revoked keys and certificate serials, read live
    (the permit is revoked when its key or serial is in them: no call back into Python per
    publication); ``replay(broker_id, key, ts, seq)``: check-and-accept; ``replay_state(
    broker_id)``: its containers for a run (``ReplayState.run_state``), which the guard then
    reads and updates as ``replay`` would, with no call per publication;
    ``batch_verify``: a run's single-signature publications have their signatures verified
    as one Ed25519 batch first (RFC 8032 §5.1.7; ``native/src/guard/batch.rs``), with the
    verdicts and state of one check per frame."""
    mod = native.NATIVE
    if mod is None or not is_native(roots):
        return None

    def fields(blob: bytes, now: float) -> tuple[Any, ...]:
        p = permit(blob, now)
        k = key_of(p.key)
        return (p.kind == "publish", p.subject, p.key, p.epoch, p.not_before, p.not_after) + (
            H(blob),
            p,
            k,
            p.serial,
        )

    return mod.DefaultPublicationGuard(
        roots,
        max_delay=max_delay,
        permit_fields=fields,
        revoked_keys=revoked_keys,
        revoked_serials=revoked_serials,
        replay=replay,
        replay_state=replay_state,
        batch_verify=batch_verify,
    )
