"""``pubguard bench network --plot FILE``: throughput and latency against tree size.

The shape to compare with eventguard.txt Fig. 11 (Siena's maximum throughput per number of
brokers): one line per (profile, payload) of ``max_throughput_eps`` over the tree sizes run,
and beside it the p50 / p99 latency at 80% of that rate. Drawn with matplotlib's Agg backend
(no display needed) into a PNG. On one machine every broker shares its cores, so the growth
Fig. 11 shows (each node on its own processor) is not expected there: a deeper tree adds hops
per event on the same cores.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

__all__ = ["plot_network"]


def plot_network(results: list[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Write the plot of ``results`` (``run_network_bench`` output) to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        series[(r["profile"], r["payload"])].append(r)
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(10, 4))
    for (profile, payload), rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["brokers"])
        xs = [r["brokers"] for r in rs]
        label = f"{profile}, {payload} B"
        (line,) = ax_t.plot(xs, [r["max_throughput_eps"] for r in rs], marker="o", label=label)
        color = line.get_color()  # one colour per series in both panels
        if profile != "plain" and all("baseline_max_throughput_eps" in r for r in rs):
            ax_t.plot(xs, [r["baseline_max_throughput_eps"] for r in rs], marker="x",
                      linestyle="--", label=f"plain, {payload} B (same run)")  # fmt: skip
        p50 = [r["latency_p50_ms"] for r in rs]
        p99 = [r["latency_p99_ms"] for r in rs]
        ax_l.plot(xs, p50, marker="o", color=color, label=f"{label} p50")
        ax_l.plot(xs, p99, marker="^", linestyle=":", color=color, label=f"{label} p99")
    ax_t.set_xlabel("brokers (complete binary tree)")
    ax_t.set_ylabel("max sustained throughput (events/s)")
    ax_t.set_title("throughput (cf. eventguard.txt Fig. 11)")
    ax_l.set_xlabel("brokers (complete binary tree)")
    ax_l.set_ylabel("latency at 80% of max (ms)")
    ax_l.set_yscale("log")
    ax_l.set_title("publish-to-delivery latency")
    for ax in (ax_t, ax_l):
        ax.set_xticks(sorted({r["brokers"] for r in results}))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
