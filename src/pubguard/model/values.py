"""Attribute values and their type classes (Siena model, eventguard.txt §2.1, vcaps.txt §2).

Values are ``int``, ``float``, ``str`` or ``bool``. Comparisons happen only within a type
*class*: ``int`` and ``float`` are both ``num``; ``bool`` is its own class (although Python
makes ``bool`` a subclass of ``int``) and so is ``str``. A constraint against a value of another
class does not match (Siena semantics). NaN is refused: it breaks every ordering law.
"""

from __future__ import annotations

import math
from typing import Literal

from pubguard.errors import ValidationError

__all__ = ["VALUE_TYPES", "TypeClass", "Value", "check_value", "type_class", "type_name"]

Value = int | float | str | bool
TypeClass = Literal["num", "str", "bool"]
VALUE_TYPES = ("int", "float", "str", "bool")


def type_class(v: object) -> TypeClass | None:
    """The comparison class of ``v``, or None when it is not a valid attribute value."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "num"
    if isinstance(v, str):
        return "str"
    return None


def type_name(v: Value) -> str:
    """The schema type name of ``v``: ``int``, ``float``, ``str`` or ``bool``."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str"


def check_value(v: object, *, what: str = "value") -> Value:
    """Validate an attribute value, returning it unchanged."""
    if type_class(v) is None:
        raise ValidationError(f"{what} must be int, float, str or bool, not {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise ValidationError(f"{what} must be a finite number")
    return v  # type: ignore[return-value]
