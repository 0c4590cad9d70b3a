"""SRV-fast's search plan: a broker's compacted poset laid out for the codeword tests.

Theory of operation
-------------------
Under SRV-fast a broker tests each filter it holds against a notification's ``<n, V>``:
``PRF(k_f, n) ∈ V``. vcaps.txt §5.5 gives two heuristics for SRV's search, and both apply
here unchanged:

(i) test a filter only when every held filter covering it matched: covering is sound, so a
    notification matching a filter matches every filter covering it, and one unmatched cover
    rules the filter out without a PRF;
(ii) stop once every recipient group already receives (only when every recipient has one).

:func:`fast_plan` lays the compacted poset out once (cached by the broker until its poset
changes): the filters in an order where each comes after its held covers (Kahn's algorithm
over the covering edges; a cycle of mutually covering filters keeps only its forward
edges, which prunes less and stays sound), each filter's covers as earlier indices, its
recipients, and its recipient groups as small ints. :func:`search` is the reference loop over
that plan; the native kernel (``VcapsKeys`` in ``native/src/vcaps.rs``) runs the same loop
over the same plan, so both backends return the same indices on every input.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["FastPlan", "fast_plan", "search"]

R = TypeVar("R", bound=Hashable)


@dataclass(slots=True)
class FastPlan(Generic[R]):
    """The filters in search order (see the module docstring)."""

    handles: list[bytes]
    covers: list[list[int]]  # held covers, as indices below the filter's own
    recipients: list[tuple[R, ...]]
    groups: list[list[int]] | None  # recipient groups as ints; None: heuristic (ii) is off
    n_groups: int
    native: Any = field(default=None, repr=False)  # the VcapsKeys of this plan (cached)


def fast_plan(
    active: Mapping[bytes, tuple[R, ...]],
    up: Mapping[bytes, set[bytes]],
    down: Mapping[bytes, set[bytes]],
    group: Callable[[R], Hashable | None] | None,
) -> FastPlan[R]:
    """The plan of a compacted poset: ``active`` (handle -> recipients), the held covering
    relation (``up``: covers of a handle, ``down``: what it covers), and the recipients'
    ``group`` (None: some recipient has no group, heuristic (ii) is off)."""
    indeg = {h: sum(1 for p in up[h] if p in active) for h in active}
    order = [h for h in active if not indeg[h]]
    i = 0
    while i < len(order):
        for c in down[order[i]]:
            if c in indeg:
                indeg[c] -= 1
                if not indeg[c]:
                    order.append(c)
        i += 1
    if len(order) < len(active):  # mutually covering filters: the rest in poset order
        placed = set(order)
        order += [h for h in active if h not in placed]
    pos = {h: j for j, h in enumerate(order)}
    covers = [
        sorted(k for p in up[h] if 0 <= (k := pos.get(p, -1)) < j) for j, h in enumerate(order)
    ]
    recipients = [active[h] for h in order]
    groups: list[list[int]] | None = None
    gid: dict[Hashable, int] = {}
    if group is not None:
        groups = []
        for rs in recipients:
            gs = {gid.setdefault(g, len(gid)) for g in map(group, rs) if g is not None}
            groups.append(sorted(gs))
    return FastPlan(order, covers, recipients, groups, len(gid))


def search(plan: FastPlan[Any], hit: Callable[[int], bool]) -> list[int]:
    """The reference loop: the indices ``i`` with ``hit(i)`` (``PRF(k_i, n) ∈ V``) that
    heuristics (i) and (ii) reach, in plan order."""
    covers, groups = plan.covers, plan.groups
    matched = [False] * len(plan.handles)
    reached = [False] * plan.n_groups
    left = plan.n_groups
    out: list[int] = []
    for i in range(len(plan.handles)):
        if not all(matched[j] for j in covers[i]) or not hit(i):
            continue  # (i): a held cover did not match
        matched[i] = True
        out.append(i)
        if groups is not None:
            for g in groups[i]:
                if not reached[g]:
                    reached[g] = True
                    left -= 1
            if not left:
                break  # (ii): every recipient group is reached
    return out
