"""Trees: a-ary builder, edge lists, validation."""

from __future__ import annotations

import pytest

from pubguard.errors import ValidationError
from pubguard.overlay import ary_tree, tree_from_edges


@pytest.mark.parametrize(
    ("a", "depth", "size"), [(1, 0, 1), (2, 2, 7), (3, 2, 13), (2, 3, 15), (1, 4, 5)]
)
def test_ary_tree_sizes_and_shape(a: int, depth: int, size: int) -> None:
    t = ary_tree(a, depth)
    assert len(t) == size and len(t.edges) == size - 1
    assert t.root == "b0"
    assert max(t.depth(n) for n in t.nodes) == depth
    assert all(len(t.children[n]) in (0, a) for n in t.nodes)
    assert t.to_networkx().number_of_edges() == size - 1


def test_paths_and_siblings() -> None:
    t = ary_tree(2, 2)
    assert t.path_from_root("b6") == ["b0", "b2", "b6"]
    assert t.siblings("b5") == ("b5", "b6")
    assert t.siblings("b0") == ("b0",)
    assert t.leaves == ["b3", "b4", "b5", "b6"]


def test_edge_lists_directed_and_undirected() -> None:
    t = tree_from_edges([("r", "a"), ("r", "b"), ("a", "c")])
    assert t.root == "r" and t.parent["c"] == "a"
    u = tree_from_edges([["a", "r"], ["c", "a"], ["r", "b"]], root="r")
    assert u.parent == {"r": None, "a": "r", "b": "r", "c": "a"}
    assert tree_from_edges([], nodes=["solo"]).nodes == ("solo",)


@pytest.mark.parametrize(
    ("edges", "root", "fragment"),
    [
        ([("a", "b"), ("b", "a")], None, "cycle"),
        ([("a", "b"), ("c", "b")], None, "two parents"),
        ([("a", "b"), ("c", "d")], None, "exactly one root"),
        ([("a", "a")], None, "self-loop"),
        ([("a", "b"), ("b", "c"), ("c", "a")], "a", "cycle"),
        ([("a", "b"), ("c", "d")], "a", "not connected"),
        ([("a", "b")], "z", "not in the topology"),
        ([("a",)], None, "pair"),
        ([("a", 3)], None, "strings"),
        ([], None, "at least one node"),
        ([("a", "b"), ("a", "b")], "a", "duplicate"),
    ],
)
def test_bad_topologies_are_refused(edges: list, root: str | None, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        tree_from_edges(edges, root=root)


@pytest.mark.parametrize(("a", "depth"), [(0, 1), (2, -1), (True, 2), (10, 10)])
def test_bad_ary_parameters(a: int, depth: int) -> None:
    with pytest.raises(ValidationError):
        ary_tree(a, depth)
