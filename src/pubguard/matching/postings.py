"""Per-attribute, per-operator constraint indexes (the "forwarding table" rows of one attribute).

Theory of operation
-------------------
Every constraint of every filter is stored once, in the index of its attribute, its value's type
class (``num`` = int and float, ``str``, ``bool``: Siena semantics, eventguard.txt §2.1) and its
operator, as a pair ``(value, slot)`` where ``slot`` is the filter's integer id in the matcher.
For an event attribute ``x`` each index yields the slots of the constraints ``x`` satisfies:

* the six comparison operators keep their constraints sorted by value, so the satisfied ones
  are one or two contiguous runs found by binary search: with ``l = bisect_left(x)`` and
  ``r = bisect_right(x)`` (``c`` the constraint value)::

      attr <  c   holds for c > x   -> [r, n)        attr =  c  -> [l, r)
      attr <= c   holds for c >= x  -> [l, n)        attr != c  -> [0, l) + [r, n)
      attr >  c   holds for c < x   -> [0, l)
      attr >= c   holds for c <= x  -> [0, r)

* ``prefix``/``suffix`` are hash tables keyed by the pattern: only the prefixes (suffixes) of
  ``x`` whose lengths occur in the table are looked up; ``substring`` either tests every
  pattern (few patterns) or looks up every distinct substring of ``x`` of an occurring length
  (short ``x``), whichever is cheaper;
* ``exists`` is a plain list per attribute (any type class).

Sorted runs are kept twice: Python lists of the exact values and their slots (``bisect``: exact
comparisons between int and float, used by single-event matching, which counts few hits in a
dict) and numpy arrays (float64 when every value is exactly representable, else an object array
with Python comparisons) used for many hits and by the vectorised batch matcher with
``np.searchsorted``. Single-event matching first collects *spans* ``(run, lo, hi)``, so the
matcher knows how many hits there are before choosing how to count them. Additions go to a pending buffer; an index is
re-sorted lazily, only when it is dirty and about to be read. Removal is the matcher's business
(tombstoned slots can never reach their count); dead entries are dropped on compaction.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from pubguard.model.constraints import Constraint, Op
from pubguard.model.values import type_class

__all__ = ["AttrIndex", "Cluster", "SortedRun", "exact_float"]

EXACT_INT: Final = 2**53  # ints beyond this are not exactly representable as float64
ORDER_OPS: Final = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
_EMPTY: Final = np.empty(0, dtype=np.int32)
_CLASS: Final[dict[type, str]] = {int: "num", float: "num", str: "str", bool: "bool"}


def exact_float(v: Any) -> bool:
    """Is the (num or bool) value ``v`` exactly representable as a float64?"""
    return type(v) is not int or -EXACT_INT <= v <= EXACT_INT


class SortedRun:
    """Constraints of one (attribute, type class, operator), sorted by value."""

    __slots__ = ("arr", "exact", "pend_s", "pend_v", "slot_list", "slots", "vals")

    def __init__(self, numeric: bool) -> None:
        self.vals: list[Any] = []
        self.slots: np.ndarray = _EMPTY
        self.slot_list: list[int] = []  # the same slots as Python ints (small-set counting)
        self.arr: np.ndarray = np.empty(0, dtype=np.float64 if numeric else object)
        self.exact = numeric  # float64 representation is exact (strings: never)
        self.pend_v: list[Any] = []
        self.pend_s: list[int] = []

    def add(self, value: Any, slot: int) -> bool:
        """Buffer one constraint; returns True when the run just became dirty."""
        if self.exact and not exact_float(value):
            self.exact = False
        self.pend_v.append(value)
        self.pend_s.append(slot)
        return len(self.pend_v) == 1

    def flush(self) -> None:
        """Merge the pending buffer into the sorted arrays."""
        if not self.pend_v:
            return
        vals = self.vals + self.pend_v
        slots = np.concatenate([self.slots, np.asarray(self.pend_s, dtype=np.int32)])
        self.pend_v, self.pend_s = [], []
        if self.exact:
            fv = np.asarray(vals, dtype=np.float64)
            order = np.argsort(fv, kind="stable")
            self.arr = fv[order]
            self.vals = [vals[i] for i in order.tolist()]
        else:
            idx = sorted(range(len(vals)), key=vals.__getitem__)
            self.vals = [vals[i] for i in idx]
            order = np.asarray(idx, dtype=np.intp)
            self.arr = np.empty(len(vals), dtype=object)
            self.arr[:] = self.vals
        self.slots = np.ascontiguousarray(slots[order])
        self.slot_list = self.slots.tolist()

    def span(self, op: Op, x: Any, out: list[tuple[SortedRun, int, int]]) -> int:
        """Append the runs ``(self, lo, hi)`` of slots satisfied by event value ``x`` (flushed
        run) to ``out``; returns how many slots they hold. Same runs as :meth:`hits`."""
        vals = self.vals
        n = len(vals)
        if op is Op.EQ:
            lo = bisect_left(vals, x)
            hi = bisect_right(vals, x, lo)
        elif op is Op.LT:
            lo, hi = bisect_right(vals, x), n
        elif op is Op.LE:
            lo, hi = bisect_left(vals, x), n
        elif op is Op.GT:
            lo, hi = 0, bisect_left(vals, x)
        elif op is Op.GE:
            lo, hi = 0, bisect_right(vals, x)
        else:  # NE
            lo = bisect_left(vals, x)
            hi = bisect_right(vals, x, lo)
            total = 0
            if lo:
                out.append((self, 0, lo))
                total = lo
            if hi < n:
                out.append((self, hi, n))
                total += n - hi
            return total
        if hi > lo:
            out.append((self, lo, hi))
            return hi - lo
        return 0

    def hits(self, op: Op, x: Any, out: list[np.ndarray]) -> None:
        """Append the slot runs satisfied by event value ``x`` to ``out`` (flushed run)."""
        vals, slots = self.vals, self.slots
        if op is Op.LT:
            out.append(slots[bisect_right(vals, x) :])
        elif op is Op.LE:
            out.append(slots[bisect_left(vals, x) :])
        elif op is Op.GT:
            out.append(slots[: bisect_left(vals, x)])
        elif op is Op.GE:
            out.append(slots[: bisect_right(vals, x)])
        elif op is Op.EQ:
            out.append(slots[bisect_left(vals, x) : bisect_right(vals, x)])
        else:  # NE
            out.append(slots[: bisect_left(vals, x)])
            out.append(slots[bisect_right(vals, x) :])

    def bounds(self, op: Op, xs: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Vectorised :meth:`hits`: for query values ``xs`` the ``(start, stop)`` runs."""
        arr = self.arr
        if arr.dtype != xs.dtype:  # a huge int query against a float64 run
            arr = arr.astype(object)
        n = np.full(len(xs), len(arr), dtype=np.intp)
        zero = np.zeros(len(xs), dtype=np.intp)
        if op is Op.LT:
            return [(np.searchsorted(arr, xs, "right"), n)]
        if op is Op.LE:
            return [(np.searchsorted(arr, xs, "left"), n)]
        if op is Op.GT:
            return [(zero, np.searchsorted(arr, xs, "left"))]
        if op is Op.GE:
            return [(zero, np.searchsorted(arr, xs, "right"))]
        lo, hi = np.searchsorted(arr, xs, "left"), np.searchsorted(arr, xs, "right")
        if op is Op.EQ:
            return [(lo, hi)]
        return [(zero, lo), (hi, n)]


