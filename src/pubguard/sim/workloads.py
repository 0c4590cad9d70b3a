"""Seeded workloads in the shapes the papers measured, and the workload folder format.

Theory of operation
-------------------
Three shapes, each reproducible from one seed (same seed, same parameters: byte-identical
files):

``vcaps``
    ssbg-like (vcaps.txt §6.1 "Workload Details"): attribute names from a fixed dictionary of
    200 words, unique filters of 1-4 integer constraints (ops ``= < <= > >= !=``), events of
    1-9 attributes, every value uniform in [1, 100]; each subscriber takes a uniformly random
    subset of 1-200 of the unique filters.
``eventguard``
    topic-based (eventguard.txt §6): 128 topics with Zipf popularity, each publisher on 16
    topics, each subscriber on 4; events carry a ``topic`` attribute and a payload.
``psguard``
    psguard.txt §5: 128 topics, 32 of each kind (simple, numeric, category, string); numeric
    topics have range 256, least count 4 and subscription ranges from Gaussian(128, 32);
    category topics have trees of height 4 with 2-4 children per node; string topics take
    prefix/suffix constraints with Zipf lengths 1-8; subscribers on 32 topics; events carry a
    256-byte payload and a secret attribute.

Bulk draws use a numpy ``Generator`` seeded from the caller's ``random.Random`` (STYLE.md §2:
randomness comes in as an argument), so a million vcaps filters take a few seconds.

The folder holds ``subscriptions.jsonl``, ``events.jsonl`` (formats in
:mod:`pubguard.model.codec`) and ``workload.json`` (shape, seed, parameters, event types).
"""

from __future__ import annotations

import gc
import random

import numpy as np

from pubguard.errors import ValidationError
from pubguard.model import Constraint, Event, Filter, Op

__all__ = [
    "VCAPS_DICTIONARY",
    "VCAPS_OPS",
    "np_rng",
    "vcaps_events",
    "vcaps_filters",
]

# vcaps.txt §6.1: "Attribute names for filters and notifications were chosen from a dictionary
# of 200 words." Sorted, so attribute index order equals the canonical constraint order.
VCAPS_DICTIONARY: tuple[str, ...] = tuple(
    sorted(
        """
    acid acre actor adult agent alarm album alley amber angle ankle apple apron arena arrow
    atlas attic audio award bacon badge baker bank barn basin beach beard bench berry bike
    bird blade blank block board bonus boots bread brick bride brush cabin cable camel canal
    candy canoe cargo carol chain chair chalk cheek chess chief child cider cigar civic clerk
    cliff clock cloud coach coast cobra cocoa comet coral couch crane crown cube curve daisy
    dance delta denim depot diary diver dough drama dream drum eagle earth elbow ember enemy
    entry epoch fable fairy fence ferry fiber field flame flock flute focus forge fox frame
    fruit fuel gauge ghost giant glass globe glove grain grape grass guard guest guide habit
    harp haven hazel heart hedge hero honey horse hotel house igloo image index inlet iris
    ivory jelly jewel joker judge juice kayak kettle knife koala label lace ladder lake lamp
    lemon level light lily limit linen lodge lotus lunar magic mango maple march medal melon
    metal meter mint model moose motor mouse music nest noble north novel oasis ocean olive
    onion opera orbit otter owner paint panda paper party pearl pilot plant plaza poem
    polar pound prism pulse quail queen
    """.split()
    )
)
assert len(VCAPS_DICTIONARY) == 200 == len(set(VCAPS_DICTIONARY))

# vcaps.txt §6.1 filters are integer constraints; ssbg draws these operators.
VCAPS_OPS: tuple[Op, ...] = (Op.EQ, Op.LT, Op.LE, Op.GT, Op.GE, Op.NE)
VCAPS_VALUE_RANGE: tuple[int, int] = (1, 100)  # inclusive, "uniformly distributed in [1-100]"
VCAPS_MAX_CONSTRAINTS = 4
VCAPS_MAX_EVENT_ATTRS = 9

_NA, _NO = len(VCAPS_DICTIONARY), len(VCAPS_OPS)
_NV = VCAPS_VALUE_RANGE[1] - VCAPS_VALUE_RANGE[0] + 1
_SENTINEL = _NA * _NO * _NV  # pads rows of fewer than 4 constraints; sorts last


def np_rng(rng: random.Random) -> np.random.Generator:
    """A numpy generator seeded from ``rng`` (so one seed drives both)."""
    return np.random.default_rng(rng.getrandbits(128))


