"""ForwardSet keeps its invariant and the parent's view consistent under any insert/remove order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.broker import ForwardSet
from pubguard.model import Filter
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
