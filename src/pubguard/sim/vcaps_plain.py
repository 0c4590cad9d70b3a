"""The v-CAPS experiments' baseline (vcaps.txt §6.1): Siena-style plain routing on the same
broker tree, with the project's covering poset and indexed matcher at each broker.

Pure: nothing here does I/O or reads a clock (``timer`` is injected, to measure each broker's
match, as :meth:`pubguard.schemes.vcaps.VcapsTree.route` does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pubguard.matching.index import IndexedMatcher
from pubguard.matching.poset import CoveringPoset
from pubguard.model.events import Event
from pubguard.model.filters import Filter

__all__ = ["PlainTree"]


class PlainTree:
    """The baseline (Siena): per broker a covering poset (forward roots only) and the
    indexed matcher over its filters, keyed ``(recipient, filter id)``."""

    def __init__(self, parent: Mapping[str, str | None]) -> None:
        self.parent = dict(parent)
        self.posets = {b: CoveringPoset() for b in parent}
        self.matchers = {b: IndexedMatcher() for b in parent}
        self.root = next(b for b, p in parent.items() if p is None)

    def subscribe(
        self, broker: str, recipient: str, fid: str, f: Filter, on_new: Callable[[str], None]
    ) -> None:
        at: str | None = broker
        x = recipient
        while at is not None:
            key = (x, fid)
            if key in self.posets[at]:
                return
            on_new(at)
            root = self.posets[at].insert(key, f)
            self.matchers[at].add(key, f)
            if not root:
                return
            x, at = at, self.parent[at]

    def route(
        self,
        event: Event,
        timer: Callable[[], float] | None = None,
        costs: dict[str, float] | None = None,
    ) -> set[str]:
        """The subscribers ``event`` reaches; with ``timer`` each broker's match time is
        added to ``costs``."""
        out: set[str] = set()
        stack = [self.root]
        while stack:
            b = stack.pop()
            if timer is not None and costs is not None:
                t0 = timer()
                rs: set[str] = {k[0] for k in self.matchers[b].match(event)}  # type: ignore[index]
                costs[b] = costs.get(b, 0.0) + timer() - t0
            else:
                rs = {k[0] for k in self.matchers[b].match(event)}  # type: ignore[index]
            for r in rs:
                if r in self.posets:
                    stack.append(r)
                else:
                    out.add(r)
        return out
