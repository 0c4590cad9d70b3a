"""The plain profile's two faces and their conformance to the hook interface."""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.model import Event, Filter
from pubguard.schemes import (
    BrokerScheme,
    ClientScheme,
    LinearMatcher,
    PlainScheme,
    SchemeRegistry,
)
from tests.model.strategies import events, filters

P = PlainScheme()


def test_plain_implements_both_protocols() -> None:
    assert isinstance(P, BrokerScheme) and isinstance(P, ClientScheme)


@settings(max_examples=60)
@given(f=filters, e=events)
def test_protect_then_decode_preserves_matching_and_covering(f: Filter, e: Event) -> None:
    pf = P.decode_filter(P.protect_filter(f, now=0).filter)
    assert pf == f
    pe = P.protect_event(e, now=0, rng=random.Random(1))
    assert P.broker_match(pf, P.decode_event(pe.routing)) == f.matches(e)
    assert P.covers(pf, pf)


def test_event_round_trip_and_seeded_ids() -> None:
    e = Event({"sym": "IBM", "price": 122}, type="quote", payload=b"\x00body")
    pe = P.protect_event(e, now=0, rng=random.Random(3))
    assert pe.event_id == P.protect_event(e, now=0, rng=random.Random(3)).event_id
    assert len(pe.event_id) == 32 and pe.body == b"\x00body"
    back = P.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=0)
    assert back == Event(e.attrs, id=pe.event_id, type="quote", payload=b"\x00body")
    assert P.protect_event(Event({"a": 1}, id="mine"), now=0).event_id == "mine"


@pytest.mark.parametrize(
    "wire",
    [
        [],
        {},
        {"constraints": "a > 1"},
        {"constraints": []},
        {"constraints": [["a", "??", 1]]},
        {"constraints": [["a", ">", 1]], "id": "x"},
        {"constraints": [["a", "prefix", 1]]},
    ],
)
def test_decode_filter_is_strict(wire: object) -> None:
    with pytest.raises(ValidationError):
        P.decode_filter(wire)  # type: ignore[arg-type]


def test_decode_event_refuses_bad_values() -> None:
    with pytest.raises(ValidationError):
        P.decode_event({"a": [1, 2]})
    with pytest.raises(ValidationError):
        P.decode_event({"a": float("inf")})


def test_matcher_and_linear_matcher_agree() -> None:
    fs = {i: Filter.parse(t) for i, t in enumerate(["a > 1", "a > 5 && b = 1", 'c prefix "x"'])}
    m, lin = P.new_matcher(), LinearMatcher(P.broker_match)
    for k, f in fs.items():
        m.add(k, f)
        lin.add(k, f)
    for e in [Event({"a": 3}), Event({"a": 9, "b": 1}), Event({"c": "xy"}), Event({"d": 1})]:
        assert m.match(e) == lin.match(e)
    lin.remove(0)
    assert len(lin) == 2


def test_registry_refuses_duplicates_and_nameless() -> None:
    reg = SchemeRegistry([P])
    assert "plain" in reg and reg.get("nope") is None and reg.profiles == ("plain",)
    with pytest.raises(ValidationError):
        reg.register(PlainScheme())

    class Nameless:
        profile = ""

    with pytest.raises(ValidationError):
        reg.register(Nameless())  # type: ignore[arg-type]


@settings(max_examples=100)
@given(
    st.dictionaries(
        st.text(max_size=3),
        st.one_of(
            st.integers(),
            st.floats(),
            st.text(max_size=3),
            st.booleans(),
            st.none(),
            st.binary(max_size=2),
            st.lists(st.integers(), max_size=2),
        ),
        max_size=4,
    )
)
def test_decode_event_checks_as_event_does(routing: dict) -> None:
    # the fast check of the broker hot path accepts exactly what Event accepts
    for r in (routing, MappingProxyType(dict(routing))):
        try:
            want = dict(Event(dict(r)).attrs)
        except ValidationError:
            with pytest.raises(ValidationError):
                P.decode_event(r)
            continue
        got = P.decode_event(r)
        assert dict(got) == want and list(got) == list(want)
        with pytest.raises(TypeError):
            got["x"] = 1  # type: ignore[index]
