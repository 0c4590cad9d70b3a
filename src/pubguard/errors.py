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
    ├── RemoteError                 a peer or input source misbehaved
    │   ├── InputError              a bad line in an input file (.path, .line)
    │   ├── FrameError              malformed / oversize / unknown-version frame (.link)
    │   ├── DropError               a message was dropped (.reason: DropReason)
    │   ├── InvalidToken            any authentication failure (opaque on purpose)
    │   └── RevokedError            certificate or entity revoked
    └── TransportError              connection, TLS handshake, timeout
        └── SlowConsumerError       a bounded queue overflowed (.capacity)
"""

from __future__ import annotations

import enum

__all__ = [
    "ConfigError",
    "DropError",
    "DropReason",
    "FrameError",
    "InputError",
    "InvalidToken",
    "KeyError_",
    "LocalError",
    "ParseError",
    "PubguardError",
    "RemoteError",
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


class RemoteError(PubguardError):
    """A peer, broker or input source misbehaved."""


class InputError(RemoteError):
    """A bad record in an input file; names the file and the 1-based line."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        super().__init__(f"{where}{message}")


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


class InvalidToken(RemoteError):
    """Authentication failed. Deliberately opaque: it never says which check failed."""

    def __init__(self, message: str = "invalid token") -> None:
        super().__init__(message)


class RevokedError(RemoteError):
    """A certificate or entity has been revoked."""


class TransportError(PubguardError):
    """Connection, TLS handshake or timeout failure."""


class SlowConsumerError(TransportError):
    """A bounded queue overflowed."""

    def __init__(self, message: str, *, capacity: int) -> None:
        self.capacity = capacity
        super().__init__(message)
