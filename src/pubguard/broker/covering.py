"""Which subscriptions a broker forwards to its parent: Siena covering (eventguard.txt §2.1).

Theory of operation
-------------------
"If filter f is not covered by any previously subscribed filters at node n then node n forwards
subscribe(n, f) to its parent node" (eventguard.txt §2.1). :class:`ForwardSet` keeps the set
``F`` of forwarded keys and, for every other key, a *witness*: a member of ``F`` whose filter
was checked, directly, to cover it. The invariant, on which routing correctness rests, is

    every filter is in F, or its witness is in F and ``covers(F[witness], filter)`` held.

It never relies on transitivity of ``covers`` (a sound syntactic check need not be transitive):
every witness link is a direct check. ``covers`` is the scheme's (``BrokerScheme.covers``), so
a profile whose filters are opaque tokens simply gets less suppression.

- insert(k, f): covered by some member of F -> record the witness, nothing to send. Otherwise
  k joins F (send subscribe), and members of F that f covers, together with all they witness,
  are *evicted* (send unsubscribe for them) - Siena's optional clean-up, which keeps the
  parent's table small.
- remove(k): k not in F -> forget it. k in F -> send unsubscribe for k, and re-home each key it
  witnessed: to another member of F that covers it, else it joins F (send subscribe). Keys
  promoted in the same step may evict each other before anything is sent.

Finding a witness and finding the members to evict each scanned all of F, so inserting n
filters none of which covers another (32 subscribers to 32 topics, or 10,000) cost O(n^2)
``covers`` calls. With ``anchors`` (the filter's equality constraints as ``(name, value)``
pairs: the scheme's ``BrokerScheme.filter_anchors``) the scans look only where a cover can be:
an equality constraint ``a = v`` covers no constraint but ``a = v`` (``Constraint.covers``), so
a member whose anchors include ``(a, v)`` can cover only a filter that has ``(a, v)`` too, and
a filter with anchor ``(a, v)`` can cover only members that have it. Members of F are kept by
one of their anchors (or with those without one), and candidates are tried in F's insertion
order, so the result (which witness, which evictions, in what order) is exactly the full
scan's. The anchors only narrow the scans; every witness is still a direct ``covers`` check,
and a scheme whose ``covers`` is looser than that rule would merely get less suppression.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from pubguard.matching.multimap import discard_member

__all__ = ["ForwardSet"]

Covers = Callable[[Any, Any], bool]
Anchors = Callable[[Any], "frozenset[tuple[str, Hashable]] | None"]


class ForwardSet:
    """The forwarded set F with covering witnesses. Keys are any hashables."""

    def __init__(self, covers: Covers, anchors: Anchors | None = None) -> None:
        self._covers = covers
        self._anchors = anchors
        self.filters: dict[Hashable, Any] = {}  # every key, insertion ordered
        self.forwarded: dict[Hashable, Any] = {}  # F, insertion ordered
        self._witness: dict[Hashable, Hashable] = {}  # non-F key -> member of F
        self._deps: dict[Hashable, set[Hashable]] = {}  # member of F -> keys it witnesses
        # the anchor index over F (only with ``anchors``; see the module docstring)
        self._pos: dict[Hashable, int] = {}  # member -> when it joined F (F's order)
        self._tick = 0
        self._pairs: dict[Hashable, frozenset[tuple[str, Hashable]] | None] = {}
        self._by_anchor: dict[tuple[str, Hashable], set[Hashable]] = {}  # one pair per member
        self._unanchored: set[Hashable] = set()  # members without a pair
        self._having: dict[tuple[str, Hashable], set[Hashable]] = {}  # every pair of members

    def __len__(self) -> int:
        return len(self.filters)

    def __contains__(self, key: object) -> bool:
        return key in self.filters

    def witness(self, key: Hashable) -> Hashable | None:
        return self._witness.get(key)

    def insert(self, key: Hashable, f: Any) -> tuple[list[Hashable], list[Hashable]]:
        """Add ``key``; returns (keys to subscribe upward, keys to unsubscribe upward)."""
        if key in self.filters:
            raise ValueError(f"duplicate key {key!r}")
        self.filters[key] = f
        w = self._find_witness(f, exclude=key)
        if w is not None:
            self._witness[key] = w
            self._deps[w].add(key)
            return [], []
        self._join(key, f)
        return [key], self._evict_covered_by(key, f, candidates=self._coverable_by(f))

    def remove(self, key: Hashable) -> tuple[list[Hashable], list[Hashable]]:
        """Drop ``key``; returns (keys to subscribe upward, keys to unsubscribe upward)."""
        if key not in self.filters:
            return [], []
        del self.filters[key]
        if key not in self.forwarded:
            w = self._witness.pop(key)
            self._deps[w].discard(key)
            return [], []
        self._leave(key)
        orphans = self._deps.pop(key)
        promoted: list[Hashable] = []
        for o in [k for k in self.filters if k in orphans]:  # insertion order: deterministic
            f = self.filters[o]
            w = self._find_witness(f, exclude=o)
            if w is not None:
                self._witness[o] = w
                self._deps[w].add(o)
                continue
            del self._witness[o]
            self._join(o, f)
            for gone in self._evict_covered_by(o, f, candidates=promoted):
                promoted.remove(gone)
            promoted.append(o)
        return promoted, [key]

    def restore(
        self, items: Iterable[tuple[Hashable, Any]], forwarded: Iterable[Hashable]
    ) -> list[Hashable]:
        """Rebuild from persisted state: ``items`` in insertion order and the persisted F.

        Returns keys that had to join F because no persisted member covered them (normally
        none); the caller forwards those.
        """
        self.__init__(self._covers, self._anchors)  # type: ignore[misc]
        fwd = set(forwarded)
        items = list(items)
        for k, f in items:
            self.filters[k] = f
            if k in fwd:
                self._join(k, f)
        extra: list[Hashable] = []
        for k, f in items:
            if k in self.forwarded:
                continue
            w = self._find_witness(f, exclude=k)
            if w is None:
                self._join(k, f)
                extra.append(k)
            else:
                self._witness[k] = w
                self._deps[w].add(k)
        return extra

    def check_invariant(self) -> None:
        """Assert the module invariant (used by tests)."""
        for k, f in self.filters.items():
            if k in self.forwarded:
                assert k not in self._witness
                continue
            w = self._witness[k]
            assert w in self.forwarded, (k, w)
            assert k in self._deps[w]
            assert self._covers(self.forwarded[w], f), (w, k)

    # -- helpers ----------------------------------------------------------------------------
    def _join(self, k: Hashable, f: Any) -> None:
        """``k`` joins F (at its end)."""
        self.forwarded[k] = f
        self._deps[k] = set()
        if self._anchors is None:
            return
        self._pos[k] = self._tick
        self._tick += 1
        pairs = self._pairs[k] = self._anchors(f)
        if not pairs:
            self._unanchored.add(k)
            return
        self._by_anchor.setdefault(min(pairs, key=repr), set()).add(k)
        for p in pairs:
            self._having.setdefault(p, set()).add(k)

    def _leave(self, k: Hashable) -> None:
        """``k`` leaves F."""
        del self.forwarded[k]
        if self._anchors is None:
            return
        del self._pos[k]
        pairs = self._pairs.pop(k)
        if not pairs:
            self._unanchored.discard(k)
            return
        discard_member(self._by_anchor, min(pairs, key=repr), k)
        for p in pairs:
            discard_member(self._having, p, k)

    def _in_order(self, keys: Iterable[Hashable]) -> list[Hashable]:
        pos = self._pos
        return sorted(keys, key=pos.__getitem__)

    def _may_cover(self, f: Any) -> Iterable[Hashable]:
        """Members of F that may cover ``f``, in F's order (all of F without anchors)."""
        pairs = None if self._anchors is None else self._anchors(f)
        if pairs is None:
            return self.forwarded
        found = set(self._unanchored)
        for p in pairs:
            found |= self._by_anchor.get(p, set())
        return self._in_order(found)

    def _coverable_by(self, f: Any) -> list[Hashable]:
        """Members of F that ``f`` may cover, in F's order (all of F without anchors)."""
        pairs = None if self._anchors is None else self._anchors(f)
        if not pairs:
            return list(self.forwarded)
        having = self._having
        smallest = min((having.get(p, set()) for p in pairs), key=len)
        return self._in_order(smallest)

    def _find_witness(self, f: Any, *, exclude: Hashable) -> Hashable | None:
        covers = self._covers
        forwarded = self.forwarded
        for k in self._may_cover(f):
            if k != exclude and covers(forwarded[k], f):
                return k
        return None

    def _evict_covered_by(
        self, new: Hashable, f: Any, *, candidates: list[Hashable]
    ) -> list[Hashable]:
        """Move members of F among ``candidates`` that ``f`` covers (with all they witness)
        under ``new``; returns the evicted keys."""
        covers = self._covers
        evicted: list[Hashable] = []
        for m in candidates:
            if m == new or m not in self.forwarded:
                continue
            deps = self._deps[m]
            if not covers(f, self.forwarded[m]):
                continue
            if not all(covers(f, self.filters[d]) for d in deps):
                continue  # keeping m in F is correct, just not minimal
            self._leave(m)
            del self._deps[m]
            self._witness[m] = new
            self._deps[new].add(m)
            for d in deps:
                self._witness[d] = new
                self._deps[new].add(d)
            evicted.append(m)
        return evicted