class _Patterns:
    """Hash table ``pattern -> slots`` for prefix / suffix / substring constraints."""

    __slots__ = ("lengths", "table")

    def __init__(self) -> None:
        self.table: dict[str, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def add(self, pattern: str, slot: int) -> None:
        self.table.setdefault(pattern, []).append(slot)
        self.lengths[len(pattern)] = self.lengths.get(len(pattern), 0) + 1


class AttrIndex:
    """All constraints on one attribute name (within one cluster)."""

    __slots__ = ("by_class", "exists", "prefix", "runs", "substring", "suffix")

    def __init__(self) -> None:
        # (type class, op) -> SortedRun
        self.runs: dict[tuple[str, Op], SortedRun] = {}
        self.by_class: dict[str, list[tuple[Op, SortedRun]]] = {}  # the same, per type class
        self.exists: list[int] = []
        self.prefix: _Patterns | None = None  # string tables are created on first use
        self.suffix: _Patterns | None = None
        self.substring: _Patterns | None = None

    def add(self, cls: str | None, op: Op, value: Any, slot: int) -> SortedRun | None:
        """Index one constraint; returns the run that became dirty, if any."""
        if op is Op.EXISTS:
            self.exists.append(slot)
        elif op is Op.PREFIX:
            self.prefix = self.prefix or _Patterns()
            self.prefix.add(value, slot)
        elif op is Op.SUFFIX:
            self.suffix = self.suffix or _Patterns()
            self.suffix.add(value, slot)
        elif op is Op.SUBSTRING:
            self.substring = self.substring or _Patterns()
            self.substring.add(value, slot)
        else:
            assert cls is not None
            run = self.runs.get((cls, op))
            if run is None:
                run = self.runs[(cls, op)] = SortedRun(numeric=cls != "str")
                self.by_class.setdefault(cls, []).append((op, run))
            if run.add(value, slot):
                return run
        return None

    def collect(self, x: Any, parts: list[np.ndarray], extra: list[int]) -> None:
        """Slots of the constraints event value ``x`` satisfies (runs flushed)."""
        if self.exists:
            extra.extend(self.exists)
        cls = type_class(x)
        if cls == "str":
            self.string_hits(x, extra)
        for (rcls, op), run in self.runs.items():
            if rcls == cls:
                run.hits(op, x, parts)

    def spans(self, x: Any, out: list[tuple[SortedRun, int, int]], extra: list[int]) -> int:
        """:meth:`collect` as spans of the runs (see :meth:`SortedRun.span`) plus the slots of
        ``exists`` and string patterns in ``extra``; returns the number of span slots."""
        if self.exists:
            extra.extend(self.exists)
        cls = _CLASS.get(type(x)) or type_class(x)
        if cls == "str" and (self.prefix or self.suffix or self.substring):
            self.string_hits(x, extra)
        runs = self.by_class.get(cls)  # type: ignore[arg-type]
        if runs is None:
            return 0
        n = 0
        for op, run in runs:
            n += run.span(op, x, out)
        return n

    def string_hits(self, x: str, out: list[int]) -> None:
        """Slots of the prefix / suffix / substring constraints that ``x`` satisfies."""
        n = len(x)
        if self.prefix is not None:
            table = self.prefix.table
            for length in self.prefix.lengths:
                if length <= n:
                    out.extend(table.get(x[:length], ()))
        if self.suffix is not None:
            table = self.suffix.table
            for length in self.suffix.lengths:
                if length <= n:
                    out.extend(table.get(x[n - length :], ()))
        if self.substring is not None:
            table = self.substring.table
            lengths = [k for k in self.substring.lengths if k <= n]
            if len(table) <= sum(n - k + 1 for k in lengths):
                for pattern, slots in table.items():
                    if pattern in x:
                        out.extend(slots)
            else:
                seen = {x[i : i + k] for k in lengths for i in range(n - k + 1)}
                for s in seen:
                    out.extend(table.get(s, ()))


class Cluster:
    """The per-attribute indexes of a set of filters (all of them, or one access cluster)."""

    __slots__ = ("attrs",)

    def __init__(self) -> None:
        self.attrs: dict[str, AttrIndex] = {}

    def add(self, slot: int, constraints: tuple[Constraint, ...], dirty: list[SortedRun]) -> None:
        attrs = self.attrs
        for c in constraints:
            ai = attrs.get(c.name)
            if ai is None:
                ai = attrs[c.name] = AttrIndex()
            run = ai.add(type_class(c.value), c.op, c.value, slot)
            if run is not None:
                dirty.append(run)

    def collect(self, event: Mapping[str, Any], parts: list[np.ndarray], extra: list[int]) -> None:
        for name, ai in self.attrs.items():
            if name in event:
                ai.collect(event[name], parts, extra)

    def spans(
        self, event: Mapping[str, Any], out: list[tuple[SortedRun, int, int]], extra: list[int]
    ) -> int:
        """Spans and extra slots of every constraint ``event`` satisfies (runs flushed);
        walks whichever is shorter, the event's attributes or the indexed names."""
        attrs = self.attrs
        n = 0
        if len(event) <= len(attrs):
            get = attrs.get
            for name, x in event.items():
                ai = get(name)
                if ai is not None:
                    n += ai.spans(x, out, extra)
        else:
            for name, ai in attrs.items():
                if name in event:
                    n += ai.spans(event[name], out, extra)
        return n
