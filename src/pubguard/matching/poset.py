"""Covering poset of filters: Siena's filters poset, v-CAPS's PFPoset and BFPoset.

Theory of operation
-------------------
vcaps.txt §2.1: brokers (BFPoset) and publishers (PFPoset) keep their filters as a DAG with an
edge ``F1 -> F2`` iff ``F2 ≺ F1`` (F1 covers F2); the *root filters* are those no other filter
covers, and a broker forwards upstream only roots (§4.1, Stage II: a subscription already
covered upstream is not propagated further).

* Identical filters (equal constraint sets, any ids) share one node carrying several keys.
* Two *distinct* filters may cover each other (``a > 1 && a > 0`` and ``a > 1``). To keep a DAG
  the earlier-inserted one *dominates* the later: ``m`` dominates ``n`` iff ``m.covers(n)``
  and (not ``n.covers(m)`` or ``m`` is older). Roots are the nodes no node dominates.
* ``Filter.covers`` is a sound syntactic test and need not be transitive, so the node keeps
  the whole dominance relation (the vcaps edge set), not only its transitive reduction; the
  reduction is computed on demand by :meth:`CoveringPoset.parents` / ``children``. Whether a
  node is a root is then exact (the property tests check it against brute force).
* ``g.covers(f)`` needs every attribute of ``g`` to occur in ``f``. Insert finds the possible
  dominators among the nodes whose attribute-name set is a subset of ``f``'s (one dictionary
  lookup per subset) and the possibly dominated among those having all of ``f``'s attributes
  (intersection of per-attribute node sets), so it never scans the whole poset when filters
  have few attributes. Removal only touches the removed node's edges.
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import combinations

from pubguard.errors import ValidationError
from pubguard.model.filters import Filter

__all__ = ["CoveringPoset"]


class CoveringPoset:
    """DAG of filters ordered by covering; ``roots()`` are the filters to forward upstream."""

    def __init__(self) -> None:
        self._next = 0
        self._node_of_filter: dict[Filter, int] = {}
        self._filter: dict[int, Filter] = {}
        self._keys: dict[int, list[Hashable]] = {}  # node -> keys, in insertion order
        self._node_of_key: dict[Hashable, int] = {}
        self._dom_by: dict[int, set[int]] = {}  # node -> nodes dominating it
        self._doms: dict[int, set[int]] = {}  # node -> nodes it dominates
        self._by_names: dict[frozenset[str], set[int]] = {}
        self._by_attr: dict[str, set[int]] = {}

    # -- updates --------------------------------------------------------------------------
    def insert(self, key: Hashable, f: Filter) -> bool:
        """Add ``f`` under ``key``; True iff it became a root (no existing filter covers it).

        Re-inserting an existing key first removes it. A filter identical to one already
        present joins that node and returns False (the identical filter covers it).
        """
        if not isinstance(f, Filter):
            raise ValidationError(f"CoveringPoset.insert needs a Filter, not {type(f).__name__}")
        if key in self._node_of_key:
            self.remove(key)
        node = self._node_of_filter.get(f)
        if node is not None:
            self._keys[node].append(key)
            self._node_of_key[key] = node
            return False
        node = self._next
        self._next += 1
        names = f.attribute_names
        dom_by = {m for m in self._subset_candidates(names) if self._filter[m].covers(f)}
        doms = {
            c
            for c in self._superset_candidates(names)
            if c not in dom_by and f.covers(self._filter[c])
        }
        self._filter[node] = f
        self._node_of_filter[f] = node
        self._keys[node] = [key]
        self._node_of_key[key] = node
        self._dom_by[node] = dom_by
        self._doms[node] = doms
        for m in dom_by:
            self._doms[m].add(node)
        for c in doms:
            self._dom_by[c].add(node)
        self._by_names.setdefault(names, set()).add(node)
        for a in names:
            self._by_attr.setdefault(a, set()).add(node)
        return not dom_by

    def remove(self, key: Hashable) -> list[Hashable]:
        """Remove ``key``; returns the keys whose filters became roots because of it."""
        node = self._node_of_key.pop(key, None)
        if node is None:
            return []
        keys = self._keys[node]
        keys.remove(key)
        if keys:
            return []
        f = self._filter.pop(node)
        del self._keys[node], self._node_of_filter[f]
        for m in self._dom_by.pop(node):
            self._doms[m].discard(node)
        new_roots: list[Hashable] = []
        for c in sorted(self._doms.pop(node)):
            below = self._dom_by[c]
            below.discard(node)
            if not below:
                new_roots.extend(self._keys[c])
        names = f.attribute_names
        self._by_names[names].discard(node)
        if not self._by_names[names]:
            del self._by_names[names]
        for a in names:
            self._by_attr[a].discard(node)
            if not self._by_attr[a]:
                del self._by_attr[a]
        return new_roots

    def _subset_candidates(self, names: frozenset[str]) -> set[int]:
        out: set[int] = set()
        if 2 ** len(names) <= 2 * len(self._by_names):
            for r in range(1, len(names) + 1):
                for sub in combinations(sorted(names), r):
                    out |= self._by_names.get(frozenset(sub), set())
        else:
            for s, nodes in self._by_names.items():
                if s <= names:
                    out |= nodes
        return out

    def _superset_candidates(self, names: frozenset[str]) -> set[int]:
        sets = sorted((self._by_attr.get(a, set()) for a in names), key=len)
        if not sets or not sets[0]:
            return set()
        out = set(sets[0])
        for s in sets[1:]:
            out &= s
        return out

    # -- queries --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._node_of_key)

    def __contains__(self, key: object) -> bool:
        return key in self._node_of_key

    def filter(self, key: Hashable) -> Filter:
        return self._filter[self._node(key)]

    def _node(self, key: Hashable) -> int:
        try:
            return self._node_of_key[key]
        except KeyError:
            raise ValidationError(f"no filter under key {key!r}") from None

    def _expand(self, nodes: set[int]) -> list[Hashable]:
        return [k for n in sorted(nodes) for k in self._keys[n]]

    def roots(self) -> list[Hashable]:
        """Keys of the root filters (covered by no other filter), oldest first."""
        return [k for n, below in self._dom_by.items() if not below for k in self._keys[n]]

    def root_filters(self) -> list[Filter]:
        return [self._filter[n] for n, below in self._dom_by.items() if not below]

    def is_root(self, key: Hashable) -> bool:
        return not self._dom_by[self._node(key)]

    def covered_by(self, key: Hashable) -> list[Hashable]:
        """Keys of every other filter that covers ``key``'s (identical filters excluded)."""
        return self._expand(self._dom_by[self._node(key)])

    def covering(self, key: Hashable) -> list[Hashable]:
        """Keys of every other filter that ``key``'s filter covers."""
        return self._expand(self._doms[self._node(key)])

    def parents(self, key: Hashable) -> list[Hashable]:
        """Immediate coverers: dominators of ``key`` not dominating another dominator."""
        up = self._dom_by[self._node(key)]
        return self._expand({p for p in up if not (self._doms[p] & up)})

    def children(self, key: Hashable) -> list[Hashable]:
        """Immediately covered: nodes dominated by ``key`` and by no node it dominates."""
        down = self._doms[self._node(key)]
        return self._expand({c for c in down if not (self._dom_by[c] & down)})
