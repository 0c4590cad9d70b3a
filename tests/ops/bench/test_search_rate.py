"""The maximum-throughput search (eventguard.txt §6.2.2) against a node of known capacity: a
step saturates above the capacity, and at chosen rates a step below it saturates once (a
scheduling stall on a shared machine). Property tests: the search brackets the capacity, and
confirmation makes a single stall cost nothing while a real overload still stops it."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from pubguard.ops.bench.network import Search, search_rate


class Node:
    """Saturates at rates above ``capacity``; the first step at each rate in ``stalls``
    saturates too."""

    def __init__(
        self, capacity: float, stalls: frozenset[float] | set[float] = frozenset()
    ) -> None:
        self.capacity = capacity
        self.stalls = set(stalls)
        self.steps: list[tuple[float, bool]] = []

    async def step(self, q: float, again: bool) -> bool:
        self.steps.append((q, again))
        if q in self.stalls:
            self.stalls.discard(q)
            return True
        return q > self.capacity


def _search(node: Node, *, confirm: bool = True, bisections: int = 6) -> Search:
    return asyncio.run(
        search_rate(node.step, max_rate=200_000, bisections=bisections, confirm=confirm)
    )


@given(st.floats(min_value=1_000, max_value=150_000))
def test_the_search_brackets_the_capacity(capacity: float) -> None:
    found = _search(Node(capacity))
    assert found.bad is not None
    assert found.good <= capacity < found.bad
    # six bisections of a doubling step: within 1/64 of the bracket's start
    assert found.bad - found.good <= found.bad / 64 + 1e-6
    assert found.unconfirmed == 0


def test_one_stall_stops_an_unconfirmed_search_short() -> None:
    found = _search(Node(20_000, {16_000.0}), confirm=False)
    assert found.bad == 16_000 and found.good < 16_000


@given(
    st.floats(min_value=4_000, max_value=150_000),
    st.sets(st.sampled_from([1_000.0, 2_000.0, 4_000.0, 8_000.0, 16_000.0, 32_000.0])),
)
def test_confirmation_makes_single_stalls_cost_nothing(capacity: float, stalls: set[float]) -> None:
    clean = _search(Node(capacity))
    node = Node(capacity, stalls)
    found = _search(node)
    assert (found.good, found.bad) == (clean.good, clean.bad)
    hit = {q for q in stalls if q <= capacity}  # stalls at rates the search stepped on
    assert found.unconfirmed == len(hit & {q for q, _ in node.steps})
    # every saturated first step was run again at its rate
    firsts = [i for i, (q, again) in enumerate(node.steps) if not again]
    for i in firsts:
        q = node.steps[i][0]
        saturated = q > capacity or q in hit
        followed = i + 1 < len(node.steps) and node.steps[i + 1] == (q, True)
        assert followed == saturated


def test_a_search_that_never_saturates_reports_no_bad_rate() -> None:
    found = _search(Node(1e9))  # doubles to 128,000, then bisects towards max_rate
    assert found.bad is None and 128_000 < found.good <= 200_000
