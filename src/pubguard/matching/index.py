"""Indexed matcher: the counting algorithm over per-attribute, per-operator indexes.

Theory of operation
-------------------
This is the plaintext engine a v-CAPS publisher runs over its PFPoset (vcaps.txt §4.2 uses the
Siena Fast Forwarding algorithm; Carzaniga & Wolf, SIGCOMM 2003) and that brokers run in the
plain profile. Filters are conjunctions, so a filter matches an event exactly when *every* one
of its constraints is satisfied (Siena semantics, eventguard.txt §2.1). Each filter gets an
integer *slot*; keys (any hashable) map to slots. Two engines share the slots:

* **numeric filters** (only ``= != < <= > >=`` on numbers exact in float64, the vcaps shape)
  live in access clusters (:mod:`pubguard.matching.clusters`): an event touches only the
  clusters of its attribute names and pairs of names, whose constraint tables are evaluated
  with numpy in one pass, for one event or for a batch of events at once;
* **every other filter** (strings, booleans, ``exists``, huge ints) goes to the counting
  algorithm over per-attribute, per-operator indexes (:mod:`pubguard.matching.postings`):
  the satisfied constraints come out as contiguous runs of sorted arrays (hash tables for
  string patterns), are concatenated into an int32 array of *hits*, counted per slot with
  ``np.add.at`` into a persistent zeroed array, and the slots with ``count == need[slot]``
  match; the touched counters are reset. Batches expand the runs of K events at once into
  ``(event, slot)`` pairs counted in a K x slots array.

Both engines have a *small-set path* in pure Python, because numpy's per-call overhead
(``np.add.at`` above all) dominates when an event touches few constraints, as at a broker
with tens of subscriptions: the counting engine first collects the satisfied runs as index
spans, and when they hold at most ``small_hits`` slots it counts them in a dict against a
Python list of ``need``; the numeric engine evaluates the touched clusters' members row by
row when they hold at most ``small_rows`` constraints (exactly, in Python arithmetic, so no
float64 fallback is needed). The crossovers were chosen by measurement (``SMALL_HITS``,
``SMALL_ROWS``); the answers are the same either way.

Removal is physical for numeric filters (their cluster is rebuilt lazily) and a tombstone for
the others (``need = 0`` never equals a count >= 1); when removed slots outnumber live ones the
whole index is rebuilt (compaction), so the amortised cost stays constant. Additions are
buffered and merged lazily, only into the parts an event reads. Not thread-safe: matching
reuses its scratch arrays.
"""

from __future__ import annotations

import gc
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np

from pubguard.errors import ValidationError
from pubguard.matching.clusters import NumericClusters
from pubguard.matching.postings import Cluster, SortedRun, exact_float
from pubguard.model.filters import Filter
from pubguard.model.values import type_class

__all__ = ["IndexedMatcher"]

BATCH_CELLS: Final = 1 << 25  # counter cells (events x slots) per batch chunk
COMPACT_MIN_DEAD: Final = 1024  # never compact for fewer removed slots than this
SMALL_HITS: Final = 128  # satisfied constraints counted in Python up to this (measured crossover)
SMALL_ROWS: Final = 128  # numeric rows evaluated in Python up to this (measured crossover)
_DEAD: Final = object()  # the key of a removed slot
_ONE8: Final = np.uint8(1)
_ONE32: Final = np.int32(1)


