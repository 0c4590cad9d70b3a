"""Indexed matcher: the counting algorithm over per-attribute, per-operator indexes.

Theory of operation
-------------------
This is the plaintext engine a v-CAPS publisher runs over its PFPoset (vcaps.txt §4.2 uses the
Siena Fast Forwarding algorithm; Carzaniga & Wolf, SIGCOMM 2003) and that brokers run in the
plain profile. Filters are conjunctions, so a filter matches an event exactly when *every* one
of its constraints is satisfied (Siena semantics, eventguard.txt §2.1):

1. each filter gets an integer *slot*; ``need[slot]`` is its number of constraints;
2. every constraint sits in the index of its attribute / type class / operator
   (:mod:`pubguard.matching.postings`), which returns the slots of the satisfied constraints
   for an event value as contiguous runs of sorted arrays (hash tables for string patterns);
3. the runs are concatenated into one int32 array of *hits*; ``np.add.at`` counts them per slot
   into a persistent zeroed array; the slots with ``count == need`` match; the touched counters
   are reset to zero. Each constraint is hit at most once per event, so the work is linear in
   the number of satisfied constraints, never in the number of filters.

Batch matching (:meth:`IndexedMatcher.match_batch`) does the same for K events at once: the
event values of one attribute are searched together with ``np.searchsorted``, the runs are
expanded into ``(event, slot)`` pairs, and the counter is a K x slots array addressed by
``event * slots + slot``.

Removal tombstones the slot (``need = 0`` can never equal a count of at least one), so it costs
O(constraints); when dead slots outnumber live ones the whole index is rebuilt (compaction),
which keeps the amortised cost constant. Additions are buffered per run and merged lazily.
Not thread-safe: matching reuses one counter array.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from pubguard.errors import ValidationError
from pubguard.matching.postings import AttrIndex, SortedRun, exact_float
from pubguard.model.filters import Filter
from pubguard.model.values import type_class

__all__ = ["IndexedMatcher"]

BATCH_CELLS: Final = 1 << 25  # counter cells (events x slots) per batch chunk
COMPACT_MIN_DEAD: Final = 1024  # never compact for fewer dead slots than this
_DEAD: Final = object()  # the key of a removed slot
_ONE8: Final = np.uint8(1)
_ONE32: Final = np.int32(1)


class IndexedMatcher:
    """Counting matcher over per-attribute indexes. Same answers as ``ReferenceMatcher``."""

    def __init__(
        self,
        filters: Mapping[Hashable, Filter] | Iterable[tuple[Hashable, Filter]] = (),
        *,
        compact_min_dead: int = COMPACT_MIN_DEAD,
    ) -> None:
        self._compact_min_dead = compact_min_dead
        self._reset()
        items = filters.items() if isinstance(filters, Mapping) else filters
        for key, f in items:
            self.add(key, f)

    def _reset(self) -> None:
        self._filters: dict[Hashable, Filter] = {}
        self._slot_of: dict[Hashable, int] = {}
        self._keys: list[Any] = []  # slot -> key (or _DEAD)
        self._need = np.zeros(1024, dtype=np.uint8)
        self._counts = np.zeros(1024, dtype=np.uint8)
        self._batch_counts = np.zeros(0, dtype=np.uint8)
        self._attrs: dict[str, AttrIndex] = {}
        self._dirty: list[SortedRun] = []
        self._dead = 0

    # -- maintenance ----------------------------------------------------------------------
    def add(self, key: Hashable, f: Filter) -> None:
        """Index filter ``f`` under ``key`` (replacing what ``key`` held)."""
        if not isinstance(f, Filter):
            raise ValidationError(f"IndexedMatcher.add needs a Filter, not {type(f).__name__}")
        if key in self._slot_of:
            self.remove(key)
        slot = len(self._keys)
        if slot >= len(self._need):
            self._grow(2 * len(self._need))
        n = len(f.constraints)
        if n > 255 and self._need.dtype == np.uint8:
            self._need = self._need.astype(np.int32)
            self._counts = self._counts.astype(np.int32)
            self._batch_counts = self._batch_counts.astype(np.int32)
        self._need[slot] = n
        self._keys.append(key)
        self._slot_of[key] = slot
        self._filters[key] = f
        attrs, dirty = self._attrs, self._dirty
        for c in f.constraints:
            ai = attrs.get(c.name)
            if ai is None:
                ai = attrs[c.name] = AttrIndex()
            run = ai.add(type_class(c.value), c.op, c.value, slot)
            if run is not None:
                dirty.append(run)

    def remove(self, key: Hashable) -> None:
        """Forget ``key``; unknown keys are ignored (as ``ReferenceMatcher`` does)."""
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return
        del self._filters[key]
        self._need[slot] = 0  # tombstone: a count of >= 1 never equals 0
        self._keys[slot] = _DEAD
        self._dead += 1
        if self._dead > self._compact_min_dead and self._dead > len(self._filters):
            self.compact()

    def compact(self) -> None:
        """Rebuild the index from the live filters, dropping tombstones."""
        live = list(self._filters.items())
        self._reset()
        for key, f in live:
            self.add(key, f)

    def _grow(self, cap: int) -> None:
        for name in ("_need", "_counts"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def _flush(self) -> None:
        if self._dirty:
            for run in self._dirty:
                run.flush()
            self._dirty = []

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    def filters(self) -> dict[Hashable, Filter]:
        """A copy of ``{key: filter}``."""
        return dict(self._filters)

    # -- single event ---------------------------------------------------------------------
    def match(self, event: Mapping[str, Any]) -> set[Hashable]:
        """Keys of the filters ``event`` matches."""
        self._flush()
        attrs = getattr(event, "attrs", event)
        parts: list[np.ndarray] = []
        extra: list[int] = []
        index = self._attrs
        for name, x in attrs.items():
            ai = index.get(name)
            if ai is None:
                continue
            if ai.exists:
                extra.extend(ai.exists)
            cls = type_class(x)
            if cls == "str":
                ai.string_hits(x, extra)
            for (rcls, op), run in ai.runs.items():
                if rcls == cls:
                    run.hits(op, x, parts)
        if extra:
            parts.append(np.asarray(extra, dtype=np.int32))
        if not parts:
            return set()
        hits = np.concatenate(parts)
        if not len(hits):
            return set()
        counts, need = self._counts, self._need
        np.add.at(counts, hits, _ONE8 if counts.dtype == np.uint8 else _ONE32)
        matched = hits[counts[hits] == need[hits]]
        counts[hits] = 0
        keys = self._keys
        return {keys[s] for s in matched.tolist()}

    # -- batch ----------------------------------------------------------------------------
    def match_batch(self, events: Sequence[Mapping[str, Any]]) -> list[set[Hashable]]:
        """``[self.match(e) for e in events]``, vectorised across events."""
        events = list(events)
        results: list[set[Hashable]] = [set() for _ in events]
        self._flush()
        cap = len(self._keys)
        if not events or not self._filters:
            return results
        k = max(1, min(len(events), BATCH_CELLS // cap))
        if len(self._batch_counts) < k * cap:
            self._batch_counts = np.zeros(k * cap, dtype=self._counts.dtype)
        for start in range(0, len(events), k):
            self._match_chunk(events[start : start + k], results, start, cap)
        return results

    def _match_chunk(
        self, chunk: list[Mapping[str, Any]], results: list[set[Hashable]], base: int, cap: int
    ) -> None:
        # group the event values by (attribute, type class)
        groups: dict[tuple[str, str | None], tuple[list[int], list[Any]]] = {}
        index = self._attrs
        for i, ev in enumerate(chunk):
            for name, x in getattr(ev, "attrs", ev).items():
                if name in index:
                    g = groups.get((name, type_class(x)))
                    if g is None:
                        g = groups[(name, type_class(x))] = ([], [])
                    g[0].append(i)
                    g[1].append(x)
        ev_parts: list[np.ndarray] = []
        slot_parts: list[np.ndarray] = []
        py_ev: list[int] = []
        py_slots: list[int] = []
        for (name, cls), (ev_list, xs_list) in groups.items():
            ai = index[name]
            evs = np.asarray(ev_list, dtype=np.intp)
            if ai.exists:
                ex = np.asarray(ai.exists, dtype=np.int32)
                ev_parts.append(np.repeat(evs, len(ex)))
                slot_parts.append(np.tile(ex, len(evs)))
            if cls == "str":
                for i, x in zip(ev_list, xs_list, strict=True):
                    before = len(py_slots)
                    ai.string_hits(x, py_slots)
                    py_ev.extend([i] * (len(py_slots) - before))
            xs_f: np.ndarray | None = None
            xs_o: np.ndarray | None = None
            all_exact = cls != "str" and all(exact_float(x) for x in xs_list)
            for (rcls, op), run in ai.runs.items():
                if rcls != cls or not len(run.slots):
                    continue
                if run.arr.dtype == np.float64 and all_exact:
                    if xs_f is None:
                        xs_f = np.asarray(xs_list, dtype=np.float64)
                    xs = xs_f
                else:
                    if xs_o is None:
                        xs_o = np.empty(len(xs_list), dtype=object)
                        xs_o[:] = xs_list
                    xs = xs_o
                for lo, hi in run.bounds(op, xs):
                    _expand(evs, lo, hi, run.slots, ev_parts, slot_parts)
        if py_slots:
            ev_parts.append(np.asarray(py_ev, dtype=np.intp))
            slot_parts.append(np.asarray(py_slots, dtype=np.int32))
        if not ev_parts:
            return
        ev = np.concatenate(ev_parts)
        slots = np.concatenate(slot_parts).astype(np.intp)
        if not len(ev):
            return
        flat = ev * cap + slots
        counts = self._batch_counts
        np.add.at(counts, flat, _ONE8 if counts.dtype == np.uint8 else _ONE32)
        ok = counts[flat] == self._need[slots]
        counts[flat] = 0
        keys = self._keys
        for i, s in zip(ev[ok].tolist(), slots[ok].tolist(), strict=True):
            results[base + i].add(keys[s])


def _expand(
    evs: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    run_slots: np.ndarray,
    ev_parts: list[np.ndarray],
    slot_parts: list[np.ndarray],
) -> None:
    """Expand the runs ``run_slots[lo[i]:hi[i]]`` of events ``evs[i]`` into flat pairs."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return
    ends = np.cumsum(lens)
    pos = np.arange(total, dtype=np.intp) + np.repeat(lo - (ends - lens), lens)
    ev_parts.append(np.repeat(evs, lens))
    slot_parts.append(run_slots[pos])
