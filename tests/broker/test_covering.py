"""ForwardSet keeps its invariant and the parent's view consistent under any insert/remove order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.broker import ForwardSet
from pubguard.model import Filter
from pubguard.schemes.base import equality_anchors as filter_anchors
from tests.model.strategies import events, filters

ops = st.lists(
    st.tuples(st.booleans(), st.integers(min_value=0, max_value=7), filters),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60)
@given(ops=ops, probes=st.lists(events, max_size=10))
def test_forward_set_invariant_and_upstream_view(
    ops: list[tuple[bool, int, Filter]], probes: list
) -> None:
    fs = ForwardSet(lambda a, b: a.covers(b))
    upstream: set[int] = set()  # what the parent holds, replayed from the returned deltas
    live: dict[int, Filter] = {}
    for insert, key, f in ops:
        if insert and key not in live:
            added, removed = fs.insert(key, f)
            live[key] = f
        else:
            added, removed = fs.remove(key)
            live.pop(key, None)
        assert not set(added) & set(removed)
        upstream |= set(added)
        upstream -= set(removed)
        fs.check_invariant()
        assert upstream == set(fs.forwarded)
        assert set(fs.forwarded) <= set(live)
    # routing consequence: every event a live filter matches is matched by a forwarded one
    for e in probes:
        if any(f.matches(e) for f in live.values()):
            assert any(live[k].matches(e) for k in upstream)


def test_restore_uses_the_persisted_forwarded_set() -> None:
    wide, narrow = Filter.parse("x > 1"), Filter.parse("x > 5")
    fs = ForwardSet(lambda a, b: a.covers(b))
    # persisted F says both were forwarded (e.g. narrow arrived first): keep exactly that
    assert fs.restore([("n", narrow), ("w", wide)], ["n", "w"]) == []
    assert set(fs.forwarded) == {"n", "w"}
    # a key nobody covers joins F and is reported so the caller forwards it
    fs2 = ForwardSet(lambda a, b: a.covers(b))
    assert fs2.restore([("n", narrow), ("w", wide)], []) == ["n", "w"]
    fs2.check_invariant()


small_constraint = st.builds(
    lambda name, op, v: f"{name} {op} {v}",
    st.sampled_from(["a", "b"]),
    st.sampled_from(["=", "!=", ">", "<=", "prefix", "exists"]),
    st.sampled_from(["1", "2", "1.0", '"x"', '"xy"', "true"]),
)
small_filters = st.lists(small_constraint, min_size=1, max_size=3).flatmap(
    lambda cs: st.just(
        " && ".join(c if " exists " not in c else c.split(" exists")[0] + " exists" for c in cs)
    )
)


def _parse(text: str) -> Filter | None:
    try:
        return Filter.parse(text)
    except Exception:  # a combination the grammar refuses (e.g. prefix of a number)
        return None


@settings(max_examples=150)
@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 9), st.one_of(filters, small_filters.map(_parse))),
        min_size=1,
        max_size=40,
    )
)
def test_anchor_index_gives_exactly_the_full_scans_results(
    ops: list[tuple[bool, int, Filter | None]],
) -> None:
    # the equality-anchor index only narrows the scans: same deltas, same witnesses, same F
    full = ForwardSet(lambda a, b: a.covers(b))
    fast = ForwardSet(lambda a, b: a.covers(b), filter_anchors)
    live: set[int] = set()
    for insert, key, f in ops:
        if f is None:
            continue
        if insert and key not in live:
            assert fast.insert(key, f) == full.insert(key, f)
            live.add(key)
        else:
            assert fast.remove(key) == full.remove(key)
            live.discard(key)
        fast.check_invariant()
        assert list(fast.forwarded) == list(full.forwarded)
        assert all(fast.witness(k) == full.witness(k) for k in live)
    items = list(full.filters.items())
    assert fast.restore(items, list(full.forwarded)[::2]) == full.restore(
        items, list(full.forwarded)[::2]
    )
    assert list(fast.forwarded) == list(full.forwarded)


def test_inserting_unrelated_topics_is_linear_not_quadratic() -> None:
    calls = 0

    def covers(a: Filter, b: Filter) -> bool:
        nonlocal calls
        calls += 1
        return a.covers(b)

    n = 2000
    fs = ForwardSet(covers, filter_anchors)
    for i in range(n):
        assert fs.insert(i, Filter.parse(f'topic = "s{i}"')) == ([i], [])
    assert calls == 0  # no member can cover another topic: nothing to check
    assert fs.insert("dup", Filter.parse('topic = "s7" && price > 3')) == ([], [])
    assert fs.witness("dup") == 7 and calls == 1
    wide = Filter.parse("topic exists")
    assert fs.insert("all", wide) == (["all"], list(range(n)))  # evicts every topic filter
    fs.check_invariant()
