"""Access clusters of numeric filters, evaluated with numpy (the matcher's fast path).

Theory of operation
-------------------
Most routing filters are conjunctions of comparisons on numbers (vcaps.txt §6.1: 1-4 integer
constraints over a 200-word dictionary). For these *numeric* filters (every constraint one of
``= != < <= > >=`` with a num-class value exactly representable as float64) we follow the
clustering of Fabret et al. (SIGMOD 2001), the successor of the counting algorithm that
Siena's forwarding tables also refine: a filter can only match an event that carries every one
of its attributes, so it is filed under its *access key*, its first one or two attribute names
(constraints are sorted by name). An event with numeric attributes ``a1 < ... < am`` touches
only the clusters ``(ai)`` and ``(ai, aj)``: m + m(m-1)/2 dictionary lookups.

Each cluster keeps its constraints as one float64 table, one row per constraint, the rows of
a filter contiguous::

    column 0: attribute id       column 2: constraint value
    column 1: op mask | FIRST    column 3: filter slot

The op mask says which outcomes of comparing the event value x with the constraint value v
satisfy it: 4 for x < v, 2 for x == v, 1 for x > v (``<=`` is 6, ``!=`` is 5; an absent
attribute is NaN and compares false, so it satisfies nothing). The tables of the touched
clusters are concatenated, every row is evaluated at once, and ``np.logical_and.reduceat`` over
the FIRST rows gives, per filter, whether all its constraints hold. A batch of K events does
the same over the (event, cluster) pairs with a K x attributes value matrix. When the touched
clusters hold few rows (``small_rows``), a single event is evaluated member by member in Python
instead: numpy's fixed cost per call exceeds the whole work there, and Python compares an int
with a float exactly, so that path needs no float64 fallback.

Clusters are rebuilt lazily (only dirty ones, only when read); removal deletes the member and
marks its cluster dirty, so no tombstones are needed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from pubguard.matching.postings import EXACT_INT, exact_float
from pubguard.model.constraints import Op
from pubguard.model.filters import Filter
from pubguard.model.values import type_class

__all__ = ["NumericClusters", "is_numeric_filter"]

_MASK: Final = {Op.LT: 4, Op.LE: 6, Op.EQ: 2, Op.NE: 5, Op.GT: 1, Op.GE: 3}
FIRST: Final = 8  # flag in the mask column: first row of a filter
_EMPTY_TABLE: Final = np.empty((0, 4), dtype=np.float64)
_NO_SLOTS: Final = np.empty(0, dtype=np.int64)
BATCH_ROWS: Final = 1 << 15  # constraint rows evaluated together by match_batch
BATCH_VALUES: Final = 1 << 16  # events x attributes value cells per batch chunk (fits L2)


def is_numeric_filter(f: Filter) -> bool:
    """Can ``f`` take the fast path (numeric comparisons with exact float64 values only)?"""
    return all(
        c.op in _MASK and type_class(c.value) == "num" and exact_float(c.value)
        for c in f.constraints
    )


class _Cluster:
    __slots__ = ("members", "table")

    def __init__(self) -> None:
        self.members: dict[int, tuple[tuple[int, int, float], ...]] = {}
        self.table: np.ndarray = _EMPTY_TABLE

    def build(self) -> None:
        flat: list[float] = []
        extend = flat.extend
        for slot, cs in self.members.items():
            first = FIRST
            for a, m, v in cs:
                extend((a, m | first, v, slot))
                first = 0
        self.table = np.array(flat, dtype=np.float64).reshape(-1, 4) if flat else _EMPTY_TABLE


class NumericClusters:
    """Numeric filters by access cluster; ``match`` returns the matching slots."""

    def __init__(self) -> None:
        self._attr_id: dict[str, int] = {}
        self._singles: dict[str, _Cluster] = {}
        # pairs by first then second name: no tuple to build or hash per lookup
        self._pairs: dict[str, dict[str, _Cluster]] = {}
        self._n_pairs = 0
        self._n_members = 0
        self._dirty: dict[int, _Cluster] = {}
        self._global_dirty = True
        self._buf = np.full(64, np.nan)  # event value per attribute id, NaN when absent

    @property
    def empty(self) -> bool:
        """No numeric filter is filed (matching can skip this engine)."""
        return not self._n_members

    def __len__(self) -> int:
        return sum(len(c.members) for c in self._singles.values()) + sum(
            len(c.members) for row in self._pairs.values() for c in row.values()
        )

    # -- maintenance ----------------------------------------------------------------------
    def _key(self, f: Filter) -> str | tuple[str, str]:
        first = f.constraints[0].name
        for c in f.constraints:
            if c.name != first:
                return (first, c.name)
        return first

    def add(self, slot: int, f: Filter) -> bool:
        """File ``f`` under ``slot`` if it is numeric; returns whether it was."""
        ids, mask_of = self._attr_id, _MASK
        enc = []
        first = f.constraints[0].name
        key: str | tuple[str, str] = first
        for c in f.constraints:
            m = mask_of.get(c.op)
            if m is None:
                return False
            v = c.value
            t = type(v)
            if t is int:
                if not -EXACT_INT <= v <= EXACT_INT:  # type: ignore[operator]
                    return False
            elif t is not float and (type_class(v) != "num" or not exact_float(v)):
                return False
            a = ids.get(c.name)
            if a is None:
                a = ids[c.name] = len(ids)
                self._global_dirty = True
                if a >= len(self._buf):
                    self._buf = np.full(2 * len(self._buf), np.nan)
            if key is first and c.name != first:
                key = (first, c.name)
            enc.append((a, m, float(v)))  # type: ignore[arg-type]
        if isinstance(key, tuple):
            table = self._pairs.get(key[0])
            if table is None:
                table = self._pairs[key[0]] = {}
            name = key[1]
        else:
            table, name = self._singles, key
        cl = table.get(name)
        if cl is None:
            cl = table[name] = _Cluster()
            self._n_pairs += table is not self._singles
        if slot not in cl.members:
            self._n_members += 1
        cl.members[slot] = tuple(enc)
        self._dirty[id(cl)] = cl
        self._global_dirty = True
        return True

    def remove(self, slot: int, f: Filter) -> bool:
        """Forget ``slot`` (holding ``f``); returns whether it was filed here."""
        key = self._key(f)
        if isinstance(key, tuple):
            table, name = self._pairs.get(key[0], {}), key[1]
        else:
            table, name = self._singles, key
        cl = table.get(name)
        if cl is None or cl.members.pop(slot, None) is None:
            return False
        self._n_members -= 1
        self._global_dirty = True
        if cl.members:
            self._dirty[id(cl)] = cl
            return True
        del table[name]
        self._dirty.pop(id(cl), None)
        if isinstance(key, tuple):
            self._n_pairs -= 1
            if not table:
                del self._pairs[key[0]]
        return True

    def flush(self) -> None:
        for cl in self._dirty.values():
            cl.build()
        self._dirty.clear()

    # -- matching -------------------------------------------------------------------------
    def _numeric_attrs(
        self, attrs: Mapping[str, Any]
    ) -> tuple[list[str], list[int], list[Any], bool]:
        """The event's numeric attributes that some filter names: names, ids, values, and
        whether every value is exact as float64."""
        names, ids, xs = [], [], []
        exact = True
        get = self._attr_id.get
        for name, x in attrs.items():
            a = get(name)
            if a is None:
                continue
            t = type(x)
            if t is int:
                if not -EXACT_INT <= x <= EXACT_INT:
                    exact = False
            elif t is not float:
                if type_class(x) != "num":
                    continue
                exact = exact and exact_float(x)
            names.append(name)
            ids.append(a)
            xs.append(x)
        return names, ids, xs, exact

    def _touched(self, names: list[str]) -> list[_Cluster]:
        names = sorted(names)
        singles, pairs, m = self._singles, self._pairs, len(names)
        out = [c for c in map(singles.get, names) if c is not None]
        if m * (m - 1) // 2 <= self._n_pairs:
            for i in range(m - 1):
                row = pairs.get(names[i])
                if row is not None:
                    for b in names[i + 1 :]:
                        c = row.get(b)
                        if c is not None:
                            out.append(c)
        elif m > 1:  # an event with very many attributes: walk the pairs instead
            present = set(names)
            for a, row in pairs.items():
                if a in present:
                    out.extend(c for b, c in row.items() if b in present)
        return out

    def candidates(self, attrs: Mapping[str, Any]) -> list[int]:
        """Slots of every filter in a touched cluster (for exact re-checking)."""
        names = self._numeric_attrs(attrs)[0]
        return [s for c in self._touched(names) for s in c.members]

    def match(self, attrs: Mapping[str, Any], small_rows: int = 0) -> np.ndarray | list[int] | None:
        """Matching slots (a list when evaluated in Python, for touched clusters of at most
        ``small_rows`` rows), or None when an event value is not exact as float64."""
        names, ids, xs, exact = self._numeric_attrs(attrs)
        if not names:
            return _NO_SLOTS
        touched = self._touched(names)
        if not touched:
            return _NO_SLOTS
        if small_rows:
            rows = 0
            for c in touched:
                rows += len(c.table)
            if rows <= small_rows:
                return _evaluate_py(touched, dict(zip(ids, xs, strict=True)))
        if not exact:
            return None
        table = (
            touched[0].table if len(touched) == 1 else np.concatenate([c.table for c in touched])
        )
        buf = self._buf
        buf[ids] = xs
        x = buf[table[:, 0].astype(np.intp)]
        buf[ids] = np.nan
        return _evaluate(table, x)

    # -- batch ----------------------------------------------------------------------------
    def _global(self) -> None:
        """(Re)build the batch view: every cluster table concatenated, plus dense lookups
        attribute id -> single cluster and sorted (id, id) keys -> pair cluster. A derived
        cache, rebuilt lazily by the first batch after a change (one memcpy of the tables)."""
        if not self._global_dirty:
            return
        self.flush()
        ids = self._attr_id
        tables: list[np.ndarray] = []
        single_idx = np.full(len(ids), -1, dtype=np.intp)
        for name, c in self._singles.items():
            single_idx[ids[name]] = len(tables)
            tables.append(c.table)
        keys: list[int] = []
        idx: list[int] = []
        for a, row in self._pairs.items():
            ia = ids[a]
            for b, c in row.items():
                ib = ids[b]
                keys.append((min(ia, ib) << 32) | max(ia, ib))
                idx.append(len(tables))
                tables.append(c.table)
        lens = np.array([len(t) for t in tables], dtype=np.intp)
        self._g_table = np.concatenate(tables) if tables else _EMPTY_TABLE
        self._g_len = lens
        self._g_off = np.cumsum(lens) - lens
        self._g_single = single_idx
        order = np.argsort(np.array(keys, dtype=np.int64), kind="stable")
        self._g_pair_keys = np.array(keys, dtype=np.int64)[order]
        self._g_pair_idx = np.array(idx, dtype=np.intp)[order]
        self._global_dirty = False

    def match_batch(
        self, events: Sequence[Mapping[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """``(event index, slot)`` pairs of matches (sorted by event), and the indexes of the
        events left to the caller because a value is not exact as float64."""
        self._global()
        n_attr = max(1, len(self._attr_id))
        step = max(1, BATCH_VALUES // n_attr)
        out_ev: list[np.ndarray] = []
        out_slot: list[np.ndarray] = []
        inexact: list[int] = []
        for base in range(0, len(events), step):
            self._batch_chunk(events[base : base + step], base, out_ev, out_slot, inexact)
        if not out_ev:
            return _NO_SLOTS, _NO_SLOTS, inexact
        return np.concatenate(out_ev), np.concatenate(out_slot), inexact

    def _batch_chunk(
        self,
        events: Sequence[Mapping[str, Any]],
        base: int,
        out_ev: list[np.ndarray],
        out_slot: list[np.ndarray],
        inexact: list[int],
    ) -> None:
        # 1. (event, attribute id, value) of every numeric attribute some filter names
        ev_l: list[int] = []
        id_l: list[int] = []
        x_l: list[Any] = []
        get = self._attr_id.get
        for i, event in enumerate(events):
            start = len(ev_l)
            for name, x in getattr(event, "attrs", event).items():
                a = get(name)
                if a is None:
                    continue
                t = type(x)
                if t is int:
                    if not -EXACT_INT <= x <= EXACT_INT:
                        break
                elif t is not float:
                    if type_class(x) != "num":
                        continue
                    if not exact_float(x):
                        break
                ev_l.append(i)
                id_l.append(a)
                x_l.append(x)
            else:
                continue
            inexact.append(base + i)  # left to the caller's exact path
            del ev_l[start:], id_l[start:], x_l[start:]
        if not ev_l:
            return
        ev = np.array(ev_l, dtype=np.intp)
        aid = np.array(id_l, dtype=np.intp)
        n = len(ev)
        # 2. touched clusters: the singles of each attribute, the pairs of each two attributes
        sc = self._g_single[aid]
        hit = sc >= 0
        c_ev, c_idx = [ev[hit]], [sc[hit]]
        if len(self._g_pair_keys):
            starts = np.flatnonzero(np.r_[True, ev[1:] != ev[:-1]])
            sizes = np.diff(np.r_[starts, n])
            rank = np.arange(n) - np.repeat(starts, sizes)
            after = np.repeat(sizes, sizes) - 1 - rank
            p = np.repeat(np.arange(n), after)
            q = p + 1 + np.arange(len(p)) - np.repeat(np.cumsum(after) - after, after)
            ap, aq = aid[p], aid[q]
            key = (np.minimum(ap, aq).astype(np.int64) << 32) | np.maximum(ap, aq)
            pos = np.searchsorted(self._g_pair_keys, key)
            pos[pos == len(self._g_pair_keys)] = 0
            found = self._g_pair_keys[pos] == key
            c_ev.append(ev[p[found]])
            c_idx.append(self._g_pair_idx[pos[found]])
        cev, cidx = np.concatenate(c_ev), np.concatenate(c_idx)
        if not len(cidx):
            return
        order = np.argsort(cev, kind="stable")
        cev, cidx = cev[order], cidx[order]
        # 3. the rows of those clusters, evaluated in cache-sized segments
        values = np.full((len(events), len(self._attr_id)), np.nan)
        values[ev, aid] = x_l
        lens = self._g_len[cidx]
        cum = np.cumsum(lens)
        cuts = [0, *np.searchsorted(cum, np.arange(BATCH_ROWS, cum[-1], BATCH_ROWS)).tolist()]
        cuts.append(len(cidx))
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            if lo >= hi:
                continue
            seg_len = lens[lo:hi]
            ends = np.cumsum(seg_len)
            rows = np.repeat(self._g_off[cidx[lo:hi]] - (ends - seg_len), seg_len)
            rows += np.arange(int(ends[-1]))
            table = self._g_table[rows]
            row_ev = np.repeat(cev[lo:hi], seg_len)
            x = values[row_ev, table[:, 0].astype(np.intp)]
            first = np.flatnonzero(table[:, 1] >= FIRST)
            ok = np.logical_and.reduceat(_satisfied(table, x), first)
            sel = first[ok]
            out_ev.append(row_ev[sel] + base)
            out_slot.append(table[sel, 3].astype(np.int64))


def _satisfied(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    v = table[:, 2]
    outcome = (x < v).view(np.uint8) << 2
    outcome |= (x == v).view(np.uint8) << 1
    outcome |= (x > v).view(np.uint8)
    return (table[:, 1].astype(np.uint8) & outcome) != 0


def _evaluate(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    first = np.flatnonzero(table[:, 1] >= FIRST)
    ok = np.logical_and.reduceat(_satisfied(table, x), first)
    return table[first[ok], 3].astype(np.int64)


def _evaluate_py(touched: list[_Cluster], values: dict[int, Any]) -> list[int]:
    """The members of ``touched`` whose every row holds for ``values`` (attribute id -> event
    value), in exact Python arithmetic: the small-set twin of :func:`_evaluate`."""
    out: list[int] = []
    get = values.get
    for c in touched:
        for slot, cs in c.members.items():
            for a, m, v in cs:
                x = get(a)
                if x is None:
                    break
                if x < v:
                    if not m & 4:
                        break
                elif x == v:
                    if not m & 2:
                        break
                elif not m & 1:
                    break
            else:
                out.append(slot)
    return out
