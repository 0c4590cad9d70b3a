"""``pubguard bench network --plot FILE``: throughput and latency against tree size.

The shape to compare with eventguard.txt Fig. 11 (Siena's maximum throughput per number of
brokers): one line per (run, payload) of ``max_throughput_eps`` over the tree sizes run (the
headline run and each variant the tables list, and plain's from the same invocation), and
beside it the p50 / p99 latency at 80% of each run's maximum. Drawn with matplotlib's Agg backend
(no display needed) into a PNG. On one machine every broker shares its cores, so the growth
Fig. 11 shows (each node on its own processor) is not expected there: a deeper tree adds hops
per event on the same cores.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pubguard.sim.plotting import plain_log_ticks

__all__ = ["network_figure", "plot_network"]


def _runs(results: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """One series per (run, payload): the headline run of each result and every variant the
    bench ran beside it (Merkle batches, single-signed, psguard's paper configuration), named
    by ``variant`` so the plot shows what the tables show."""
    series: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        series[(r.get("variant", r["profile"]), r["payload"])].append(r)
        for v in r.get("variants", ()):
            series[(v["variant"], r["payload"])].append({**r, **v})
    return series


def network_figure(results: list[dict[str, Any]], *, title: str = "") -> Any:
    """The matplotlib figure of ``results`` (``run_network_bench`` output); the caller closes
    it. Left: max sustained throughput per tree size, the profile's runs and plain's from the
    same invocation (dashed); right: p50 (solid) and p99 (dotted) latency at 80% of each
    run's own maximum, plain's p50 dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(11, 4.2))
    plain_done: set[int] = set()
    for (run, payload), rs in sorted(_runs(results).items()):
        rs = sorted(rs, key=lambda r: r["brokers"])
        xs = [r["brokers"] for r in rs]
        label = f"{run}, {payload} B"
        (line,) = ax_t.plot(xs, [r["max_throughput_eps"] for r in rs], marker="o", label=label)
        color = line.get_color()  # one colour per series in both panels
        ax_l.plot(
            xs, [r["latency_p50_ms"] for r in rs], marker="o", color=color, label=f"{label} p50"
        )
        ax_l.plot(
            xs,
            [r["latency_p99_ms"] for r in rs],
            marker="^",
            linestyle=":",
            color=color,
            label=f"{label} p99",
        )
        if payload in plain_done or not all("baseline_max_throughput_eps" in r for r in rs):
            continue
        plain_done.add(payload)  # plain ran once per configuration, beside every variant
        ax_t.plot(
            xs,
            [r["baseline_max_throughput_eps"] for r in rs],
            marker="x",
            color="gray",
            linestyle="--",
            label=f"plain, {payload} B (same run)",
        )
        if all("baseline_latency_p50_ms" in r for r in rs):
            ax_l.plot(
                xs,
                [r["baseline_latency_p50_ms"] for r in rs],
                marker="x",
                color="gray",
                linestyle="--",
                label=f"plain, {payload} B p50 (same run)",
            )
    ax_t.set_xlabel("brokers (complete binary tree)")
    ax_t.set_ylabel("max sustained throughput (events/s)")
    ax_t.set_ylim(bottom=0)
    ax_t.set_title("throughput (cf. eventguard.txt Fig. 11)")
    ax_l.set_xlabel("brokers (complete binary tree)")
    ax_l.set_ylabel("latency at 80% of each run's max (ms)")
    ax_l.set_yscale("log")
    plain_log_ticks(ax_l)
    ax_l.set_title("publish-to-delivery latency")
    for ax in (ax_t, ax_l):
        ax.set_xticks(sorted({r["brokers"] for r in results}))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_network(results: list[dict[str, Any]], path: Path, *, title: str = "") -> Path:
    """Write the plot of ``results`` (``run_network_bench`` output) to ``path``."""
    import matplotlib.pyplot as plt

    fig = network_figure(results, title=title)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
