"""A bounded window of recently seen event ids (EventGuard's routing guard, eventguard.txt §4.7).

"We require a node to maintain the identifiers seen in the last max_delay time units." The
window forgets ids older than ``window`` seconds and, to bound memory under a flood of fresh
ids, the oldest ids beyond ``capacity``. It serves both the routing guard and the
at-least-once hop retries of the transport (a retried publication is dropped as a duplicate).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

__all__ = ["DEDUP_MAX_IDS", "DEDUP_WINDOW_S", "DedupWindow"]

DEDUP_WINDOW_S: Final = 120.0  # seconds an event id is remembered (>= any max_delay we use)
DEDUP_MAX_IDS: Final = 262_144  # ids remembered at most (about 40 MB worst case)


class DedupWindow:
    """``seen(id, now)`` / ``record(id, now)``; time is passed in (STYLE.md convention 2)."""

    def __init__(self, window: float = DEDUP_WINDOW_S, capacity: int = DEDUP_MAX_IDS) -> None:
        if window <= 0 or capacity <= 0:
            raise ValueError("dedup window and capacity must be positive")
        self.window = window
        self.capacity = capacity
        self._ids: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def seen(self, key: str, now: float) -> bool:
        self._expire(now)
        return key in self._ids

    def record(self, key: str, now: float) -> None:
        self._ids[key] = now
        self._ids.move_to_end(key)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def _expire(self, now: float) -> None:
        horizon = now - self.window
        ids = self._ids
        while ids:
            first = next(iter(ids.values()))
            if first >= horizon:
                break
            ids.popitem(last=False)
