"""The broker's persistence hook: a tiny table store the core writes through to.

Theory of operation
-------------------
The core keeps its routing state in memory and, when given a :class:`BrokerState`, writes every
change through as it happens, so a broker restarted from the same store rebuilds exactly the
routing state it had. The store is a set of named tables of
``key -> JSON-like value`` kept in insertion order; the SQLite helper in ``pubguard.store``
backs it on disk (the transport should wrap each ``handle`` call in one transaction).

Tables the core uses (values are plain dicts, msgpack / JSON friendly)::

    links          link_id            -> {"kind": "parent"|"child"|"client", "peer": str|None}
    subscriptions  "<link>\\x00<sub>" -> {"link": .., "message": Subscribe.to_wire()}
    forwarded      "<link>\\x00<sub>" -> {"profile": ..}        members of F (ForwardSet)
    advertisements "<link>\\x00<adv>" -> {"link": .., "message": Advertise.to_wire()}

The de-duplication window is deliberately not persisted (see ``core.DEDUP_WINDOW_S``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["TABLES", "BrokerState", "MemoryState"]

TABLES = ("links", "subscriptions", "forwarded", "advertisements")


@runtime_checkable
class BrokerState(Protocol):
    """Named tables of ``key -> value``; ``items`` yields in insertion order.

    ``put`` on an existing key replaces the value and keeps the key's original position.
    """

    def put(self, table: str, key: str, value: Mapping[str, Any]) -> None: ...

    def delete(self, table: str, key: str) -> None: ...

    def items(self, table: str) -> Iterable[tuple[str, Mapping[str, Any]]]: ...


class MemoryState:
    """The in-memory default (also what tests restore from)."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, Mapping[str, Any]]] = {t: {} for t in TABLES}

    def put(self, table: str, key: str, value: Mapping[str, Any]) -> None:
        self._tables.setdefault(table, {})[key] = dict(value)

    def delete(self, table: str, key: str) -> None:
        self._tables.get(table, {}).pop(key, None)

    def items(self, table: str) -> list[tuple[str, Mapping[str, Any]]]:
        return list(self._tables.get(table, {}).items())
