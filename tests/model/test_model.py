from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.errors import ParseError, ValidationError
from pubguard.model import Constraint, Event, EventType, Filter, Op, parse_filter
from pubguard.model.events import AttributeSpec
from tests.model.strategies import constraints, events, filters, values


def test_siena_semantics_missing_and_wrong_type_do_not_match() -> None:
    f = Filter.of(("age", ">", 20))
    assert f.matches(Event({"age": 30}))
    assert not f.matches(Event({"name": "x"}))  # missing
    assert not f.matches(Event({"age": "30"}))  # wrong type
    assert not Filter.of(("flag", "=", 1)).matches(Event({"flag": True}))  # bool is not a number
    assert Filter.of(("x", "=", 2)).matches(Event({"x": 2.0}))  # int and float are both numbers
    assert Filter.of(("x", "!=", 3)).matches(Event({"x": 4}))
    assert not Filter.of(("x", "!=", 3)).matches(Event({"y": 4}))


def test_string_operators() -> None:
    e = Event({"name": "Dr. Who"})
    assert Filter.of(("name", "prefix", "Dr.")).matches(e)
    assert Filter.of(("name", "suffix", "Who")).matches(e)
    assert Filter.of(("name", "substring", ". W")).matches(e)
    assert Filter.of(("name", "exists")).matches(e)
    assert not Filter.of(("name", "prefix", "Mr.")).matches(e)


def test_invalid_constructions_raise_typed_errors() -> None:
    with pytest.raises(ValidationError, match="at least one constraint"):
        Filter(())
    with pytest.raises(ValidationError, match="unknown operator"):
        Filter.of(("a", "~", 1))
    with pytest.raises(ValidationError, match="needs a string"):
        Constraint("a", Op.PREFIX, 3)
    with pytest.raises(ValidationError, match="finite"):
        Event({"a": float("nan")})
    with pytest.raises(ValidationError):
        Event({"a": [1, 2]})


def test_event_type_id_is_sha256_of_name() -> None:
    t = EventType(
        "quote", (AttributeSpec("price", "float"), AttributeSpec("note", "str", routable=False))
    )
    assert t.type_id == hashlib.sha256(b"quote").digest()
    assert [a.name for a in t.secret] == ["note"]
    t.validate(Event({"price": 3}))
    with pytest.raises(ValidationError, match="no attribute"):
        t.validate(Event({"volume": 3}))


def test_covering_examples() -> None:
    assert Filter.parse("age > 10").covers(Filter.parse('age > 20 && name = "x"'))
    assert not Filter.parse("age > 20").covers(Filter.parse("age > 10"))
    assert Filter.parse('name prefix "D"').covers(Filter.parse('name prefix "Dr."'))
    assert Filter.parse('name substring "r."').covers(Filter.parse('name prefix "Dr."'))
    assert Filter.parse("age exists").covers(Filter.parse("age = 3"))
    assert Filter.parse("age != 5").covers(Filter.parse("age < 5"))
    assert Filter.parse("age >= 5").covers(Filter.parse("age > 5"))
    assert not Filter.parse("age > 5").covers(Filter.parse("age >= 5"))


@given(constraints(), constraints(), values)
def test_constraint_covering_is_sound(c1: Constraint, c2: Constraint, v: object) -> None:
    if c1.covers(c2) and c2.matches_value(v):
        assert c1.matches_value(v)


@given(filters, filters, events)
def test_filter_covering_is_sound(f1: Filter, f2: Filter, e: Event) -> None:
    if f1.covers(f2) and f2.matches(e):
        assert f1.matches(e)


@given(filters)
def test_covering_is_reflexive(f: Filter) -> None:
    assert f.covers(f)


@given(filters)
def test_parser_round_trip(f: Filter) -> None:
    assert parse_filter(str(f)) == f


@given(filters)
def test_json_round_trip(f: Filter) -> None:
    from pubguard.model import filter_from_json

    assert filter_from_json(f.with_id("f1").to_json()) == f


@given(st.text(max_size=30))
def test_parser_never_raises_anything_but_parse_error(text: str) -> None:
    try:
        parse_filter(text)
    except ParseError:
        pass


def test_parser_example_and_errors_name_the_column() -> None:
    f = parse_filter('topic = "cancerTrail" && age > 20 && name prefix "Dr."')
    assert f.matches(Event({"topic": "cancerTrail", "age": 21, "name": "Dr. No"}))
    with pytest.raises(ParseError) as ei:
        parse_filter("age >> 20")
    assert ei.value.column == 6
    with pytest.raises(ParseError, match="column 5"):
        parse_filter("age ~ 3")
    with pytest.raises(ParseError, match="unterminated"):
        parse_filter('name = "abc')
    with pytest.raises(ParseError, match="empty filter"):
        parse_filter("   ")
    with pytest.raises(ParseError, match="after '&&'"):
        parse_filter("a = 1 &&")


def test_bool_and_int_constraints_are_distinct() -> None:
    assert Constraint("a", Op.EQ, True) != Constraint("a", Op.EQ, 1)
    f = Filter.of(("a", "=", True), ("a", "=", 1))
    assert len(f.constraints) == 2
    assert not f.matches(Event({"a": True})) and not f.matches(Event({"a": 1}))
    assert Constraint("a", Op.EQ, 1) == Constraint("a", Op.EQ, 1.0)  # one numeric class
