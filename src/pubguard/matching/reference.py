"""The reference matcher: obviously correct, used as the oracle in tests.

It checks every filter against every event with :meth:`Filter.matches`; nothing clever.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from pubguard.model.filters import Filter

__all__ = ["ReferenceMatcher"]


class ReferenceMatcher:
    """Linear scan over ``{key: Filter}``; ``match(event)`` returns the matching keys."""

    def __init__(
        self, filters: Mapping[Hashable, Filter] | Iterable[tuple[Hashable, Filter]] = ()
    ) -> None:
        items = filters.items() if isinstance(filters, Mapping) else filters
        self._filters: dict[Hashable, Filter] = dict(items)

    def add(self, key: Hashable, f: Filter) -> None:
        self._filters[key] = f

    def remove(self, key: Hashable) -> None:
        self._filters.pop(key, None)

    def __len__(self) -> int:
        return len(self._filters)

    def match(self, event: Mapping[str, Any]) -> set[Hashable]:
        attrs = getattr(event, "attrs", event)
        return {k for k, f in self._filters.items() if f.matches(attrs)}
