"""Filters: conjunctions of constraints, and filter covering (vcaps.txt §2.1).

``f1.covers(f2)`` holds when every constraint of ``f1`` covers some constraint of ``f2``: then an
event matching ``f2`` satisfies that constraint of ``f2``, hence the covering one of ``f1``, hence
all of ``f1``. Sound by construction; not complete (it never reasons across two constraints of
``f2`` on the same attribute, for example ``x > 1 && x < 3`` covering ``x = 2`` is seen, but
``x >= 2 && x <= 2`` is not recognised as ``x = 2``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pubguard.errors import ValidationError
from pubguard.model.constraints import Constraint, Op

__all__ = ["Filter"]


@dataclass(frozen=True, slots=True)
class Filter:
    """A conjunction of at least one constraint; ``id`` names it in tables and on the wire."""

    constraints: tuple[Constraint, ...]
    id: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        cs = tuple(self.constraints)
        if not cs:
            raise ValidationError("a filter needs at least one constraint")
        for c in cs:
            if not isinstance(c, Constraint):
                raise ValidationError(
                    f"filter constraints must be Constraint, not {type(c).__name__}"
                )
        # canonical order makes equal filters compare and hash equal
        cs = tuple(sorted(set(cs), key=_sort_key))
        object.__setattr__(self, "constraints", cs)
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise ValidationError("filter id must be a non-empty string")

    @classmethod
    def of(cls, *constraints: tuple[Any, ...] | Constraint, id: str | None = None) -> Filter:
        """Build from ``(name, op, value)`` tuples: ``Filter.of(("age", ">", 20), id="f1")``."""
        cs = [
            c if isinstance(c, Constraint) else Constraint(c[0], Op.parse(c[1]), *c[2:])
            for c in constraints
        ]
        return cls(tuple(cs), id=id)

    @classmethod
    def parse(cls, text: str, *, id: str | None = None) -> Filter:
        from pubguard.model.parser import parse_filter

        return parse_filter(text, id=id)

    def matches(self, attrs: Mapping[str, Any] | Any) -> bool:
        a = getattr(attrs, "attrs", attrs)
        return all(c.matches(a) for c in self.constraints)

    def covers(self, other: Filter) -> bool:
        return all(any(c1.covers(c2) for c2 in other.constraints) for c1 in self.constraints)

    @property
    def attribute_names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.constraints)

    def with_id(self, id: str) -> Filter:
        return Filter(self.constraints, id=id)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"constraints": [c.to_json() for c in self.constraints]}
        if self.id is not None:
            d = {"id": self.id, **d}
        return d

    def __str__(self) -> str:
        from pubguard.model.parser import format_filter

        return format_filter(self)


def _sort_key(c: Constraint) -> tuple[str, str, str, str]:
    return (c.name, c.op.value, type(c.value).__name__, repr(c.value))


def filters_from(items: Iterable[Filter]) -> list[Filter]:
    return list(items)
