"""Filter text syntax for people, and its formatter.

Grammar (whitespace between tokens is free)::

    filter     := constraint ( "&&" constraint )*
    constraint := NAME OP value | NAME "exists"
    OP         := "=" | "==" | "!=" | "<" | "<=" | ">" | ">=" | "prefix" | "suffix" | "substring"
    value      := STRING | INT | FLOAT | "true" | "false"
    NAME       := [A-Za-z_][A-Za-z0-9_.:-]*
    STRING     := '"' ( any char but '"' or '\\' | '\\' ( '"' | '\\' | 'n' | 't' ) )* '"'

Example: ``topic = "cancerTrail" && age > 20 && name prefix "Dr."``.
Errors raise :class:`~pubguard.errors.ParseError` with the 1-based column.
``format_filter(parse_filter(t))`` parses back to an equal filter (round-trip property).
"""

from __future__ import annotations

import json
import re

from pubguard.errors import ParseError, ValidationError
from pubguard.model.constraints import Constraint, Op
from pubguard.model.filters import Filter
from pubguard.model.values import Value

__all__ = ["format_constraint", "format_filter", "format_value", "parse_filter"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")
_NUMBER = re.compile(r"[+-]?(\d+\.\d*([eE][+-]?\d+)?|\d+[eE][+-]?\d+|\.\d+([eE][+-]?\d+)?|\d+)")
_SYM_OPS = ("<=", ">=", "!=", "==", "=", "<", ">")
_WORD_OPS = ("prefix", "suffix", "substring", "exists")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t"}


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, msg: str, pos: int | None = None) -> ParseError:
        p = self.pos if pos is None else pos
        return ParseError(msg, text=self.text, column=p + 1)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        self.skip_ws()
        return self.pos >= len(self.text)

    def name(self) -> str:
        self.skip_ws()
        m = _NAME.match(self.text, self.pos)
        if not m:
            raise self.error("expected an attribute name")
        self.pos = m.end()
        return m.group()

    def op(self) -> Op:
        self.skip_ws()
        for s in _SYM_OPS:
            if self.text.startswith(s, self.pos):
                self.pos += len(s)
                return Op.parse(s)
        m = _NAME.match(self.text, self.pos)
        if m and m.group() in _WORD_OPS:
            self.pos = m.end()
            return Op(m.group())
        word = m.group() if m else self.text[self.pos : self.pos + 1] or "end of input"
        raise self.error(f"expected an operator, found {word!r}")

    def value(self) -> Value:
        self.skip_ws()
        start = self.pos
        if self.pos >= len(self.text):
            raise self.error("expected a value, found end of input")
        ch = self.text[self.pos]
        if ch == '"':
            return self._string()
        m = _NUMBER.match(self.text, self.pos)
        if m:
            self.pos = m.end()
            lit = m.group()
            if re.fullmatch(r"[+-]?\d+", lit):
                return int(lit)
            return float(lit)
        m = _NAME.match(self.text, self.pos)
        if m and m.group() in ("true", "false"):
            self.pos = m.end()
            return m.group() == "true"
        raise self.error('expected a value ("string", number, true or false)', start)

    def _string(self) -> str:
        start = self.pos
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                self.pos += 1
                return "".join(out)
            if ch == "\\":
                nxt = self.text[self.pos + 1 : self.pos + 2]
                if nxt not in _ESCAPES:
                    raise self.error(f"unknown escape \\{nxt}")
                out.append(_ESCAPES[nxt])
                self.pos += 2
                continue
            out.append(ch)
            self.pos += 1
        raise self.error("unterminated string", start)


def parse_filter(text: str, *, id: str | None = None) -> Filter:
    """Parse the text syntax into a :class:`Filter`."""
    if not isinstance(text, str):
        raise ParseError("filter text must be a string")
    s = _Scanner(text)
    if s.at_end():
        raise ParseError("empty filter: give at least one constraint", text=text, column=1)
    constraints: list[Constraint] = []
    while True:
        name = s.name()
        op_pos = s.pos
        op = s.op()
        val_pos = s.pos
        if op is Op.EXISTS:
            c_args: tuple[Value, ...] = ()
        else:
            c_args = (s.value(),)
        try:
            constraints.append(Constraint(name, op, *c_args))
        except ValidationError as exc:
            raise ParseError(
                str(exc), text=text, column=(val_pos if c_args else op_pos) + 2
            ) from None
        if s.at_end():
            break
        if not text.startswith("&&", s.pos):
            raise s.error(f"expected '&&' or end of filter, found {text[s.pos]!r}")
        s.pos += 2
        if s.at_end():
            raise s.error("expected a constraint after '&&'")
    return Filter(tuple(constraints), id=id)


def format_value(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return (
            '"'
            + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
            + '"'
        )
    if isinstance(v, float):
        r = repr(v)
        return r if any(ch in r for ch in ".eE") else r + ".0"
    return str(v)


def format_constraint(c: Constraint) -> str:
    if c.op is Op.EXISTS:
        return f"{c.name} exists"
    assert c.value is not None
    return f"{c.name} {c.op.value} {format_value(c.value)}"


def format_filter(f: Filter) -> str:
    return " && ".join(format_constraint(c) for c in f.constraints)


def _json_dumps(v: object) -> str:  # pragma: no cover - debugging aid
    return json.dumps(v)
