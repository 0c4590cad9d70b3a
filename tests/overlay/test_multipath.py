"""The relabelled spanning trees T_k of G^ind (overlay/multipath.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.overlay.multipath import relabel_map, spanning_trees
from pubguard.overlay.resilient import independent_paths, resilient_graph
from pubguard.overlay.tree import ary_tree


@settings(max_examples=25, deadline=None)
@given(a=st.integers(2, 4), depth=st.integers(1, 3), data=st.data())
def test_trees_span_g_ind_and_give_the_theorem_paths(
    a: int, depth: int, data: st.DataObject
) -> None:
    ind = data.draw(st.integers(1, a))
    tree = ary_tree(a, depth)
    g = resilient_graph(tree, ind)
    trees = spanning_trees(tree, ind)
    for k, tk in enumerate(trees):
        assert set(tk.nodes) == set(tree.nodes)
        assert all(g.has_edge(u, v) for u, v in tk.edges)  # a spanning tree of G^ind
        sigma = relabel_map(tree, k)
        assert sorted(sigma.values()) == sorted(tree.nodes)  # a bijection
    leaf = data.draw(st.sampled_from(tree.leaves))
    theorem = list(independent_paths(tree, ind, leaf))
    # the subscriber at leaf position L attaches to sigma_k(L) in T_k; its route there is Q_k
    routes = [tk.path_from_root(relabel_map(tree, k)[leaf]) for k, tk in enumerate(trees)]
    if depth == 1:
        assert routes[0] == theorem[0]
    else:
        assert [r[:-1] for r in routes] == [q[:-1] for q in theorem]
