"""Parameter sweeps of the simulator as Spark jobs (eventguard.txt Figs. 9-10, psguard.txt
Figs. 6-8): one task per point, so a user with a cluster (``--master spark://host:port``)
sweeps at the papers' full size. Each point is a pure function of its parameters (seeded), so
the result does not depend on how Spark schedules the tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

__all__ = ["run_sweep"]

P = TypeVar("P")


def run_sweep(
    spark: Any, fn: Callable[[P], dict[str, Any]], points: Sequence[P]
) -> list[dict[str, Any]]:
    """``[fn(p) for p in points]``, evaluated by Spark executors, in the order given."""
    if not points:
        return []
    rdd = spark.sparkContext.parallelize(list(enumerate(points)), len(points))
    out = rdd.map(lambda ip: (ip[0], fn(ip[1]))).collect()
    return [r for _, r in sorted(out, key=lambda x: x[0])]