def _check_count(n: int, what: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValidationError(f"{what} must be a non-negative integer, got {n!r}")


def _vcaps_filter_codes(n: int, g: np.random.Generator) -> np.ndarray:
    """``(n, 4)`` int32 rows of sorted constraint codes, unique rows, in first-draw order.

    A code is ``(attribute * 6 + op) * 100 + (value - 1)``; padding is ``_SENTINEL``. Attributes
    within one filter are distinct (a filter never constrains one attribute twice).
    """
    rows = np.empty((0, VCAPS_MAX_CONSTRAINTS), dtype=np.int32)
    cols = np.arange(VCAPS_MAX_CONSTRAINTS)
    while len(rows) < n:
        b = max(1024, int((n - len(rows)) * 1.25))
        k = g.integers(1, VCAPS_MAX_CONSTRAINTS + 1, b)
        attrs = g.integers(0, _NA, (b, VCAPS_MAX_CONSTRAINTS))
        ops = g.integers(0, _NO, (b, VCAPS_MAX_CONSTRAINTS))
        vals = g.integers(0, _NV, (b, VCAPS_MAX_CONSTRAINTS))
        used = cols[None, :] < k[:, None]
        ok = np.ones(b, dtype=bool)
        for i in range(VCAPS_MAX_CONSTRAINTS):
            for j in range(i + 1, VCAPS_MAX_CONSTRAINTS):
                ok &= ~((attrs[:, i] == attrs[:, j]) & used[:, j])
        codes = ((attrs * _NO + ops) * _NV + vals).astype(np.int32)
        codes[~used] = _SENTINEL
        codes = codes[ok]
        codes.sort(axis=1)
        rows = np.concatenate([rows, codes])
        view = np.ascontiguousarray(rows).view(np.dtype((np.void, rows.dtype.itemsize * 4)))
        _, first = np.unique(view.ravel(), return_index=True)
        first.sort()
        rows = rows[first]
    return rows[:n]


# Filter is a frozen slotted dataclass; its slot descriptors let us fill a trusted instance.
_SET_CONSTRAINTS = Filter.__dict__["constraints"].__set__
_SET_ID = Filter.__dict__["id"].__set__


def _trusted_filters(
    rows: list[tuple[Constraint, ...]], ids: list[str], out: list[Filter | None], where: list[int]
) -> None:
    # Constraints are already validated and in canonical order (distinct attribute names,
    # sorted), so Filter.__post_init__'s checks and sorting would change nothing; skipping them
    # makes a million filters take seconds instead of tens of seconds. tests/sim check that
    # Filter(f.constraints, id=f.id) == f on samples.
    new = object.__new__
    for i, cs in zip(where, rows, strict=True):
        f = new(Filter)
        _SET_CONSTRAINTS(f, cs)
        _SET_ID(f, ids[i])
        out[i] = f


def vcaps_filters(n: int, rng: random.Random) -> list[Filter]:
    """``n`` unique ssbg-like filters ``f1..fn`` (vcaps.txt §6.1)."""
    _check_count(n, "number of filters")
    if n == 0:
        return []
    codes = _vcaps_filter_codes(n, np_rng(rng))
    table: list[Constraint | None] = [None] * (_SENTINEL + 1)
    lo = VCAPS_VALUE_RANGE[0]
    present = np.flatnonzero(np.bincount(codes.ravel(), minlength=_SENTINEL + 1)[:_SENTINEL])
    for code in present.tolist():
        av, val = divmod(code, _NV)
        a, o = divmod(av, _NO)
        table[code] = Constraint(VCAPS_DICTIONARY[a], VCAPS_OPS[o], val + lo)
    sizes = (codes != _SENTINEL).sum(axis=1)
    ids = [f"f{i}" for i in range(1, n + 1)]
    out: list[Filter | None] = [None] * n
    get = table.__getitem__
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of acyclic objects: generational passes would only cost time
    try:
        for k in range(1, VCAPS_MAX_CONSTRAINTS + 1):
            where = np.flatnonzero(sizes == k)
            cols = [map(get, codes[where, j].tolist()) for j in range(k)]
            rows: list[tuple[Constraint, ...]] = list(zip(*cols, strict=True))
            _trusted_filters(rows, ids, out, where.tolist())
    finally:
        if gc_was_enabled:
            gc.enable()
    return out  # type: ignore[return-value]


def vcaps_events(m: int, rng: random.Random, *, start: int = 1) -> list[Event]:
    """``m`` events ``e{start}..`` of 1-9 distinct dictionary attributes, values in [1, 100]."""
    _check_count(m, "number of events")
    g = np_rng(rng)
    out: list[Event] = []
    chunk = 8192
    lo, hi = VCAPS_VALUE_RANGE
    for base in range(0, m, chunk):
        b = min(chunk, m - base)
        k = g.integers(1, VCAPS_MAX_EVENT_ATTRS + 1, b).tolist()
        picks = np.argpartition(g.random((b, _NA)), VCAPS_MAX_EVENT_ATTRS, axis=1)
        picks = picks[:, :VCAPS_MAX_EVENT_ATTRS].tolist()
        vals = g.integers(lo, hi + 1, (b, VCAPS_MAX_EVENT_ATTRS)).tolist()
        for j in range(b):
            chosen = sorted(zip(picks[j][: k[j]], vals[j], strict=False))
            attrs = {VCAPS_DICTIONARY[a]: v for a, v in chosen}
            out.append(Event(attrs, id=f"e{start + base + j}"))
    return out
