"""discard_member: the dict-of-sets helper the covering table and PSGuard's token matcher share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pubguard.matching.multimap import discard_member


def test_drops_the_key_with_its_last_member() -> None:
    index: dict[str, set[int]] = {"a": {1, 2}}
    discard_member(index, "a", 1)
    assert index == {"a": {2}}
    discard_member(index, "a", 3)  # an absent member: no-op
    discard_member(index, "b", 1)  # an absent key: no-op, nothing created
    assert index == {"a": {2}}
    discard_member(index, "a", 2)
    assert index == {}


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 3)), max_size=40))
def test_never_leaves_an_empty_set(ops: list[tuple[bool, int, int]]) -> None:
    index: dict[int, set[int]] = {}
    pairs: set[tuple[int, int]] = set()
    for add, key, member in ops:
        if add:
            index.setdefault(key, set()).add(member)
            pairs.add((key, member))
        else:
            discard_member(index, key, member)
            pairs.discard((key, member))
        assert all(index.values())
        assert {(k, m) for k, ms in index.items() for m in ms} == pairs
