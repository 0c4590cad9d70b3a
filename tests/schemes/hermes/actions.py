"""What the Hermes run tests compare: a broker's actions as packed frames and drops."""

from __future__ import annotations

from typing import Any

from pubguard.broker.actions import Action, DeliverTo, Drop, Forward, Reply
from pubguard.wire.framing import pack


def shape(actions: list[Action]) -> list[Any]:
    """Each action as ``(kind, link, packed message)``, or a drop as its tuple."""
    out: list[Any] = []
    for a in actions:
        if isinstance(a, Forward | DeliverTo | Reply):
            out.append((type(a).__name__, a.link, pack(a.message.to_wire())))
        else:
            assert isinstance(a, Drop)
            out.append(tuple(a))
    return out
