"""Reading a workload folder for the pipeline, fast at scale.

Theory of operation. A workload folder (``pubguard workload generate``; format in
:mod:`pubguard.model.codec`) lists one line per (subscriber, filter) pair, so the same filter
appears on many lines: the vcaps workload at 100,000 subscriptions has 10,000 distinct filters,
the psguard one at 8,192 subscribers 262,144 lines over 41,051 filters. The generic reader
(:func:`pubguard.sim.workloads.load_workload`) builds a fresh :class:`~pubguard.model.Filter`
per line (constraint parsing, validation, canonical sorting), which dominated the pipeline's
*load* stage (about 40 s at 100,000 subscriptions). :func:`load_workload` here parses each
distinct filter once (keyed by the ``repr`` of its parsed JSON) and shares the object between the lines
that name it; everything else (metadata, types, events, the strict per-line errors naming
file and line) is the generic reader's, so both return equal :class:`Workload` values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pubguard.errors import InputError, PubguardError, ValidationError
from pubguard.model import EventType, Filter, Subscription
from pubguard.model.codec import filter_from_json, read_events
from pubguard.sim import workloads as W

__all__ = ["load_workload", "read_subscriptions_shared"]


def read_subscriptions_shared(path: Path | str) -> list[Subscription]:
    """Every subscription line of ``path``; equal filter JSON values share one parsed Filter.
    Strict like :func:`pubguard.model.codec.read_subscriptions`: the first bad line raises
    :class:`InputError` naming the file and line."""
    p = Path(path)
    cache: dict[str, Filter] = {}
    out: list[Subscription] = []
    try:
        fh = p.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(p)) from None
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(
                    f"malformed JSON: {exc.msg} (column {exc.colno})", path=str(p), line=n
                ) from None
            try:
                out.append(_subscription(d, cache))
            except PubguardError as exc:
                raise InputError(str(exc), path=str(p), line=n) from exc
    return out


def _subscription(d: Any, cache: dict[str, Filter]) -> Subscription:
    if not isinstance(d, dict):
        raise ValidationError("a subscription line must be a JSON object")
    sub = d.get("subscriber")
    if not isinstance(sub, str) or not sub:
        raise ValidationError("subscription needs a non-empty 'subscriber'")
    if "filter" not in d:
        raise ValidationError("subscription needs a 'filter'")
    raw = d["filter"]
    key = repr(raw)  # C-fast and injective on JSON values (1 != 1.0 != True)
    f = cache.get(key)
    if f is None:
        f = cache[key] = filter_from_json(raw)
    return Subscription(sub, f)


def load_workload(directory: Path | str) -> W.Workload:
    """:func:`pubguard.sim.workloads.load_workload` with each distinct filter parsed once."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError("not a workload folder (no such directory)", path=str(d))
    meta_path = d / W.META_FILE
    meta = W._read_meta(meta_path)  # the generic reader's strict metadata checks
    types: dict[str, EventType] = {}
    for t in meta["types"]:
        try:
            et = EventType.from_json(t) if isinstance(t, dict) else None
        except PubguardError as exc:
            raise InputError(f"bad event type: {exc}", path=str(meta_path)) from exc
        if et is None:
            raise InputError("an event type must be an object", path=str(meta_path))
        types[et.name] = et
    subs = tuple(read_subscriptions_shared(d / W.SUBSCRIPTIONS_FILE))
    events = tuple(read_events(d / W.EVENTS_FILE))
    for n, e in enumerate(events, 1):
        if e.type is None:
            continue
        et = types.get(e.type)
        try:
            if et is None:
                raise ValidationError(f"unknown event type {e.type!r}")
            et.validate(e)
        except ValidationError as exc:
            raise InputError(f"event {e.id or n}: {exc}", path=str(d / W.EVENTS_FILE)) from exc
    reserved = {"format", "shape", "seed", "params", "counts", "types"}
    extras = {k: v for k, v in meta.items() if k not in reserved}
    return W.Workload(meta["shape"], meta["seed"], meta["params"], types, subs, events, extras)
