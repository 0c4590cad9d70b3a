"""vcaps (ssbg-like) filters and events: shape, ranges, uniqueness, determinism."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pubguard.errors import ValidationError
from pubguard.model import Filter, Op
from pubguard.sim import VCAPS_DICTIONARY, VCAPS_OPS, vcaps_events, vcaps_filters


def test_dictionary_has_200_distinct_sorted_words() -> None:
    assert len(VCAPS_DICTIONARY) == 200
    assert len(set(VCAPS_DICTIONARY)) == 200
    assert list(VCAPS_DICTIONARY) == sorted(VCAPS_DICTIONARY)
    for w in VCAPS_DICTIONARY:  # each word parses as an attribute name
        assert Filter.parse(f"{w} = 1").constraints[0].name == w


def test_filters_shape_ranges_and_uniqueness() -> None:
    fs = vcaps_filters(5000, random.Random(7))
    assert [f.id for f in fs] == [f"f{i}" for i in range(1, 5001)]
    assert len(set(fs)) == 5000  # unique as filters (ids do not take part in equality)
    sizes = Counter(len(f.constraints) for f in fs)
    assert set(sizes) == {1, 2, 3, 4}
    assert min(sizes.values()) > 5000 / 4 * 0.8  # roughly uniform in 1-4
    ops = Counter()
    for f in fs:
        names = [c.name for c in f.constraints]
        assert len(set(names)) == len(names)
        for c in f.constraints:
            assert c.name in VCAPS_DICTIONARY
            assert c.op in VCAPS_OPS
            assert type(c.value) is int and 1 <= c.value <= 100
            ops[c.op] += 1
    assert set(ops) == set(VCAPS_OPS)
    assert Op.PREFIX not in ops


def test_filters_are_canonical_like_constructed_ones() -> None:
    for f in vcaps_filters(2000, random.Random(3)):
        g = Filter(f.constraints, id=f.id)
        assert g == f and g.constraints == f.constraints and hash(g) == hash(f)
        assert Filter.parse(str(f)) == f


def test_filters_reproducible_from_seed() -> None:
    a = [f.to_json() for f in vcaps_filters(3000, random.Random(11))]
    b = [f.to_json() for f in vcaps_filters(3000, random.Random(11))]
    c = [f.to_json() for f in vcaps_filters(3000, random.Random(12))]
    assert a == b and a != c


def test_events_shape_and_ranges() -> None:
    es = vcaps_events(3000, random.Random(5))
    assert [e.id for e in es] == [f"e{i}" for i in range(1, 3001)]
    sizes = Counter(len(e) for e in es)
    assert set(sizes) == set(range(1, 10))
    values = set()
    for e in es:
        assert set(e) <= set(VCAPS_DICTIONARY)
        for v in e.attrs.values():
            assert type(v) is int and 1 <= v <= 100
            values.add(v)
    assert values == set(range(1, 101))
    again = vcaps_events(3000, random.Random(5))
    assert [e.to_json() for e in again] == [e.to_json() for e in es]


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValidationError):
        vcaps_filters(-1, random.Random(0))
    with pytest.raises(ValidationError):
        vcaps_events(2.5, random.Random(0))  # type: ignore[arg-type]
    assert vcaps_filters(0, random.Random(0)) == []
    assert vcaps_events(0, random.Random(0)) == []
