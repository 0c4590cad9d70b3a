"""A steady broker-computation figure for vcaps.txt §6 (Fig. 5's broker column, and the goals
"RV within 10 % of plain" and "SRV-fast at most 2x RV for popular notifications").

Theory of operation
-------------------
A sum of wall-clock intervals over one pass of 200 notifications moves with whatever else
runs on the machine: three runs of the same 10,000-filter workload put SRV-fast / RV for
popular notifications at 1.21, 1.78 and 2.61, and RV's noise decided it. This figure keeps
three things apart from that noise:

- **CPU time.** ``clock`` is the calling thread's CPU time (``time.thread_time_ns``), so time
  the thread spends descheduled does not count. (The native SRV-fast kernel releases the GIL
  for large posets but runs on the calling thread, so its time counts.)
- **Repeats, interleaved.** Each notification's broker work is done ``repeats`` times, the
  profiles taking turns within each repetition (rotating which goes first), so a burst of
  load falls on every profile alike; the median of a notification's repeats is its cost.
- **Ratios per notification.** A profile's cost relative to another's is taken per
  notification (both routed the same notification moments apart), and reported as the median
  of those ratios per class with its quartiles and range.

The boundary is the same for every profile: the broker cores of the whole tree for one
notification (:meth:`VcapsTree.route` / the plain tree's ``route``: every broker's match and
the walk between them), with the header decoded before (RV's set of IDs, SRV-fast's nonce and
codeword set), as each broker's decoder does once per frame. The cyclic garbage collector is
paused while measuring (collected before), so a collection triggered by one profile's
allocations is not charged to another's.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

__all__ = ["CLOCK", "REPEATS", "ratio_stats", "steady_broker_cpu", "steady_figure"]

#: repetitions of each notification's broker work (the median is kept)
REPEATS: Final = 5
CLOCK: Final = "thread CPU time (time.thread_time_ns)"

Route = Callable[[], object]


def steady_broker_cpu(
    routes: Mapping[str, Sequence[Route]],
    *,
    repeats: int,
    clock: Callable[[], int],
    check: Callable[[str, int, object], None] | None = None,
) -> dict[str, list[float]]:
    """Per profile, each notification's broker CPU ms (median of ``repeats``).

    ``routes[p][j]`` routes notification ``j`` through profile ``p``'s broker cores (header
    already decoded); every profile has the same notifications. ``clock``: nanoseconds of the
    thread's CPU time. ``check(p, j, result)``, untimed, sees every result (delivery checks)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    profiles = list(routes)
    n = {len(v) for v in routes.values()}
    if len(n) > 1:
        raise ValueError("every profile must route the same notifications")
    count = n.pop() if n else 0
    out: dict[str, list[float]] = {p: [] for p in profiles}
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for j in range(count):
            samples: dict[str, list[int]] = {p: [] for p in profiles}
            for r in range(repeats):
                k = r % len(profiles)
                for p in profiles[k:] + profiles[:k]:
                    route = routes[p][j]
                    t0 = clock()
                    got = route()
                    samples[p].append(clock() - t0)
                    if check is not None:
                        check(p, j, got)
            for p in profiles:
                out[p].append(statistics.median(samples[p]) / 1e6)
    finally:
        if was_enabled:
            gc.enable()
    return out


def _quantiles(xs: Sequence[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, med, q3


def ratio_stats(
    num: Sequence[float], den: Sequence[float], classes: Sequence[str], names: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per class (``classes[j]`` is notification ``j``'s, in the order of ``names``, plus
    ``all``): the median of the per-notification ratios ``num[j] / den[j]`` with quartiles
    and range, and each side's median ms."""
    out: dict[str, dict[str, Any]] = {}
    for c in [*names, "all"]:
        js = [j for j, cj in enumerate(classes) if c in ("all", cj)]
        rs = sorted(num[j] / den[j] for j in js if den[j] > 0)
        if not rs:
            continue
        q1, med, q3 = _quantiles(rs)
        out[c] = {
            "median": round(med, 3),
            "q1": round(q1, 3),
            "q3": round(q3, 3),
            "min": round(rs[0], 3),
            "max": round(rs[-1], 3),
            "n": len(rs),
            "num_ms": round(statistics.median(num[j] for j in js), 4),
            "den_ms": round(statistics.median(den[j] for j in js), 4),
        }
    return out


def steady_figure(
    routes: Mapping[str, Sequence[Route]],
    classes: Sequence[str],
    expected: Sequence[object],
    *,
    classes_in_order: Sequence[str] = (),
    ratios: Sequence[tuple[str, str]],
    repeats: int,
    clock: Callable[[], int],
) -> tuple[dict[str, Any], set[str]]:
    """The figure as JSON, and the profiles whose routing differed from ``expected`` (the
    reference matcher's receivers of each notification) in some repetition (checked untimed).

    ``classes[j]``: notification ``j``'s class; ``ratios``: (numerator, denominator) profile
    pairs, each reported when both were measured."""
    wrong: set[str] = set()

    def check(p: str, j: int, got: object) -> None:
        if got != expected[j]:
            wrong.add(p)

    ms = steady_broker_cpu(routes, repeats=repeats, clock=clock, check=check)
    names = list(classes_in_order) or sorted(set(classes))
    out: dict[str, Any] = {
        "clock": CLOCK,
        "repeats": repeats,
        "boundary": "every broker core of the tree per notification, header decoded before",
        "broker_ms_median": {
            p: {
                c: round(
                    statistics.median(x for x, cj in zip(v, classes, strict=True) if cj == c), 4
                )
                for c in names
                if c in classes
            }
            for p, v in ms.items()
        },
        "ratios": {
            f"{a}/{b}": ratio_stats(ms[a], ms[b], classes, names)
            for a, b in ratios
            if a in ms and b in ms
        },
    }
    return out, wrong
