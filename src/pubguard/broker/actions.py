"""What :meth:`Broker.handle` asks its driver (transport or simulator) to do.

Three actions send a message on a link (``Forward`` to a broker, ``DeliverTo`` a local client,
``Reply`` with an ack or error to a local client); all three have ``.link`` and ``.message``
so a driver can treat them alike. ``Drop`` reports a refused message with its machine-readable
reason (ARCHITECTURE.md, "Broker core"); the core has already counted it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from pubguard.broker.messages import Ack, Deliver, Error, Message
from pubguard.errors import DropReason

__all__ = ["Action", "DeliverTo", "Drop", "Forward", "Reply", "SendAction"]


@dataclass(frozen=True, slots=True)
class Forward:
    """Send ``message`` to the broker at the other end of ``link``."""

    link: str
    message: Message


@dataclass(frozen=True, slots=True)
class DeliverTo:
    """Hand a matching publication to the local client on ``link``."""

    link: str
    message: Deliver


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer a directly connected client: Ack on acceptance, Error on a drop."""

    link: str
    message: Ack | Error


@dataclass(frozen=True, slots=True)
class Drop:
    """A message was refused; ``message_id`` is its id when it could be read."""

    reason: DropReason
    detail: str
    message_id: str | None
    link: str
    op: str | None = None


SendAction: TypeAlias = Forward | DeliverTo | Reply
Action: TypeAlias = Forward | DeliverTo | Reply | Drop
