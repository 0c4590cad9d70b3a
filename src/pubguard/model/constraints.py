"""Constraints ``(name, op, value)`` and their covering relation.

Theory of operation
-------------------
A constraint tests one attribute of an event (Siena model as used by eventguard.txt §2.1,
vcaps.txt §2 and psguard.txt §2.1). It matches only when the attribute is present *and* of the
same type class as the constraint's value (``exists`` only needs presence).

``Constraint.covers(other)`` is *sound by construction*: it answers True only when every value
satisfying ``other`` satisfies ``self``. Where an exact answer would need reasoning we do not
trust (string ranges against prefixes, say), it answers False; a missed covering only costs
routing efficiency, a wrong one would lose events. The property tests check soundness.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pubguard.errors import ValidationError
from pubguard.model.values import Value, check_value, type_class

__all__ = ["Constraint", "Op"]


class Op(enum.StrEnum):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    PREFIX = "prefix"
    SUFFIX = "suffix"
    SUBSTRING = "substring"
    EXISTS = "exists"

    @classmethod
    def parse(cls, text: str) -> Op:
        alias = {"==": "="}.get(text, text)
        try:
            return cls(alias)
        except ValueError:
            valid = " ".join(o.value for o in cls)
            raise ValidationError(f"unknown operator {text!r} (valid: {valid})") from None


ORDER_OPS = frozenset({Op.LT, Op.LE, Op.GT, Op.GE})
STRING_OPS = frozenset({Op.PREFIX, Op.SUFFIX, Op.SUBSTRING})
_LOWER = frozenset({Op.GT, Op.GE})  # the constraint bounds the value from below


@dataclass(frozen=True, slots=True, eq=False)
class Constraint:
    """One test ``name op value`` on an event attribute.

    Equality and hashing include the value's type class, so ``a = true`` and ``a = 1`` are
    different constraints (Python alone says ``True == 1``)."""

    name: str
    op: Op
    value: Value | None = None

    def _key(self) -> tuple[str, str, str | None, Value | None]:
        return (self.name, self.op.value, type_class(self.value), self.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Constraint):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError("constraint attribute name must be a non-empty string")
        op = self.op if isinstance(self.op, Op) else Op.parse(str(self.op))
        object.__setattr__(self, "op", op)
        if op is Op.EXISTS:
            if self.value is not None:
                raise ValidationError(f"'exists' on {self.name!r} takes no value")
            return
        check_value(self.value, what=f"value of {self.name!r}")
        cls = type_class(self.value)
        if op in STRING_OPS and cls != "str":
            raise ValidationError(f"operator {op.value!r} on {self.name!r} needs a string value")
        if op in ORDER_OPS and cls == "bool":
            raise ValidationError(f"operator {op.value!r} on {self.name!r} cannot order booleans")

    # -- matching -------------------------------------------------------------------------
    def matches_value(self, v: Any) -> bool:
        """Does an attribute value ``v`` satisfy this constraint? (``v`` present.)"""
        if self.op is Op.EXISTS:
            return True
        if type_class(v) != type_class(self.value) or type_class(v) is None:
            return False
        c = self.value
        match self.op:
            case Op.EQ:
                return bool(v == c)
            case Op.NE:
                return bool(v != c)
            case Op.LT:
                return bool(v < c)  # type: ignore[operator]
            case Op.LE:
                return bool(v <= c)  # type: ignore[operator]
            case Op.GT:
                return bool(v > c)  # type: ignore[operator]
            case Op.GE:
                return bool(v >= c)  # type: ignore[operator]
            case Op.PREFIX:
                return v.startswith(c)  # type: ignore[no-any-return,union-attr]
            case Op.SUFFIX:
                return v.endswith(c)  # type: ignore[no-any-return,union-attr]
            case Op.SUBSTRING:
                return c in v  # type: ignore[operator]
        return False  # pragma: no cover

    def matches(self, attrs: Any) -> bool:
        """Does an attribute mapping satisfy this constraint? Missing attribute: no."""
        if self.name not in attrs:
            return False
        return self.matches_value(attrs[self.name])

    # -- covering -------------------------------------------------------------------------
    def covers(self, other: Constraint) -> bool:
        """True only if every value satisfying ``other`` satisfies ``self`` (sound)."""
        if self.name != other.name:
            return False
        if self.op is Op.EXISTS:
            return True
        if other.op is Op.EXISTS:
            return False
        if type_class(self.value) != type_class(other.value):
            return False
        a, b = self, other
        if b.op is Op.EQ:  # other's set is one value
            return a.matches_value(b.value)
        if a.op is Op.NE:  # self's set is everything but one value
            return not b.matches_value(a.value)
        if a.op in ORDER_OPS and b.op in ORDER_OPS:
            return _range_covers(a, b)
        if a.op in ORDER_OPS and b.op is Op.PREFIX and a.op in _LOWER:
            # every string with prefix p is >= p
            return a.matches_value(b.value)
        if b.op is Op.NE:
            return False  # only '!=' with the same value (handled above) covers '!='
        sa, sb = a.value, b.value
        assert isinstance(sa, str) or a.op not in STRING_OPS
        match (a.op, b.op):
            case (Op.PREFIX, Op.PREFIX):
                return sb.startswith(sa)  # type: ignore[union-attr,arg-type]
            case (Op.SUFFIX, Op.SUFFIX):
                return sb.endswith(sa)  # type: ignore[union-attr,arg-type]
            case (Op.SUBSTRING, Op.PREFIX | Op.SUFFIX | Op.SUBSTRING):
                return sa in sb  # type: ignore[operator]
        return False

    def to_json(self) -> list[Any]:
        if self.op is Op.EXISTS:
            return [self.name, self.op.value]
        return [self.name, self.op.value, self.value]

    def __str__(self) -> str:
        from pubguard.model.parser import format_constraint

        return format_constraint(self)


def _range_covers(a: Constraint, b: Constraint) -> bool:
    """Order constraints: ``a`` covers ``b`` iff both bound the same side and a is looser."""
    if (a.op in _LOWER) != (b.op in _LOWER):
        return False
    va, vb = a.value, b.value
    if a.op in _LOWER:  # a: x > va or x >= va ; b: x > vb or x >= vb
        if va < vb:  # type: ignore[operator]
            return True
        if va == vb:
            return a.op is Op.GE or b.op is Op.GT
        return False
    if va > vb:  # type: ignore[operator]
        return True
    if va == vb:
        return a.op is Op.LE or b.op is Op.LT
    return False
