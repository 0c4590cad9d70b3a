"""Narada's publication guard on the native backend: the check of
:meth:`~pubguard.schemes.narada.broker.NaradaBroker._check` on a publication (narada §IV-H,
Fig. 3: token, rights, the NTP window of §V-B, the entity's signature, then replay by
``(ts, seq)``) ported to Rust (``native/src/guard/narada.rs``), one call per publication or
per run. It calls back into its scheme for the token (:meth:`NaradaBroker.verified`: the
verified-token cache of §VI, the CRL and the token's duration, so both backends share one
cache and one count of verifications) and for the replay state, whose accepted
``(ts, seq)`` still commit with the broker's batch (``before_commit``). The Python method
is the spec; ``tests/schemes/narada/test_narada_native.py`` compares the two. How the
backend is chosen and what ``"fallback"`` means: :mod:`pubguard.schemes.common.native_guard`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pubguard import native
from pubguard.errors import DropError, DropReason, InvalidToken, RevokedError, ValidationError

__all__ = ["publication_guard"]

#: the drop reasons the native guard gives (native/src/guard/core.rs ``Reason``)
_NATIVE_REASONS: Final = frozenset(
    r.value
    for r in (
        DropReason.MALFORMED,
        DropReason.FORGED,
        DropReason.STALE,
        DropReason.UNAUTHORISED,
        DropReason.REVOKED,
        DropReason.REPLAYED,
    )
)


def _token_fields(verified: Callable[[Any, Any, float], Any]) -> Callable[..., Any]:
    """``verified(tok, cert, now)``'s token as the native guard reads it (``route``), or
    the reason it is refused with, mapped as ``_check_raising`` and ``checked`` map them."""

    def fields(tok: bytes, cert: bytes, now: float) -> tuple[Any, ...] | str:
        try:
            return verified(tok, cert, now).route  # type: ignore[no-any-return]
        except DropError as exc:
            if exc.reason.value in _NATIVE_REASONS:
                return str(exc.reason.value)
            raise
        except RevokedError:
            return DropReason.REVOKED.value
        except InvalidToken:
            return DropReason.FORGED.value
        except (ValidationError, TypeError, ValueError, KeyError):
            return DropReason.MALFORMED.value

    return fields


def publication_guard(
    *,
    max_delay: float,
    verified: Callable[[Any, Any, float], Any],
    replay: Callable[[str, bytes, int, int], Any],
    batch_verify: bool = True,
) -> Any | None:
    """The native guard for a scheme's publications, or None on the Python backend.
    ``verified(tok, cert, now)``: the scheme's checked token (raising as it does), whose
    ``route`` is ``(topic, allows publish, certificate fingerprint, entity VerifyKey, its raw
    bytes)``; ``replay(broker_id, fingerprint, ts, seq)``: the replay state's
    check-and-accept; ``batch_verify``: in ``check_run``, try the run's entity signatures as
    one Ed25519 batch first (RFC 8032 §5.1.7; ``native/src/ed25519.rs`` says where a batch
    may judge differently from OpenSSL: a signature only the key's holder can make), each
    signature the batch did not verify checked alone as before."""
    mod = native.NATIVE
    if mod is None:
        return None
    return mod.NaradaPublicationGuard(
        max_delay=max_delay,
        verified=_token_fields(verified),
        replay=replay,
        batch_verify=batch_verify,
    )
