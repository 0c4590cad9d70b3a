"""G^ind and independent paths (eventguard.txt §5.2, psguard.txt §4.2.1), path choice, entropy."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.overlay import (
    apparent_frequencies,
    ary_tree,
    choose_paths,
    disjoint_paths,
    entropy,
    ind_for_frequencies,
    independent_paths,
    is_independent,
    resilient_graph,
    sibling,
)


def test_figure_4_binary_tree_with_ind_2() -> None:
    t = ary_tree(2, 3)
    g = resilient_graph(t, 2)
    # "one additional edge to every subscriber and every node" below depth 1
    below = [n for n in t.nodes if t.depth(n) >= 2]
    assert g.number_of_edges() == len(t.edges) + len(below)
    assert g.has_edge("b7", sibling(t, "b3", 1)) and sibling(t, "b3", 1) == "b4"


@settings(max_examples=40)
@given(a=st.integers(2, 4), depth=st.integers(1, 4), data=st.data())
def test_theorem_5_2_paths_exist_and_are_independent(
    a: int, depth: int, data: st.DataObject
) -> None:
    t = ary_tree(a, depth)
    ind = data.draw(st.integers(1, a))
    g = resilient_graph(t, ind)
    target = data.draw(st.sampled_from(t.nodes[1:]))
    paths = list(independent_paths(t, ind, target))
    assert all(p[0] == t.root and p[-1] == target for p in paths)
    assert all(g.has_edge(u, v) for p in paths for u, v in zip(p, p[1:], strict=False))
    assert is_independent(paths)
    expected = 1 if t.depth(target) == 1 else ind
    assert len(paths) == expected
    # networkx agrees there are at least that many node-disjoint paths
    assert len(disjoint_paths(g, t.root, target)) >= expected


def test_plain_tree_has_one_path_and_resilience_helps() -> None:
    t = ary_tree(3, 3)
    assert len(disjoint_paths(resilient_graph(t, 1), "b0", "b39")) == 1
    assert len(disjoint_paths(resilient_graph(t, 3), "b0", "b39")) == 3


def test_is_independent_detects_shared_nodes() -> None:
    assert is_independent([["p", "a", "s"], ["p", "b", "s"]])
    assert not is_independent([["p", "a", "s"], ["p", "a", "c", "s"]])
    assert not is_independent([["p", "a", "s"], ["q", "b", "s"]])


def test_ind_larger_than_arity_is_refused() -> None:
    with pytest.raises(ValidationError):
        resilient_graph(ary_tree(2, 3), 3)
    with pytest.raises(ValidationError):
        list(independent_paths(ary_tree(2, 2), 0, "b3"))


def test_choose_paths_is_uniform_and_seeded() -> None:
    paths = [["p", "a", "s"], ["p", "b", "s"], ["p", "c", "s"]]
    rng = random.Random(5)
    counts = {i: 0 for i in range(3)}
    for _ in range(3000):
        [p] = choose_paths(paths, rng)
        counts[paths.index(p)] += 1
    assert all(900 < c < 1100 for c in counts.values())
    assert choose_paths(paths, random.Random(1), 2) == choose_paths(paths, random.Random(1), 2)
    with pytest.raises(ValidationError):
        choose_paths(paths, rng, 4)


def test_multi_path_flattens_apparent_frequencies() -> None:
    # psguard.txt §4.2: ind_t = tau * lambda_t makes lambda'_t nearly constant, S_app -> S_max
    freqs = {"t1": 0.5, "t2": 0.25, "t3": 0.125, "t4": 0.125}
    ind = ind_for_frequencies(freqs, tau=8, ind_max=8)
    assert ind == {"t1": 4, "t2": 2, "t3": 1, "t4": 1}
    app = apparent_frequencies(freqs, ind)
    assert app == pytest.approx({t: 0.25 for t in freqs})
    assert entropy(app) == pytest.approx(math.log(4))
    assert entropy(freqs) < entropy(app)
    capped = apparent_frequencies(freqs, ind_for_frequencies(freqs, tau=8, ind_max=2))
    assert entropy(freqs) < entropy(capped) < math.log(4)
