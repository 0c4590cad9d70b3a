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
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pubguard.errors import ConfigError, InputError, PubguardError, ValidationError
from pubguard.model import (
    AttributeSpec,
    Constraint,
    Event,
    EventType,
    Filter,
    Op,
    Subscription,
    parse_json,
    read_events,
    read_subscriptions,
)
from pubguard.sim.topic_workloads import Built, Progress, build_eventguard, build_psguard, payloads

__all__ = [
    "SHAPES",
    "VCAPS_DICTIONARY",
    "VCAPS_OPS",
    "Workload",
    "build",
    "generate",
    "load_workload",
    "np_rng",
    "resolve_params",
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


# -- the workload folder --------------------------------------------------------------------

SUBSCRIPTIONS_FILE = "subscriptions.jsonl"
EVENTS_FILE = "events.jsonl"
META_FILE = "workload.json"
FORMAT_VERSION = 1
VCAPS_TYPE = "vcaps"
VCAPS_MAX_SUBSCRIBER_FILTERS = 200  # vcaps.txt §6.1: "a random subset ... uniform in [1-200]"

# Parameters of each shape and their defaults: the papers' values where they are cheap,
# smaller where the paper's size would take more than a few seconds.
SHAPES: dict[str, dict[str, int | float]] = {
    "vcaps": {  # vcaps.txt §6.1: 100-10000 filters, 1000 subscribers, 200 notifications
        "filters": 1000,
        "subscribers": 100,
        "events": 200,
        "max_filters_per_subscriber": VCAPS_MAX_SUBSCRIBER_FILTERS,
        "payload_size": 0,
    },
    "eventguard": {  # eventguard.txt §6.2.1: 128 topics, 32 publishers, NS = 8K subscribers
        "topics": 128,
        "publishers": 32,
        "subscribers": 8192,
        "events": 1000,
        "topics_per_publisher": 16,
        "topics_per_subscriber": 4,
        "zipf_s": 1.0,
        "payload_size": 256,
    },
    "psguard": {  # psguard.txt §5.2: 128 topics (4 x 32), 32 subscribers on 32 topics each
        "topics_per_kind": 32,
        "subscribers": 32,
        "events": 1000,
        "topics_per_subscriber": 32,
        "zipf_s": 1.0,
        "payload_size": 256,
    },
}


@dataclass(frozen=True, slots=True)
class Workload:
    """A loaded workload folder."""

    shape: str  # "custom" for a workload a user wrote
    seed: int | None  # None unless generated
    params: Mapping[str, Any]
    types: Mapping[str, EventType]
    subscriptions: tuple[Subscription, ...]
    events: tuple[Event, ...]
    extras: Mapping[str, Any]

    @property
    def filters(self) -> dict[str, Filter]:
        """Unique filters by id."""
        return {s.filter.id: s.filter for s in self.subscriptions if s.filter.id is not None}

    @property
    def subscribers(self) -> list[str]:
        return list(dict.fromkeys(s.subscriber for s in self.subscriptions))


def _noop(stage: str, done: int, total: int) -> None:
    pass


def resolve_params(shape: str, params: Mapping[str, Any]) -> dict[str, int | float]:
    """The shape's defaults overridden by ``params``, validated (ConfigError on bad input)."""
    if shape not in SHAPES:
        raise ConfigError(f"unknown shape {shape!r} (valid: {', '.join(SHAPES)})", key="shape")
    defaults = SHAPES[shape]
    out = dict(defaults)
    for key, value in params.items():
        if value is None:
            continue
        if key not in defaults:
            valid = ", ".join(defaults)
            raise ConfigError(
                f"{key!r} does not apply to shape {shape!r} (valid: {valid})", key=key
            )
        want = type(defaults[key])
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key} must be a number, got {value!r}", key=key)
        if want is int and value != int(value):
            raise ConfigError(f"{key} must be an integer, got {value!r}", key=key)
        out[key] = want(value)
    for key, value in out.items():
        floor = 0 if key in ("payload_size", "events") else 1
        if key == "zipf_s":
            if not 0.0 <= value <= 10.0:
                raise ConfigError(f"zipf_s must be in [0, 10], got {value}", key=key)
        elif value < floor:
            raise ConfigError(f"{key} must be >= {floor}, got {value}", key=key)
    _check_relations(shape, out)
    return out


def _check_relations(shape: str, p: Mapping[str, Any]) -> None:
    def need(cond: bool, msg: str, key: str) -> None:
        if not cond:
            raise ConfigError(msg, key=key)

    if shape == "eventguard":
        t = p["topics"]
        need(p["topics_per_publisher"] <= t, "topics_per_publisher exceeds topics", "topics")
        need(p["topics_per_subscriber"] <= t, "topics_per_subscriber exceeds topics", "topics")
    elif shape == "psguard":
        n = 4 * p["topics_per_kind"]
        need(
            p["topics_per_subscriber"] <= n,
            f"topics_per_subscriber exceeds the {n} topics",
            "topics_per_subscriber",
        )


def _stream(seed: int, name: str) -> random.Random:
    # One independent stream per part, so changing the number of events leaves the filters
    # as they were. str seeds are hashed with SHA-512: stable across runs and platforms.
    return random.Random(f"pubguard-workload/{seed}/{name}")


