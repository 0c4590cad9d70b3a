"""CoveringPoset: roots are exactly the filters no other filter dominates (brute force)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.matching import CoveringPoset
from pubguard.model import Filter
from tests.model.strategies import filters

keys = st.integers(min_value=0, max_value=10)
ops = st.lists(
    st.one_of(st.tuples(st.just("insert"), keys, filters), st.tuples(st.just("remove"), keys)),
    max_size=30,
)


def _oracle_roots(live: dict[int, Filter], order: list[Filter]) -> set[int]:
    """Brute force: m dominates n iff m covers n and (n does not cover m, or m is older)."""
    distinct = list(dict.fromkeys(live.values()))
    age = {f: order.index(f) for f in distinct}

    def dominated(f: Filter) -> bool:
        return any(g.covers(f) and (not f.covers(g) or age[g] < age[f]) for g in distinct if g != f)

    return {k for k, f in live.items() if not dominated(f)}


@settings(max_examples=120)
@given(ops)
def test_roots_match_brute_force_after_insert_remove(seq: list[tuple]) -> None:
    p = CoveringPoset()
    live: dict[int, Filter] = {}
    order: list[Filter] = []  # when each distinct filter's node was created
    for op in seq:
        before = set(p.roots())
        if op[0] == "insert":
            _, k, f = op
            if k in live:
                p.remove(k)
                del live[k]
                order = [g for g in order if g in live.values()]
            became_root = p.insert(k, f)
            if f not in order:
                order.append(f)
            live[k] = f
            assert became_root == (
                k in _oracle_roots(live, order)
                and f not in (g for kk, g in live.items() if kk != k)
            )
        else:
            _, k = op
            new = p.remove(k)
            if k in live:
                del live[k]
                order = [g for g in order if g in live.values()]
            assert set(new) == set(p.roots()) - before
        assert set(p.roots()) == _oracle_roots(live, order)
        assert len(p) == len(live)
        for k, f in live.items():
            up = set(p.covered_by(k))
            assert all(live[u].covers(f) for u in up)
            assert set(p.parents(k)) <= up
            assert set(p.children(k)) <= set(p.covering(k))


def test_vcaps_example_and_dag_edges() -> None:
    # vcaps.txt §2.1: F2 ≺ F1 ≺ F3, F4 independent
    f3 = Filter.parse('ward = "cardiology"')
    f1 = Filter.parse('ward = "cardiology" && age > 20')
    f2 = Filter.parse('ward = "cardiology" && age > 30 && doc = "Dr. Watson"')
    f4 = Filter.parse("price < 10")
    p = CoveringPoset()
    assert p.insert("F1", f1) is True
    assert p.insert("F2", f2) is False
    assert p.insert("F4", f4) is True
    assert p.insert("F3", f3) is True
    assert p.roots() == ["F4", "F3"]
    assert p.parents("F2") == ["F1"] and p.children("F3") == ["F1"]
    assert set(p.covered_by("F2")) == {"F1", "F3"}
    assert p.remove("F3") == ["F1"]
    assert p.remove("F1") == ["F2"]
    assert sorted(p.roots()) == ["F2", "F4"]


def test_identical_filters_share_a_node() -> None:
    p = CoveringPoset()
    assert p.insert("a", Filter.parse("x > 1")) is True
    assert p.insert("b", Filter.parse("x > 1")) is False
    assert p.roots() == ["a", "b"] and p.is_root("b")
    assert p.remove("a") == []
    assert p.roots() == ["b"] and len(p) == 1


def test_equivalent_distinct_filters_older_dominates() -> None:
    p = CoveringPoset()
    p.insert("old", Filter.parse("x > 1 && x > 0"))
    assert p.insert("new", Filter.parse("x > 1")) is False
    assert p.roots() == ["old"]
    assert p.remove("old") == ["new"]


def test_unknown_key_errors() -> None:
    p = CoveringPoset()
    assert p.remove("nope") == []
    with pytest.raises(ValidationError):
        p.covered_by("nope")
    with pytest.raises(ValidationError):
        p.insert("k", "x > 1")  # type: ignore[arg-type]
