"""The key services' request contract: frames, strict field access and the typed refusal.

Theory of operation
-------------------
A request is ``{"op": str, "id": int, ...fields}``; a response is ``{"id", "ok": {...}}`` or
``{"id", "error": code, "message": str}`` with ``code`` one of :data:`ERROR_CODES`. Every op of
every hosted service (:mod:`pubguard.net.keyservice.core` for the EventGuard MS and the narada
TDN, :mod:`pubguard.net.keyservice.kdc` for the PSGuard KDC and the default authority) reads its
fields through :func:`field` and refuses with :class:`Refused`; the core turns a refusal into
the error frame. This module is what those cores, the asyncio shell
(:mod:`pubguard.net.keyservice.server`) and the tests share, so none of them reaches into
another's private names.

The caller is a :class:`Caller`: the verified TLS certificate's common name, role and serial,
never a field of the request (eventguard.txt §4.2-4.3: the MS authenticates S and P before it
issues permits in their names).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

__all__ = [
    "ERROR_CODES",
    "MAX_FIELD",
    "MAX_REQUEST_SIZE",
    "Caller",
    "Op",
    "Refused",
    "field",
]

MAX_REQUEST_SIZE: Final = 64 * 1024  # a request carries a permit, a key and a certificate at most
MAX_FIELD: Final = 16 * 1024
ERROR_CODES: Final = (
    "malformed",
    "unknown_op",
    "invalid",
    "invalid_token",
    "unauthorised",
    "revoked",
    "unavailable",
)


class Refused(Exception):
    """An op refuses the request: ``code`` (one of :data:`ERROR_CODES`) and a message that
    names no field value (the message travels to the caller; the log gets the code only)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code, self.message = code, message


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks, as the TLS handshake established it: the certificate's common name, its role
    (``client``, ``broker``, ``kmc``, ...) and its serial (bound into the default profile's
    publish permits)."""

    name: str
    role: str | None = None
    serial: int | None = None


def field(req: dict[str, Any], name: str, kind: type) -> Any:
    """``req[name]`` if it is exactly of type ``kind`` (a bool is no int), bounded by
    :data:`MAX_FIELD` and, for text and bytes, not empty; otherwise :class:`Refused`."""
    v: Any = req.get(name)
    if type(v) is not kind:
        raise Refused("malformed", f"field {name!r} must be {kind.__name__}")
    if isinstance(v, str | bytes) and len(v) > MAX_FIELD:
        raise Refused("malformed", f"field {name!r} is too long")
    if isinstance(v, str | bytes) and not v:
        raise Refused("invalid", f"field {name!r} must not be empty")
    return v


#: one op of a hosted service: (request, caller, now, rng) -> result map, or :class:`Refused`
Op: TypeAlias = Callable[[dict[str, Any], Caller, float, _random.Random | None], dict[str, Any]]
