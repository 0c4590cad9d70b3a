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
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

__all__ = ["ForwardSet"]

Covers = Callable[[Any, Any], bool]


class ForwardSet:
    """The forwarded set F with covering witnesses. Keys are any hashables."""

    def __init__(self, covers: Covers) -> None:
        self._covers = covers
        self.filters: dict[Hashable, Any] = {}  # every key, insertion ordered
        self.forwarded: dict[Hashable, Any] = {}  # F, insertion ordered
        self._witness: dict[Hashable, Hashable] = {}  # non-F key -> member of F
        self._deps: dict[Hashable, set[Hashable]] = {}  # member of F -> keys it witnesses

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
        self.forwarded[key] = f
        self._deps[key] = set()
        return [key], self._evict_covered_by(key, f, candidates=list(self.forwarded))

    def remove(self, key: Hashable) -> tuple[list[Hashable], list[Hashable]]:
        """Drop ``key``; returns (keys to subscribe upward, keys to unsubscribe upward)."""
        if key not in self.filters:
            return [], []
        del self.filters[key]
        if key not in self.forwarded:
            w = self._witness.pop(key)
            self._deps[w].discard(key)
            return [], []
        del self.forwarded[key]
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
            self.forwarded[o] = f
            self._deps[o] = set()
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
        self.__init__(self._covers)  # type: ignore[misc]
        fwd = set(forwarded)
        items = list(items)
        for k, f in items:
            self.filters[k] = f
            if k in fwd:
                self.forwarded[k] = f
                self._deps[k] = set()
        extra: list[Hashable] = []
        for k, f in items:
            if k in self.forwarded:
                continue
            w = self._find_witness(f, exclude=k)
            if w is None:
                self.forwarded[k] = f
                self._deps[k] = set()
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
    def _find_witness(self, f: Any, *, exclude: Hashable) -> Hashable | None:
        covers = self._covers
        for k, g in self.forwarded.items():
            if k != exclude and covers(g, f):
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
            del self.forwarded[m]
            del self._deps[m]
            self._witness[m] = new
            self._deps[new].add(m)
            for d in deps:
                self._witness[d] = new
                self._deps[new].add(d)
            evicted.append(m)
        return evicted