def _build_vcaps(seed: int, p: Mapping[str, Any], progress: Progress) -> Built:
    n = p["filters"]
    filters = vcaps_filters(n, _stream(seed, "filters"))
    progress("filters", n, n)
    g = np_rng(_stream(seed, "subscribers"))
    subs: list[Subscription] = []
    top = min(p["max_filters_per_subscriber"], n)
    for s in range(1, p["subscribers"] + 1):
        k = int(g.integers(1, top + 1))
        chosen = np.sort(g.choice(n, k, replace=False))
        subs.extend(Subscription(f"s{s}", filters[i]) for i in chosen.tolist())
    progress("subscriptions", p["subscribers"], p["subscribers"])
    events = vcaps_events(p["events"], _stream(seed, "events"))
    bodies = payloads(np_rng(_stream(seed, "payloads")), len(events), p["payload_size"])
    events = [
        Event(e.attrs, id=e.id, type=VCAPS_TYPE, payload=b)
        for e, b in zip(events, bodies, strict=True)
    ]
    progress("events", len(events), len(events))
    lo, hi = VCAPS_VALUE_RANGE
    # NAKT ranges must be powers of two (psguard.txt §3.1); values 1-100 fit in [0, 128).
    spec = [AttributeSpec(a, "int", True, 128, 1, kind="numeric") for a in VCAPS_DICTIONARY]
    return Built([EventType(VCAPS_TYPE, tuple(spec))], subs, events, {"value_range": [lo, hi]})


def build(
    shape: str, *, seed: int, progress: Progress | None = None, **params: Any
) -> tuple[Built, dict[str, Any]]:
    """Build a workload in memory: ``(built, resolved parameters)``."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an integer, got {seed!r}", key="seed")
    p = resolve_params(shape, params)
    cb = progress or _noop
    if shape == "vcaps":
        return _build_vcaps(seed, p, cb), p
    g = np_rng(_stream(seed, shape))
    if shape == "eventguard":
        return build_eventguard(g, progress=cb, **p), p  # type: ignore[arg-type]
    return build_psguard(g, progress=cb, **p), p  # type: ignore[arg-type]


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


def generate(
    shape: str,
    out_dir: Path | str,
    *,
    seed: int,
    force: bool = False,
    progress: Progress | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Generate a workload folder; returns the ``workload.json`` object (with ``counts``).

    Raises ConfigError for bad parameters, or when ``out_dir`` holds files and ``force`` is
    false; nothing is written in either case.
    """
    out = Path(out_dir)
    p = resolve_params(shape, params)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a directory", path=str(out))
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"{out} is not empty (use --force to overwrite)", path=str(out))
    built, p = build(shape, seed=seed, progress=progress, **p)
    cb = progress or _noop
    out.mkdir(parents=True, exist_ok=True)
    total = len(built.subscriptions) + len(built.events)
    done = 0
    files: tuple[tuple[str, Sequence[Subscription | Event]], ...] = (
        (SUBSCRIPTIONS_FILE, built.subscriptions),
        (EVENTS_FILE, built.events),
    )
    for fname, items in files:
        with (out / fname).open("w", encoding="utf-8", newline="\n") as fh:
            for i, item in enumerate(items, 1):
                fh.write(_dump(item.to_json()) + "\n")
                if i % 20000 == 0:
                    cb("writing", done + i, total)
        done += len(items)
    cb("writing", total, total)
    meta = {
        "format": FORMAT_VERSION,
        "shape": shape,
        "seed": seed,
        "params": p,
        "counts": {
            "types": len(built.types),
            "subscribers": len({s.subscriber for s in built.subscriptions}),
            "subscriptions": len(built.subscriptions),
            "filters": len({s.filter.id for s in built.subscriptions}),
            "events": len(built.events),
        },
        "types": [t.to_json() for t in built.types],
        **built.extras,
    }
    (out / META_FILE).write_text(
        json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return meta


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    meta = parse_json(text, path=str(path))
    if not isinstance(meta, dict):
        raise InputError("workload.json must hold a JSON object", path=str(path))
    if not isinstance(meta.get("types"), list):
        raise InputError("missing or bad 'types' (a list of event types)", path=str(path))
    # shape, seed and params describe a generated workload; a user's own needs only types
    for key, kind, default in (("shape", str, "custom"), ("seed", int, None), ("params", dict, {})):
        v = meta.setdefault(key, default)
        if not (isinstance(v, kind) or (v is None and default is None)) or isinstance(v, bool):
            raise InputError(f"bad {key!r}", path=str(path))
    return meta


def load_workload(directory: Path | str) -> Workload:
    """Read a workload folder strictly: the first bad record raises InputError naming it."""
    d = Path(directory)
    if not d.is_dir():
        why = "it is a file" if d.exists() else "no such directory"
        raise InputError(f"not a workload folder ({why})", path=str(d))
    meta_path = d / META_FILE
    meta = _read_meta(meta_path)
    types: dict[str, EventType] = {}
    for t in meta["types"]:
        try:
            et = EventType.from_json(t) if isinstance(t, dict) else None
        except PubguardError as exc:
            raise InputError(f"bad event type: {exc}", path=str(meta_path)) from exc
        if et is None:
            raise InputError("an event type must be an object", path=str(meta_path))
        types[et.name] = et
    subs = tuple(read_subscriptions(d / SUBSCRIPTIONS_FILE))
    events = tuple(read_events(d / EVENTS_FILE))
    for n, e in enumerate(events, 1):
        if e.type is None:
            continue
        et = types.get(e.type)
        try:
            if et is None:
                raise ValidationError(f"unknown event type {e.type!r}")
            et.validate(e)
        except ValidationError as exc:
            raise InputError(f"event {e.id or n}: {exc}", path=str(d / EVENTS_FILE)) from exc
    reserved = {"format", "shape", "seed", "params", "counts", "types"}
    extras = {k: v for k, v in meta.items() if k not in reserved}
    return Workload(meta["shape"], meta["seed"], meta["params"], types, subs, events, extras)
