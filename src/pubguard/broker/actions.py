"""What :meth:`Broker.handle` asks its driver (transport or simulator) to do.

Three actions send a message on a link (``Forward`` to a broker, ``DeliverTo`` a local client,
``Reply`` with an ack or error to a local client); all three have ``.link`` and ``.message``
so a driver can treat them alike. ``Drop`` reports a refused message with its machine-readable
reason (ARCHITECTURE.md, "Broker core"); the core has already counted it.

Actions are immutable named tuples rather than dataclasses because the core creates one per
delivery on the publication fast path; equality also compares the action type, so
``Forward(l, m) != DeliverTo(l, m)``. ``match`` works positionally and by keyword.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeAlias

from pubguard.errors import DropReason
from pubguard.wire.messages import Ack, Deliver, Error, Message

__all__ = ["Action", "DeliverTo", "Drop", "Forward", "Reply", "SendAction"]


class Forward(NamedTuple):
    """Send ``message`` to the broker at the other end of ``link``."""

    link: str
    message: Message


class DeliverTo(NamedTuple):
    """Hand a matching publication to the local client on ``link``."""

    link: str
    message: Deliver


class Reply(NamedTuple):
    """Answer a directly connected client: Ack on acceptance, Error on a drop."""

    link: str
    message: Ack | Error


class Drop(NamedTuple):
    """A message was refused; ``message_id`` is its id when it could be read."""

    reason: DropReason
    detail: str
    message_id: str | None
    link: str
    op: str | None = None


def _typed_eq(self: tuple[Any, ...], other: object) -> bool:
    return type(self) is type(other) and tuple.__eq__(self, other)  # type: ignore[arg-type]


def _typed_ne(self: tuple[Any, ...], other: object) -> bool:
    return not _typed_eq(self, other)


def _typed_hash(self: tuple[Any, ...]) -> int:
    return hash((type(self).__name__, tuple(self)))


for _cls in (Forward, DeliverTo, Reply, Drop):
    _cls.__eq__ = _typed_eq  # type: ignore[method-assign,assignment]
    _cls.__ne__ = _typed_ne  # type: ignore[method-assign,assignment]
    _cls.__hash__ = _typed_hash  # type: ignore[method-assign,assignment]

SendAction: TypeAlias = Forward | DeliverTo | Reply
Action: TypeAlias = Forward | DeliverTo | Reply | Drop