class IndexedMatcher:
    """Indexed matcher over a set of ``{key: Filter}``. Same answers as ``ReferenceMatcher``."""

    def __init__(
        self,
        filters: Mapping[Hashable, Filter] | Iterable[tuple[Hashable, Filter]] = (),
        *,
        compact_min_dead: int = COMPACT_MIN_DEAD,
        small_hits: int = SMALL_HITS,
        small_rows: int = SMALL_ROWS,
    ) -> None:
        self._compact_min_dead = compact_min_dead
        self._small_hits = small_hits
        self._small_rows = small_rows
        self._reset()
        self.add_many(filters.items() if isinstance(filters, Mapping) else filters)

    def _reset(self) -> None:
        self._filters: dict[Hashable, Filter] = {}
        self._slot_of: dict[Hashable, int] = {}
        self._keys: list[Any] = []  # slot -> key (or _DEAD)
        self._key_arr = np.empty(1024, dtype=object)  # the same, for gathers by slot arrays
        self._need = np.zeros(1024, dtype=np.uint8)
        self._need_l: list[int] = []  # slot -> need, as Python ints (small-set path)
        self._counts = np.zeros(1024, dtype=np.uint8)
        self._batch_counts = np.zeros(0, dtype=np.uint8)
        self._numeric = NumericClusters()
        self._general = Cluster()
        self._n_general = 0
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
        self._keys.append(key)
        if slot >= len(self._key_arr):
            grown = np.empty(2 * len(self._key_arr), dtype=object)
            grown[:slot] = self._key_arr[:slot]
            self._key_arr = grown
        self._key_arr[slot] = key
        self._slot_of[key] = slot
        self._filters[key] = f
        if self._numeric.add(slot, f):
            self._need_l.append(0)
            return
        if slot >= len(self._need):
            self._grow(max(2 * len(self._need), slot + 1))
        cs = f.constraints
        if len(cs) > 255 and self._need.dtype == np.uint8:
            self._need = self._need.astype(np.int32)
            self._counts = self._counts.astype(np.int32)
            self._batch_counts = self._batch_counts.astype(np.int32)
        self._need[slot] = len(cs)
        self._need_l.append(len(cs))
        self._general.add(slot, cs, self._dirty)
        self._n_general += 1

    def add_many(self, items: Iterable[tuple[Hashable, Filter]]) -> None:
        """``add`` each ``(key, filter)``; faster for bulk loads (no GC passes meanwhile)."""
        was_enabled = gc.isenabled()
        gc.disable()  # millions of acyclic objects: generational passes would only cost time
        try:
            for key, f in items:
                self.add(key, f)
        finally:
            if was_enabled:
                gc.enable()

    def remove(self, key: Hashable) -> None:
        """Forget ``key``; unknown keys are ignored (as ``ReferenceMatcher`` does)."""
        slot = self._slot_of.pop(key, None)
        if slot is None:
            return
        f = self._filters.pop(key)
        self._keys[slot] = _DEAD
        self._key_arr[slot] = _DEAD
        if not self._numeric.remove(slot, f):
            self._need[slot] = 0  # tombstone: a count of >= 1 never equals 0
            self._need_l[slot] = 0
            self._n_general -= 1
        self._dead += 1
        if self._dead > self._compact_min_dead and self._dead > len(self._filters):
            self.compact()

    def compact(self) -> None:
        """Rebuild the indexes from the live filters, renumbering slots densely."""
        live = list(self._filters.items())
        self._reset()
        self.add_many(live)

    def flush(self) -> None:
        """Merge buffered additions now (matching does it lazily); e.g. to time a build."""
        self._numeric.flush()
        if self._dirty:
            for run in self._dirty:
                run.flush()
            self._dirty = []

    def _grow(self, cap: int) -> None:
        for name in ("_need", "_counts"):
            old = getattr(self, name)
            new = np.zeros(cap, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

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
        self.flush()
        attrs = getattr(event, "attrs", event)
        keys = self._keys
        out: set[Hashable]
        if not self._numeric.empty:
            slots = self._numeric.match(attrs, self._small_rows)
            if slots is None:  # a value float64 cannot hold exactly: check candidates exactly
                out = {
                    keys[s]
                    for s in self._numeric.candidates(attrs)
                    if self._filters[keys[s]].matches(attrs)
                }
            elif type(slots) is list:
                out = {keys[s] for s in slots}
            else:
                out = set(self._key_arr[slots].tolist())
        else:
            out = set()
        if self._n_general:
            out.update(keys[s] for s in self._general_match(attrs))
        return out

    def _general_match(self, attrs: Mapping[str, Any]) -> list[int]:
        spans: list[tuple[SortedRun, int, int]] = []
        extra: list[int] = []
        total = self._general.spans(attrs, spans, extra) + len(extra)
        if not total:
            return []
        if total <= self._small_hits:  # few hits: count in a dict (numpy calls cost more)
            need = self._need_l
            counts: dict[int, int] = {}
            get = counts.get
            for run, lo, hi in spans:
                for s in run.slot_list[lo:hi]:
                    counts[s] = get(s, 0) + 1
            for s in extra:
                counts[s] = get(s, 0) + 1
            return [s for s, c in counts.items() if c == need[s]]
        parts = [run.slots[lo:hi] for run, lo, hi in spans]
        if extra:
            parts.append(np.asarray(extra, dtype=np.int32))
        hits = np.concatenate(parts)
        counts_a, need_a = self._counts, self._need
        np.add.at(counts_a, hits, _ONE8 if counts_a.dtype == np.uint8 else _ONE32)
        matched = hits[counts_a[hits] == need_a[hits]]
        counts_a[hits] = 0
        return matched.tolist()  # a slot appears once per constraint: callers build sets

    # -- batch ----------------------------------------------------------------------------
    def match_batch(self, events: Sequence[Mapping[str, Any]]) -> list[set[Hashable]]:
        """``[self.match(e) for e in events]``, vectorised across events."""
        events = list(events)
        results: list[set[Hashable]] = [set() for _ in events]
        if not events or not self._filters:
            return results
        self.flush()
        keys = self._keys
        evs, slots, inexact = self._numeric.match_batch(events)
        if len(evs):  # evs is sorted: one slice of matched keys per event
            found = self._key_arr[slots].tolist()
            cuts = np.searchsorted(evs, np.arange(len(events) + 1)).tolist()
            for i in range(len(events)):
                if cuts[i] < cuts[i + 1]:
                    results[i] = set(found[cuts[i] : cuts[i + 1]])
        for i in inexact:
            attrs = getattr(events[i], "attrs", events[i])
            results[i].update(
                keys[s]
                for s in self._numeric.candidates(attrs)
                if self._filters[keys[s]].matches(attrs)
            )
        if self._n_general:
            cap = len(self._keys)
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
        index = self._general.attrs
        for i, event in enumerate(chunk):
            for name, x in getattr(event, "attrs", event).items():
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
