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
:mod:`pubguard.schemes.default.fast`, :mod:`pubguard.schemes.psguard.fast`) shares its
scheme's native verifier, so the caches and the counters are one; narada's
(:mod:`pubguard.schemes.narada.fast`) calls back into its scheme for the token and replay
checks. It returns, per
publication, ``""`` (pass), a drop reason's value, or ``"fallback"``: the frame holds a value
the port does not model (an integer beyond 64 bits, a ``str``/``bytes`` subclass, a string
that is not UTF-8), decided before any state changes, and the Python guard runs on it whole.
Exceptions raised by the scheme's callbacks (a forged permit's ``InvalidToken``, a malformed
one's ``ValidationError``) pass through unchanged, as the Python guard raises them to
:func:`~pubguard.schemes.common.guard_check.checked`.

A run of publications (``BrokerScheme.broker_check_run``, which ``Broker.handle_batch`` calls
for a batch read from one link) is one native call, ``check_msgs`` on the core's
``Publish`` messages (the guard reads each one's fields itself; ``check_run`` takes the same
as tuples), driven by :func:`check_run`: the guard's state must evolve exactly as one call
per frame leaves it, so the call stops where Python has to act before the next frame: after
a verdict that strikes the source (it may be banned for the next frame: eventguard.txt §4.7,
Fig. 3 containment; narada §V-A), before a frame the port hands back, and at a callback's
exception (mapped here as ``checked`` and the core map it). The core checks a frame the run
did not decide itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn

from pubguard import native
from pubguard.errors import (
    DropError,
    DropReason,
    InvalidToken,
    PubguardError,
    RevokedError,
    ValidationError,
)
from pubguard.schemes.base import CheckContext, LinkKind
from pubguard.schemes.common.guard_check import GUARD_STRIKING, checked
from pubguard.schemes.common.guards import DEFAULT_MAX_NODES, SignedRootVerifier, StrikeCounter
from pubguard.schemes.common.replay import DEFAULT_CACHE_CAPACITY

__all__ = ["FALLBACK", "REASONS", "check_run", "is_native", "root_verifier", "token_run"]

#: a native guard's ``check_run`` over frames (or its ``check_msgs`` over the core's
#: publications): ``(verdicts, exception or None)``
RunCall = Callable[[Sequence[Any], bool], tuple[list[str], BaseException | None]]

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


def check_run(
    call: RunCall,
    frames: Sequence[Any],
    strikes: StrikeCounter | None,
    ctx: CheckContext,
    *,
    strike_brokers: bool = False,
    striking: frozenset[DropReason] = GUARD_STRIKING,
) -> list[DropReason | None]:
    """The verdicts of a prefix of ``frames`` from one native ``check_run`` (see the module
    docstring), with ``checked``'s strikes applied in order (``strikes``: None for a guard
    that strikes no source; ``striking``: the verdicts that count, as the scheme passes them
    to ``checked``): an empty list when the source is banned (the core's own check answers
    ``flood``) or the first frame falls back."""
    src, now = ctx.link.link_id, ctx.now
    if strikes is not None and strikes.banned(src, now):
        return []
    counts = strikes is not None and (strike_brokers or ctx.link.kind is LinkKind.CLIENT)
    verdicts, exc = call(frames, counts)
    out: list[DropReason | None] = []
    for v in verdicts:
        reason = REASONS[v] if v else None
        if counts and reason in striking:
            strikes.strike(src, now)  # type: ignore[union-attr]
        out.append(reason)
    if exc is not None:
        out.append(_reason_of(exc, strikes, ctx, strike_brokers, striking))
    return out


def token_run(
    fast: Any,
    roots: Any,
    messages: Sequence[Any],
    events: Sequence[Any],
    ctx: CheckContext,
    strikes: StrikeCounter | None = None,
    *,
    strike_brokers: bool = False,
) -> list[DropReason | None]:
    """``broker_check_run`` of a token profile (default, psguard: routing parts decoded to
    ``(mode, nonce)`` events, tags under ``t``) whose native guard ``fast`` shares the
    scheme's verifier ``roots``: :func:`check_run` over its ``check_run``; an empty prefix
    without it (the Python backend, or a verifier swapped since)."""
    if fast is None or fast.roots is not roots:
        return []
    # the frames (event_id, mode, nonce, routing's t, body, meta) are read natively
    return check_run(
        lambda ms, stop: fast.check_msgs(ms, events, ctx.now, ctx.broker_id, stop_on_strike=stop),
        messages,
        strikes,
        ctx,
        strike_brokers=strike_brokers,
    )


def _reason_of(
    exc: BaseException,
    strikes: StrikeCounter | None,
    ctx: CheckContext,
    strike_brokers: bool,
    striking: frozenset[DropReason],
) -> DropReason | None:
    """The verdict one ``broker_check`` (``checked`` when the guard strikes, then the core's
    ``_check``) gives a frame whose guard raised ``exc``; anything else is a bug and
    propagates, as there."""

    def again() -> NoReturn:
        raise exc

    try:
        if strikes is None:
            again()
        return checked(strikes, ctx, again, striking=striking, strike_brokers=strike_brokers)
    except InvalidToken:
        return DropReason.FORGED
    except DropError as e:
        return e.reason
    except RevokedError:
        return DropReason.REVOKED
    except (PubguardError, TypeError, ValueError, KeyError, IndexError, AttributeError):
        return DropReason.MALFORMED
