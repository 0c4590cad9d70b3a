"""The one exception tree of pubguard.

Errors split, as in h11, into *local* misuse (the caller passed something wrong) and *remote*
misbehaviour (a peer, a broker or a file we were handed is wrong). They carry structured
attributes (drop reason, link, identifiers, line, column) and never key material.

::

    PubguardError
    ├── LocalError                  the caller misused the API
    │   ├── ValidationError         an event, filter, constraint or schema is invalid
    │   │   └── ParseError          filter text syntax error (.column)
    │   ├── ConfigError             a bad config file or option (.path, .key)
    │   ├── KeyError_               key derivation refused or impossible (out of range, ...)
    │   └── StateError              operation not allowed in the current state
    │       └── ProfileNotServedError   the broker does not serve that profile (.served)
    ├── RemoteError                 a peer or input source misbehaved
    │   ├── InputError              a bad line in an input file (.path, .line, .column)
    │   ├── FrameError              malformed / oversize / unknown-version frame (.link)
    │   ├── DropError               a message was dropped (.reason: DropReason)
    │   │   ├── RefusedError        the broker refused a request of this client (.ref)
│   │   └── FilterRefusedError  the key service refused a filter (.filter, .identity)
    │   ├── InvalidToken            any authentication failure (opaque on purpose)
    │   └── RevokedError            certificate or entity revoked
    └── TransportError              connection, TLS handshake, timeout
        ├── SlowConsumerError       a bounded queue overflowed (.capacity)
        └── ReplacedError           a newer connection with this identity took over (.identity)
"""

from __future__ import annotations

import enum

__all__ = [
    "ConfigError",
    "DropError",
    "DropReason",
    "FilterRefusedError",
    "FrameError",
    "InputError",
    "InvalidToken",
    "KeyError_",
    "LocalError",
    "ParseError",
    "ProfileNotServedError",
    "PubguardError",
    "RefusedError",
    "RemoteError",
    "ReplacedError",
    "RevokedError",
    "SlowConsumerError",
    "StateError",
    "TransportError",
    "ValidationError",
]


class DropReason(enum.StrEnum):
    """Machine-readable reason carried by every drop (ARCHITECTURE.md, Broker core)."""

    FORGED = "forged"
    REPLAYED = "replayed"
    STALE = "stale"
    UNAUTHORISED = "unauthorised"
    MALFORMED = "malformed"
    FLOOD = "flood"
    DUPLICATE = "duplicate"
    REVOKED = "revoked"
    OVERLOAD = "overload"
    UNKNOWN_TYPE = "unknown_type"


class PubguardError(Exception):
    """Root of every error pubguard raises on purpose."""


class LocalError(PubguardError):
    """The caller misused the API."""


class ValidationError(LocalError, ValueError):
    """An event, filter, constraint or schema is invalid."""


class ParseError(ValidationError):
    """Filter text could not be parsed; ``column`` is 1-based."""

    def __init__(self, message: str, *, text: str = "", column: int = 0) -> None:
        self.text = text
        self.column = column
        where = f" at column {column}" if column else ""
        super().__init__(f"{message}{where}")


class ConfigError(LocalError):
    """A bad configuration file or option."""

    def __init__(self, message: str, *, path: str | None = None, key: str | None = None) -> None:
        self.path = path
        self.key = key
        super().__init__(message)


class KeyError_(LocalError):  # noqa: N801 - avoids shadowing the builtin KeyError
    """A key derivation was refused (out of the authorised range, not a prefix, ...)."""


class StateError(LocalError):
    """The operation is not allowed in the current state."""


class ProfileNotServedError(StateError):
    """A client was about to send a message of a profile its broker does not serve (the broker
    announces the profiles it serves in its ``hello``); nothing was sent."""

    def __init__(self, profile: str, served: tuple[str, ...], *, broker: str | None = None) -> None:
        self.profile = profile
        self.served = served
        who = f"broker {broker}" if broker else "the broker"
        super().__init__(
            f"{who} does not serve profile {profile!r} (it serves: {', '.join(served) or 'none'});"
            " nothing was sent"
        )


class RemoteError(PubguardError):
    """A peer, broker or input source misbehaved."""


class InputError(RemoteError):
    """A bad record in an input file; names the file, the 1-based line and, for a syntax error
    (malformed JSON), the 1-based column."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        at = f" (column {column})" if column is not None else ""
        super().__init__(f"{where}{message}{at}")


class FrameError(RemoteError):
    """A malformed, oversize or unknown-version wire frame."""

    def __init__(self, message: str, *, link: str | None = None) -> None:
        self.link = link
        super().__init__(message)


class DropError(RemoteError):
    """A message was dropped; ``reason`` is machine-readable."""

    def __init__(self, reason: DropReason, message: str = "", **ids: str) -> None:
        self.reason = DropReason(reason)
        self.ids = ids
        super().__init__(f"{self.reason.value}: {message}" if message else self.reason.value)


class RefusedError(DropError):
    """The broker refused a request of this client (an ``Error`` reply to a publish,
    subscribe or advertise); ``ref`` is the refused message's id, ``count`` how many were
    refused (the first one is described)."""

    def __init__(
        self, reason: DropReason, ref: str, detail: str = "", *, broker: str = "", count: int = 1
    ) -> None:
        self.reason = DropReason(reason)
        self.ids = {"ref": ref}
        self.ref = ref
        self.count = count
        who = f"broker {broker}" if broker else "the broker"
        why = f" ({detail})" if detail else ""
        more = f"; {count} refused in all" if count > 1 else ""
        RemoteError.__init__(self, f"{who} refused {ref}: {self.reason.value}{why}{more}")


class FilterRefusedError(DropError):
    """The key service refused a subscription filter of this client (outside its policy):
    nothing was sent to the broker. ``filter`` is the filter's text, ``identity`` the client's,
    ``detail`` the key service's reason."""

    def __init__(self, filter: str, identity: str, detail: str = "") -> None:
        self.reason = DropReason.UNAUTHORISED
        self.ids = {"identity": identity}
        self.filter = filter
        self.identity = identity
        self.detail = detail
        why = f": {detail}" if detail else ""
        RemoteError.__init__(
            self, f"key service refused filter {filter!r} for identity {identity!r}{why}"
        )


class InvalidToken(RemoteError):
    """Authentication failed. Deliberately opaque: it never says which check failed."""

    def __init__(self, message: str = "invalid token") -> None:
        super().__init__(message)


class RevokedError(RemoteError):
    """A certificate or entity has been revoked."""


class TransportError(PubguardError):
    """Connection, TLS handshake or timeout failure."""


class ReplacedError(TransportError):
    """Another connection with the same identity replaced this one at the broker (a second
    client process under one identity): the client stops instead of taking the identity back
    in a loop."""

    def __init__(self, identity: str, *, broker: str | None = None) -> None:
        self.identity = identity
        at = f" at broker {broker}" if broker else ""
        super().__init__(
            f"another connection with identity {identity!r} replaced this one{at}"
            " (give each client process its own identity)"
        )


class SlowConsumerError(TransportError):
    """A bounded queue overflowed."""

    def __init__(self, message: str, *, capacity: int) -> None:
        self.capacity = capacity
        super().__init__(message)
