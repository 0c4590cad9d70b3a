"""Events and event types (schemas).

An event is a typed attribute map with an optional id, type name and opaque payload
(eventguard.txt §2.1; psguard.txt §2.1 ``<topic, attributes, payload>``). An event type is a
named schema; its ``type_id`` is SHA-256 of the name, as Hermes does
(hermes-encrypted-access-control.txt §3). Each attribute is either *routable* (brokers may match
on it, in protected form) or *secret* (encrypted end to end); numeric routable attributes carry
the range size and least count the PSGuard numeric key tree needs (psguard.txt §3.1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pubguard.errors import ValidationError
from pubguard.model.values import VALUE_TYPES, Value, check_value, type_name

__all__ = ["AttributeSpec", "Event", "EventType"]


@dataclass(frozen=True, slots=True)
class Event(Mapping[str, Value]):
    """An immutable event. Behaves as a read-only mapping of its attributes."""

    attrs: Mapping[str, Value]
    id: str | None = None
    type: str | None = None
    payload: bytes = b""
    _frozen: tuple[tuple[str, Value], ...] = field(init=False, repr=False, compare=True)

    def __post_init__(self) -> None:
        if not isinstance(self.attrs, Mapping):
            raise ValidationError("event attrs must be a mapping")
        clean: dict[str, Value] = {}
        for k, v in self.attrs.items():
            if not isinstance(k, str) or not k:
                raise ValidationError("event attribute names must be non-empty strings")
            clean[k] = check_value(v, what=f"attribute {k!r}")
        object.__setattr__(self, "attrs", MappingProxyType(clean))
        object.__setattr__(self, "_frozen", tuple(sorted(clean.items(), key=lambda kv: kv[0])))
        if isinstance(self.payload, str):
            object.__setattr__(self, "payload", self.payload.encode())
        if not isinstance(self.payload, bytes | bytearray):
            raise ValidationError("event payload must be bytes or str")
        object.__setattr__(self, "payload", bytes(self.payload))

    def __getitem__(self, key: str) -> Value:
        return self.attrs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.attrs)

    def __len__(self) -> int:
        return len(self.attrs)

    def __hash__(self) -> int:
        return hash((self._frozen, self.id, self.type, self.payload))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        if self.id is not None:
            d["id"] = self.id
        if self.type is not None:
            d["type"] = self.type
        d["attrs"] = dict(self.attrs)
        if self.payload:
            try:
                d["payload"] = self.payload.decode()
            except UnicodeDecodeError:
                d["payload_hex"] = self.payload.hex()
        return d


@dataclass(frozen=True, slots=True)
class AttributeSpec:
    """One attribute of an event type."""

    name: str
    type: str  # int | float | str | bool
    routable: bool = True
    range_size: int | None = None  # numeric routable: |R| of the NAKT (psguard.txt §3.1)
    least_count: int | None = None  # numeric routable: lc
    kind: str | None = None  # optional PSGuard matching kind: topic|numeric|category|prefix|suffix

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("attribute name must be non-empty")
        if self.type not in VALUE_TYPES:
            raise ValidationError(f"attribute {self.name!r}: unknown type {self.type!r}")
        if (self.range_size is None) != (self.least_count is None):
            raise ValidationError(f"attribute {self.name!r}: give both range_size and least_count")
        if self.range_size is not None:
            if self.type not in ("int", "float"):
                raise ValidationError(f"attribute {self.name!r}: range only for numeric types")
            if self.range_size <= 0 or (self.least_count or 0) <= 0:
                raise ValidationError(f"attribute {self.name!r}: range and least count must be > 0")

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "type": self.type, "routable": self.routable}
        if self.range_size is not None:
            d["range_size"] = self.range_size
            d["least_count"] = self.least_count
        if self.kind is not None:
            d["kind"] = self.kind
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttributeSpec:
        try:
            return cls(
                name=d["name"],
                type=d["type"],
                routable=bool(d.get("routable", True)),
                range_size=d.get("range_size"),
                least_count=d.get("least_count"),
                kind=d.get("kind"),
            )
        except KeyError as exc:
            raise ValidationError(f"attribute spec is missing {exc.args[0]!r}") from None


@dataclass(frozen=True, slots=True)
class EventType:
    """A named schema. ``type_id`` = SHA-256(name) (Hermes §3)."""

    name: str
    attributes: tuple[AttributeSpec, ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("event type name must be non-empty")
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValidationError(f"event type {self.name!r} has duplicate attribute names")
        object.__setattr__(self, "attributes", tuple(self.attributes))

    @property
    def type_id(self) -> bytes:
        return hashlib.sha256(self.name.encode()).digest()

    def attribute(self, name: str) -> AttributeSpec:
        for a in self.attributes:
            if a.name == name:
                return a
        raise ValidationError(f"event type {self.name!r} has no attribute {name!r}")

    @property
    def routable(self) -> tuple[AttributeSpec, ...]:
        return tuple(a for a in self.attributes if a.routable)

    @property
    def secret(self) -> tuple[AttributeSpec, ...]:
        return tuple(a for a in self.attributes if not a.routable)

    def validate(self, event: Event) -> None:
        """Raise ValidationError unless ``event`` conforms (unknown attrs, wrong types)."""
        specs = {a.name: a for a in self.attributes}
        for k, v in event.attrs.items():
            spec = specs.get(k)
            if spec is None:
                raise ValidationError(f"event type {self.name!r} has no attribute {k!r}")
            t = type_name(v)
            if t != spec.type and not (spec.type == "float" and t == "int"):
                raise ValidationError(f"attribute {k!r} must be {spec.type}, got {t}")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "attributes": [a.to_json() for a in self.attributes]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EventType:
        if "name" not in d:
            raise ValidationError("event type is missing 'name'")
        return cls(d["name"], tuple(AttributeSpec.from_json(a) for a in d.get("attributes", [])))
