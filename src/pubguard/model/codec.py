"""JSON form of filters, subscriptions and events, and the JSON-lines readers.

Formats (the workload folder, see ``pubguard workload generate``)::

    subscriptions.jsonl  {"subscriber": "s1", "filter": {"id": "f1", "constraints": [["age", ">", 20]]}}
    events.jsonl         {"id": "e1", "type": "quote", "attrs": {"age": 30}, "payload": "..."}

Readers are strict: the first bad line raises :class:`~pubguard.errors.InputError` naming the
file and line; nothing after it is silently skipped. Every JSON a user hands pubguard (these
files, ``workload.json``, ``pubguard publish``'s arguments and stdin) is parsed by
:func:`parse_json`, so malformed JSON is reported at its real line and column.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pubguard.errors import InputError, PubguardError, ValidationError
from pubguard.model.constraints import Constraint, Op
from pubguard.model.events import Event
from pubguard.model.filters import Filter

__all__ = [
    "Subscription",
    "event_from_json",
    "filter_from_json",
    "parse_json",
    "read_events",
    "read_subscriptions",
    "subscription_from_json",
]


@dataclass(frozen=True, slots=True)
class Subscription:
    subscriber: str
    filter: Filter

    def to_json(self) -> dict[str, Any]:
        return {"subscriber": self.subscriber, "filter": self.filter.to_json()}


def constraint_from_json(item: Any) -> Constraint:
    if not isinstance(item, list | tuple) or not 2 <= len(item) <= 3:
        raise ValidationError(
            f"a constraint is [name, op, value] or [name, 'exists'], got {item!r}"
        )
    name, op = item[0], item[1]
    if not isinstance(op, str):
        raise ValidationError(f"operator must be a string, got {op!r}")
    o = Op.parse(op)
    if o is Op.EXISTS:
        if len(item) == 3 and item[2] is not None:
            raise ValidationError("'exists' takes no value")
        return Constraint(name, o)
    if len(item) != 3:
        raise ValidationError(f"operator {op!r} needs a value")
    return Constraint(name, o, item[2])


def filter_from_json(d: Any) -> Filter:
    if isinstance(d, str):
        return Filter.parse(d)
    if not isinstance(d, Mapping):
        raise ValidationError("a filter is an object with 'constraints'")
    cs = d.get("constraints")
    if not isinstance(cs, list):
        raise ValidationError("filter 'constraints' must be a list")
    fid = d.get("id")
    if fid is not None and not isinstance(fid, str):
        fid = str(fid)
    return Filter(tuple(constraint_from_json(c) for c in cs), id=fid)


def subscription_from_json(d: Any, shared: dict[str, Filter] | None = None) -> Subscription:
    """One subscription line. ``shared``: parsed filters by the ``repr`` of their JSON value,
    so a file that names the same filter on many lines (a workload's subscriber x filter pairs:
    10,000 distinct filters over 100,000 vcaps lines) parses and validates each one once;
    ``repr`` is injective on JSON values (``1``, ``1.0`` and ``true`` differ) and Filter is
    immutable, so sharing is invisible to callers."""
    if not isinstance(d, Mapping):
        raise ValidationError("a subscription line must be a JSON object")
    sub = d.get("subscriber")
    if not isinstance(sub, str) or not sub:
        raise ValidationError("subscription needs a non-empty 'subscriber'")
    if "filter" not in d:
        raise ValidationError("subscription needs a 'filter'")
    if shared is None:
        return Subscription(sub, filter_from_json(d["filter"]))
    key = repr(d["filter"])
    f = shared.get(key)
    if f is None:
        f = shared[key] = filter_from_json(d["filter"])
    return Subscription(sub, f)


def event_from_json(d: Any) -> Event:
    if not isinstance(d, Mapping):
        raise ValidationError("an event line must be a JSON object")
    attrs = d.get("attrs")
    if not isinstance(attrs, Mapping):
        raise ValidationError("event needs an 'attrs' object")
    payload: bytes = b""
    if "payload_hex" in d:
        try:
            payload = bytes.fromhex(d["payload_hex"])
        except (TypeError, ValueError):
            raise ValidationError("'payload_hex' is not hex") from None
    elif d.get("payload") is not None:
        if not isinstance(d["payload"], str):
            raise ValidationError("'payload' must be a string")
        payload = d["payload"].encode()
    eid, etype = d.get("id"), d.get("type")
    return Event(
        attrs,
        id=None if eid is None else str(eid),
        type=None if etype is None else str(etype),
        payload=payload,
    )


def parse_json(text: str, *, path: str, line: int | None = 1) -> Any:
    """``json.loads(text)``; malformed JSON raises :class:`~pubguard.errors.InputError` naming
    ``path``, the line and the column of the fault. ``line``: the line of ``path`` that
    ``text`` starts on; ``None`` for a text that is not part of a file (a command-line
    argument), where only a fault past its first line gets a line number."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if line is None:
            at = exc.lineno if exc.lineno > 1 else None
        else:
            at = line + exc.lineno - 1
        raise InputError(
            f"malformed JSON: {exc.msg}", path=path, line=at, column=exc.colno
        ) from None


def _read_jsonl(path: Path | str, parse: Any) -> Iterator[Any]:
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(p)) from None
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            obj = parse_json(line, path=str(p), line=n)
            try:
                yield parse(obj)
            except PubguardError as exc:
                raise InputError(str(exc), path=str(p), line=n) from exc


def read_subscriptions(path: Path | str) -> Iterator[Subscription]:
    shared: dict[str, Filter] = {}
    return _read_jsonl(path, lambda d: subscription_from_json(d, shared))


def read_events(path: Path | str) -> Iterator[Event]:
    return _read_jsonl(path, event_from_json)
