"""IndexedMatcher equals ReferenceMatcher on random workloads with every operator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.matching import IndexedMatcher, ReferenceMatcher
from pubguard.model import Event, Filter, Op
from tests.model.strategies import NAMES, events, filters

# exactness traps: ints beyond 2**53 do not survive float64, 0.0 == -0.0, True == 1 in Python
edge_values = st.sampled_from([2**53, 2**53 + 1, 2**60, -(2**60), 0.0, -0.0, 1, True, ""])
edge_events = st.dictionaries(st.sampled_from(NAMES), edge_values, max_size=3).map(Event)
any_events = st.one_of(events, edge_events)
keys = st.integers(min_value=0, max_value=12)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), keys, filters),
        st.tuples(st.just("remove"), keys),
        st.tuples(st.just("match"), st.lists(any_events, min_size=1, max_size=4)),
    ),
    max_size=25,
)


# small-set thresholds: numpy only, Python only (the default for these small sets), mixed
PATHS = [{"small_hits": 0, "small_rows": 0}, {}, {"small_hits": 2, "small_rows": 2}]


@pytest.mark.parametrize("paths", PATHS, ids=["numpy", "python", "mixed"])
@settings(max_examples=60)
@given(ops=steps)
def test_equals_reference_under_add_remove_sequences(
    paths: dict[str, int], ops: list[tuple]
) -> None:
    im, ref = IndexedMatcher(compact_min_dead=2, **paths), ReferenceMatcher()
    for op in ops:
        if op[0] == "add":
            im.add(op[1], op[2])
            ref.add(op[1], op[2])
        elif op[0] == "remove":
            im.remove(op[1])
            ref.remove(op[1])
        else:
            want = [ref.match(e) for e in op[1]]
            assert [im.match(e) for e in op[1]] == want
            assert im.match_batch(op[1]) == want
        assert len(im) == len(ref)


@pytest.mark.parametrize("paths", PATHS, ids=["numpy", "python", "mixed"])
@settings(max_examples=30)
@given(fs=st.lists(filters, min_size=1, max_size=30), evs=st.lists(any_events, max_size=10))
def test_bulk_build_equals_reference(
    paths: dict[str, int], fs: list[Filter], evs: list[Event]
) -> None:
    im = IndexedMatcher(enumerate(fs), **paths)
    ref = ReferenceMatcher(enumerate(fs))
    assert im.match_batch(evs) == [ref.match(e) for e in evs]
    for e in evs:
        assert im.match(e) == ref.match(e)


@pytest.mark.parametrize("paths", PATHS, ids=["numpy", "python", "mixed"])
def test_every_operator_and_type_class(paths: dict[str, int]) -> None:
    fs = {
        "eq": Filter.of(("x", "=", 2)),
        "ne": Filter.of(("x", "!=", 2)),
        "lt": Filter.of(("x", "<", 2.5)),
        "le": Filter.of(("x", "<=", 2)),
        "gt": Filter.of(("x", ">", 2)),
        "ge": Filter.of(("x", ">=", 2.0)),
        "pre": Filter.of(("s", "prefix", "Dr.")),
        "suf": Filter.of(("s", "suffix", "ho")),
        "sub": Filter.of(("s", "substring", ". W")),
        "slt": Filter.of(("s", "<", "E")),
        "ex": Filter.of(("x", "exists")),
        "bool": Filter.of(("b", "=", True)),
        "two": Filter.of(("x", ">", 1), ("x", "<", 3)),
    }
    im = IndexedMatcher(fs, **paths)
    assert im.match(Event({"x": 2})) == {"eq", "lt", "le", "ge", "ex", "two"}
    assert im.match(Event({"x": 3.5})) == {"ne", "gt", "ge", "ex"}
    assert im.match(Event({"x": "2"})) == {"ex"}  # wrong type class: only 'exists'
    assert im.match(Event({"s": "Dr. Who"})) == {"pre", "suf", "sub", "slt"}
    assert im.match(Event({"b": 1})) == set()  # a number is not a bool
    assert im.match(Event({"b": True, "y": 1})) == {"bool"}
    assert im.match(Event({})) == set()


@pytest.mark.parametrize("paths", PATHS, ids=["numpy", "python", "mixed"])
def test_huge_ints_compare_exactly(paths: dict[str, int]) -> None:
    fs = {"gt": Filter.of(("x", ">", 2**53)), "eq": Filter.of(("x", "=", 2**60))}
    im = IndexedMatcher(fs, **paths)
    e1, e2 = Event({"x": 2**53 + 1}), Event({"x": 2**60})
    assert im.match(e1) == {"gt"}
    assert im.match_batch([e1, e2]) == [{"gt"}, {"gt", "eq"}]


def test_add_replaces_and_remove_is_idempotent() -> None:
    im = IndexedMatcher()
    im.add("k", Filter.of(("x", "=", 1)))
    im.add("k", Filter.of(("x", "=", 2)))
    assert len(im) == 1 and "k" in im
    assert im.match(Event({"x": 1})) == set()
    assert im.match(Event({"x": 2})) == {"k"}
    im.remove("k")
    im.remove("k")
    assert len(im) == 0 and im.match(Event({"x": 2})) == set()


def test_compaction_keeps_answers() -> None:
    im = IndexedMatcher(compact_min_dead=3)
    for i in range(20):
        im.add(i, Filter.of(("x", ">=", i)))
    for i in range(0, 20, 2):
        im.remove(i)
    assert im.match(Event({"x": 7})) == {1, 3, 5, 7}
    assert len(im) == 10


def test_rejects_non_filter() -> None:
    with pytest.raises(ValidationError):
        IndexedMatcher().add("k", "x = 1")  # type: ignore[arg-type]


def test_batch_spans_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import pubguard.matching.index as index_mod

    monkeypatch.setattr(index_mod, "BATCH_CELLS", 8)
    # string and bool filters take the counting engine, whose batch counter is chunked
    fs = {i: Filter.of(("x", Op.GE.value, "abcd"[i])) for i in range(4)}
    fs[9] = Filter.of(("x", "prefix", "b"), ("y", "=", True))
    evs = [Event({"x": v, "y": True}) for v in ["", "a", "b", "bz", "c", "d", "e"]]
    im = IndexedMatcher(fs)
    assert im.match_batch(evs) == [ReferenceMatcher(fs).match(e) for e in evs]


def test_numeric_batch_in_small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import pubguard.matching.clusters as clusters_mod

    monkeypatch.setattr(clusters_mod, "BATCH_ROWS", 2)
    monkeypatch.setattr(clusters_mod, "BATCH_VALUES", 3)
    fs = {i: Filter.of(("x", ">=", i), ("y", "<", 10 - i)) for i in range(6)}
    fs.update({10 + i: Filter.of(("x", "=", i)) for i in range(3)})
    evs = [Event({"x": v, "y": 9 - v}) for v in range(7)] + [Event({"z": 1}), Event({"x": 2**60})]
    im = IndexedMatcher(fs)
    assert im.match_batch(evs) == [ReferenceMatcher(fs).match(e) for e in evs]


def test_repeated_constraints_on_one_run() -> None:
    # two constraints of one filter in the same sorted run: both must be counted
    fs = {
        "k": Filter.of(("s", ">", "a"), ("s", ">", "b")),
        "n": Filter.of(("x", ">", 1), ("x", ">", 2)),
    }
    for paths in PATHS:
        im = IndexedMatcher(fs, **paths)
        assert im.match(Event({"s": "c", "x": 3})) == {"k", "n"}
        assert im.match(Event({"s": "b", "x": 2})) == set()


def test_many_hits_take_the_numpy_path() -> None:
    # more satisfied constraints than SMALL_HITS / SMALL_ROWS: the vectorised engines answer
    fs = {i: Filter.of(("s", ">=", f"{i:04d}")) for i in range(600)}
    fs.update({1000 + i: Filter.of(("x", "<", i)) for i in range(600)})
    im, ref = IndexedMatcher(fs), ReferenceMatcher(fs)
    for e in (Event({"s": "0450", "x": 100}), Event({"s": "9", "x": 2**60}), Event({"x": 0.5})):
        assert im.match(e) == ref.match(e)
