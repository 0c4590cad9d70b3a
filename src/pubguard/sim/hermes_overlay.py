"""Hop counts on a Hermes rendezvous overlay (hermes-encrypted-access-control.txt §5.3, Fig. 8).

The model
---------
Hermes runs over a structured overlay (Pastry), with Scribe-style rendezvous routing (§2.1):

- ``N`` brokers get uniformly random 128-bit ids (32 hex digits). A message for key ``k``
  is routed by prefix: each hop goes to a node whose id shares at least one more hex digit
  with ``k`` than the current node's (chosen uniformly among those: a Pastry routing table
  with ``b = 4`` filled at random), and, when no node shares a longer prefix, one last hop
  to the node numerically closest to ``k`` (the leaf set), which is ``k``'s *rendezvous
  node*. Routes take about ``log_16 N + 1`` hops.
- An event type's key is its type id; a subscriber joins the type's dissemination tree by
  routing towards its rendezvous node (Scribe), and the tree is the union of those routes.
- One publication costs the hops of its route from the publisher to the rendezvous node plus
  one hop per edge of the tree (each edge carries the event once).

Fig. 8 compares, for ``n`` subscriber groups (one subscriber each, on random brokers, the
publisher on another): **attribute encryption**, one event of one type whose tree reaches all
``n`` subscribers; against **emulation by event types**, one type per group, so the publisher
sends ``n`` events, each to its own rendezvous node and down its own one-subscriber tree.
The paper's emulation counts grow as ``n^2`` (251.0 at 10 groups, about ten times its
attribute count), which matches ``n`` events *each* reaching all ``n`` groups' brokers;
that count is reported too (``emulation_all``: every group's broker joins every type's tree,
as when the brokers of the groups also host subscribers of the other groups' types).
Counts are averaged over ``trials`` random placements. Pure and deterministic given ``seed``.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Final

__all__ = ["HOPS_PAPER", "HopRow", "Overlay", "fig8_rows"]

ID_DIGITS: Final = 32  # 128-bit ids as hex digits (Pastry, b = 4)
#: §5.3's figures: groups -> (attribute encryption, emulation by event types)
HOPS_PAPER: Final = {2: (7.2, 16.6), 10: (24.2, 251.0)}


class Overlay:
    """``n`` brokers with random ids and prefix routing (see the module docstring)."""

    def __init__(self, n: int, rng: random.Random) -> None:
        ids = {f"{rng.getrandbits(128):032x}" for _ in range(n)}
        while len(ids) < n:
            ids.add(f"{rng.getrandbits(128):032x}")
        self.ids = sorted(ids)
        self._ints = [int(i, 16) for i in self.ids]
        self.rng = rng

    def _prefix_range(self, prefix: str) -> tuple[int, int]:
        lo = bisect.bisect_left(self.ids, prefix)
        hi = bisect.bisect_left(self.ids, prefix + "g")  # 'g' sorts after every hex digit
        return lo, hi

    def root(self, key: str) -> str:
        """The rendezvous node: numerically closest id to ``key`` (on the ring)."""
        k = int(key, 16)
        i = bisect.bisect_left(self._ints, k)
        cands = [self._ints[i % len(self._ints)], self._ints[i - 1]]
        ring = 1 << 128
        best = min(cands, key=lambda v: min((v - k) % ring, (k - v) % ring))
        return f"{best:032x}"

    def route(self, src: str, key: str) -> list[str]:
        """The nodes a message from ``src`` to ``key`` visits, ``src`` first, root last."""
        dest = self.root(key)
        path = [src]
        cur = src
        while cur != dest:
            shared = 0
            while shared < ID_DIGITS and cur[shared] == key[shared]:
                shared += 1
            lo, hi = self._prefix_range(key[: shared + 1])
            if hi > lo:
                nxt = self.ids[self.rng.randrange(lo, hi)]
                if nxt == cur:
                    nxt = dest
            else:
                nxt = dest  # the leaf set: straight to the numerically closest node
            path.append(nxt)
            cur = nxt
        return path

    def random_node(self) -> str:
        return self.ids[self.rng.randrange(len(self.ids))]

    def random_key(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def publication_hops(self, publisher: str, key: str, subscribers: list[str]) -> int:
        """Route to the rendezvous node, then one hop per edge of the Scribe tree."""
        edges: set[tuple[str, str]] = set()
        for s in subscribers:
            p = self.route(s, key)
            edges.update(zip(p, p[1:], strict=False))
        return len(self.route(publisher, key)) - 1 + len(edges)


@dataclass(frozen=True, slots=True)
class HopRow:
    groups: int
    attribute: float
    emulation: float
    emulation_all: float


def fig8_rows(
    groups: list[int], *, brokers: int = 2000, trials: int = 20, seed: int = 1
) -> list[HopRow]:
    """Mean hop counts per publication for each number of subscriber groups."""
    rng = random.Random(seed)
    ov = Overlay(brokers, rng)
    rows = []
    for n in groups:
        att = emu = emu_all = 0
        for _ in range(trials):
            pub = ov.random_node()
            subs = [ov.random_node() for _ in range(n)]
            att += ov.publication_hops(pub, ov.random_key(), subs)
            keys = [ov.random_key() for _ in subs]
            emu += sum(ov.publication_hops(pub, k, [s]) for k, s in zip(keys, subs, strict=True))
            emu_all += sum(ov.publication_hops(pub, k, subs) for k in keys)
        rows.append(HopRow(n, att / trials, emu / trials, emu_all / trials))
    return rows
