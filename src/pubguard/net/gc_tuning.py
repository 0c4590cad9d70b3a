"""Garbage-collector settings for a broker process (``pubguard broker``, the local cluster's
broker processes).

Theory of operation
-------------------
A broker allocates a few container objects per message (the decoded frame's maps, the
``Publish`` record, its decoded routing part) and frees nearly all of them at once by reference
counting. CPython's default collector thresholds, ``(700, 10, 10)``, still run a young
collection every 700 net container allocations, and as the broker's long-lived state grows
(the de-dup window, the replay state, the subscription index, parked outboxes) they run full
collections that walk all of it. In a broker process under ``bench network`` load (30,000
publications/s, one broker) the defaults spent 0.1 s (plain) to 0.35 s (psguard) of a four-second run in the
collector, up to 32 ms per full collection: about 1 us per publication for plain, 3 us for psguard, 4 us for
default, so the collector alone was a tenth of psguard's broker CPU and most of the gap to
plain's.

:func:`tune_for_server` is what long-running CPython servers do: once start-up is done, move
the start-up heap (modules, configuration, restored state) out of the collector's reach
(:func:`gc.freeze`) and raise the young threshold to ``GEN0`` (``GEN1``/``GEN2`` above it), so
the collector runs when garbage that only it can free (reference cycles) has built up, not
every few hundred messages. Cycles are still collected: at most ``GEN0`` container objects
wait for a young collection. :func:`status` reports collections and pauses in the broker's
status (``gc``), so an operator sees what the collector costs. The frozen count is the one
taken at the freeze: ``gc.get_freeze_count()`` walks the whole permanent generation (about
3 ms in a broker), and ``bench network`` polls every broker's status ten times a second, so
counting it per status cost the broker 3 % of a core, billed to the publications it measured.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Final

__all__ = ["GEN0", "GEN1", "GEN2", "status", "tune_for_server"]

GEN0: Final = 20_000  # net container allocations between young collections (default 700)
GEN1: Final = 20  # young collections between middle ones (default 10)
GEN2: Final = 20  # middle collections between full ones (default 10)


class _Pauses:
    """Collections and their pauses per generation since :func:`tune_for_server`."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        g = int(info.get("generation", 2))
        d = time.perf_counter() - self._t0
        self.count[g] += 1
        self.total[g] += d
        if d > self.longest[g]:
            self.longest[g] = d


_pauses: _Pauses | None = None
_frozen: int | None = None  # objects in the permanent generation after the last freeze


def tune_for_server() -> None:
    """Freeze the start-up heap and raise the thresholds (see the module docstring); call it
    once, in a process of its own, when start-up is done. Idempotent."""
    global _pauses, _frozen
    gc.collect()
    gc.freeze()
    _frozen = gc.get_freeze_count()  # counted once: the walk is O(frozen objects)
    gc.set_threshold(GEN0, GEN1, GEN2)
    if _pauses is None:
        _pauses = _Pauses()
        gc.callbacks.append(_pauses)


def status() -> dict[str, Any]:
    """The collector as a broker's status reports it: thresholds, objects frozen at start-up
    and, once tuned, collections and pauses (milliseconds) per generation since then."""
    st: dict[str, Any] = {
        "tuned": _pauses is not None,
        "thresholds": list(gc.get_threshold()),
        "frozen": gc.get_freeze_count() if _frozen is None else _frozen,
    }
    if _pauses is not None:
        st["collections"] = list(_pauses.count)
        st["pause_ms_total"] = [round(t * 1e3, 3) for t in _pauses.total]
        st["pause_ms_max"] = [round(t * 1e3, 3) for t in _pauses.longest]
    return st
