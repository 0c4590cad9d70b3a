"""A broker tree of BFPosets driven in process: Stage II propagation, routing, unsubscription.

The paper's figures and the ``experiments vcaps`` runs need the v-CAPS state machines of
many brokers at once without the broker core's links and frames: :class:`VcapsTree` holds one
:class:`BFPoset` per broker of a spanning tree (vcaps.txt §3.1), forwards a ``T_sub`` "along
the reverse edges" (§4.1 Stage II) and routes a decoded routing header from the root
(§4.3), each broker matching with its own poset. Pure: nothing here does I/O or reads a clock
(``timer`` is injected, to measure each broker's match).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pubguard.schemes.vcaps.bfposet import BFPoset
from pubguard.schemes.vcaps.tokens import Token

__all__ = ["VcapsTree"]


class VcapsTree:
    """``parent``: broker -> its parent broker (None at the root, the broker next to P)."""

    def __init__(self, parent: Mapping[str, str | None]) -> None:
        self.parent = dict(parent)
        self.children: dict[str, list[str]] = {b: [] for b in self.parent}
        for b, p in self.parent.items():
            if p is not None:
                self.children[p].append(b)
        roots = [b for b, p in self.parent.items() if p is None]
        if len(roots) != 1:
            raise ValueError("a spanning tree has exactly one root")
        self.root = roots[0]
        self.posets: dict[str, BFPoset[str]] = {b: BFPoset() for b in self.parent}
        self.forwarded = 0  # tokens sent upstream (Stage II traffic)

    def subscribe(self, broker: str, recipient: str, token: Token) -> list[str]:
        """Stage II from ``recipient`` (a subscriber) at ``broker``; the brokers that took the
        token into their poset, in order."""
        seen: list[str] = []
        at: str | None = broker
        x = recipient
        while at is not None:
            seen.append(at)
            if not self.posets[at].insert(token, x):
                break
            self.forwarded += 1
            x, at = at, self.parent[at]
        return seen

    def unsubscribe(self, broker: str, recipient: str, handle: bytes) -> None:
        """Our extension: drop ``recipient``; re-forward what the removed filter alone covered
        (first), then withdraw it upstream."""
        at: str | None = broker
        x = recipient
        while at is not None:
            withdraw, promoted = self.posets[at].remove(handle, x)
            up = self.parent[at]
            if up is None:
                return
            for t in promoted:
                self.subscribe(up, at, t)
            if not withdraw:
                return
            x, at = at, up

    def route(
        self,
        pe: Any,
        *,
        timer: Callable[[], float] | None = None,
        costs: dict[str, float] | None = None,
    ) -> set[str]:
        """The subscribers a notification with decoded header ``pe`` reaches; with ``timer``
        each broker's match time is added to ``costs``."""
        out: set[str] = set()
        stack = [self.root]
        while stack:
            b = stack.pop()
            if timer is not None and costs is not None:
                t0 = timer()
                rs = self.posets[b].match(pe)
                costs[b] = costs.get(b, 0.0) + timer() - t0
            else:
                rs = self.posets[b].match(pe)
            for r in rs:
                if r in self.posets:
                    stack.append(r)
                else:
                    out.add(r)
        return out
