"""The ``experiments scaling`` result as one JSON document, and its figure.

:func:`scaling_doc` turns :func:`~pubguard.sim.scaling.run_scaling`'s points into rows with
each profile's ratio to plain at the same tree size beside the papers' figures (eventguard.txt
§6.2.2, psguard.txt §5.2.3); :func:`plot_scaling` draws throughput and latency versus the
number of brokers per profile (the shape of eventguard.txt Fig. 11/12, psguard.txt Fig. 9/10).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Final

from pubguard.errors import ConfigError
from pubguard.sim.scaling import ScalingParams, ScalingPoint

__all__ = ["METHOD", "PAPER", "plot_scaling", "scaling_doc", "scaling_figure"]

METHOD: Final = (
    "measured-cost simulation, not wall-clock on separate machines: every broker, the "
    "publisher and each subscriber is its own single-server processor in virtual time; each "
    "message's service time is the CPU time (process_time_ns) the real code took on it (broker: "
    "msgpack decode + Broker.handle + encoding every frame it emits; publisher: protect_event + "
    "encode; subscriber: decode + open_event); links add the per-hop latency"
)
#: the papers' figures, printed beside ours (the figures themselves are plots: no values)
PAPER: Final[dict[str, dict[str, Any]]] = {
    "plain": {
        "paper": "Siena baseline; eventguard.txt Fig. 11: throughput grows with nodes until "
        "they outnumber the subscribers; Fig. 12: latency first falls, then +70 ms "
        "per level",
    },
    "psguard": {
        "paper": "psguard.txt §5.2.3: throughput < 2% below Siena (topic/numeric), latency "
        "< 1.5% above; with key caching 2.2% / 1.5%",
        "paper_throughput_drop_pct": 2.0,
        "paper_latency_increase_pct": 1.5,
    },
    "psguard-merkle": {
        "paper": "psguard.txt §5.2.3 signs each event (§4.1); amortised (Merkle-root) signing "
        "is ours: throughput < 2% below Siena, latency < 1.5% above",
        "paper_throughput_drop_pct": 2.0,
        "paper_latency_increase_pct": 1.5,
    },
    "psguard-paper": {
        "paper": "psguard.txt §5.2.3 (its brokers verify nothing, §2): throughput < 2% below "
        "Siena, latency < 1.5% above",
        "paper_throughput_drop_pct": 2.0,
        "paper_latency_increase_pct": 1.5,
    },
    "eventguard": {
        "paper": "eventguard.txt §6.2.2: the ElGamal verify (1.7 ms) at every node is the "
        "primary overhead (Fig. 11, no value given); latency increase < 4%",
        "paper_verify_ms": 1.7,
        "paper_latency_increase_pct": 4.0,
    },
    "eventguard-nosig": {
        "paper": "eventguard.txt §6.2.2, EventGuard-nosig: overhead < 5% without the per-node "
        "signature check",
        "paper_throughput_drop_pct": 5.0,
    },
    "eventguard-merkle": {
        "paper": "eventguard.txt §6.2.2 measured one ElGamal signature per publication; "
        "amortised (Merkle-root) signing is ours; goal: drop <= 10%",
        "goal_throughput_drop_pct": 10.0,
    },
    "default-merkle": {
        "paper": "no paper (the composed profile, Merkle-root signatures); goal: drop <= 10%",
        "goal_throughput_drop_pct": 10.0,
    },
    "default": {
        "paper": "no paper (the composed profile); goal: drop <= 10%",
        "goal_throughput_drop_pct": 10.0,
    },
    "narada": {
        "paper": "narada Table 2: broker validation 7.0 ms per message; no throughput "
        "versus nodes figure",
        "paper_broker_validation_ms": 7.0,
    },
}
COLOURS: Final = {
    "plain": "tab:gray",
    "psguard": "tab:blue",
    "psguard-merkle": "tab:brown",
    "psguard-paper": "tab:cyan",
    "eventguard": "tab:red",
    "eventguard-nosig": "tab:orange",
    "eventguard-merkle": "tab:pink",
    "default": "tab:green",
    "default-merkle": "tab:olive",
    "narada": "tab:purple",
}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 4) if a is not None and b else None


def _row(pt: ScalingPoint, base: ScalingPoint | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "profile": pt.profile,
        "brokers": pt.brokers,
        "max_throughput_eps": round(pt.max_throughput, 1),
        "max_throughput_runs_eps": list(pt.throughput_runs),
        "saturated_at_eps": round(pt.saturated_at, 1) if math.isfinite(pt.saturated_at) else None,
        "bottleneck": pt.bottleneck,
        "latency_p50_ms": pt.latency_p50_ms,
        "latency_p99_ms": pt.latency_p99_ms,
        "mean_fanout": round(pt.mean_fanout, 2),
        "subscriber_utilisation": pt.subscriber_utilisation,
        "runs": pt.runs,
        "service_us_per_publication": pt.busy_us,
        "drops": pt.drops,
    }
    if base is not None and pt.profile != "plain":
        tr = _ratio(pt.max_throughput, base.max_throughput)
        lr = _ratio(pt.latency_p50_ms, base.latency_p50_ms)
        row.update(
            baseline_max_throughput_eps=round(base.max_throughput, 1),
            baseline_latency_p50_ms=base.latency_p50_ms,
            throughput_ratio=tr,
            throughput_drop_pct=None if tr is None else round(100 * (1 - tr), 2),
            latency_p50_ratio=lr,
            latency_increase_pct=None if lr is None else round(100 * (lr - 1), 2),
        )
    return row


def scaling_doc(
    series: dict[str, list[ScalingPoint]],
    p: ScalingParams,
    *,
    seconds: float,
    quick: bool,
    load: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """One JSON object: params, rows (profile x brokers, with ratios to plain), paper figures."""
    base = {pt.brokers: pt for pt in series.get("plain", [])}
    rows = [_row(pt, base.get(pt.brokers)) for pts in series.values() for pt in pts]
    growth = {
        prof: _ratio(pts[-1].max_throughput, pts[0].max_throughput)
        for prof, pts in series.items()
        if len(pts) > 1
    }
    w = p.workload
    return {
        "experiment": "scaling",
        "method": METHOD,
        "params": {
            "brokers": list(p.brokers),
            "subscribers": p.subscribers,
            "latency_ms": round(1000 * p.latency, 3),
            "publications_per_run": p.publications,
            "observe_every": p.observe_every,
            "bisect": p.bisect,
            "repeat": p.repeat,
            "topics": w.topics,
            "topics_per_subscriber": w.per_subscriber,
            "zipf": w.zipf,
            "payload": w.payload,
            "cost_scale": getattr(p.cost, "scale", None),
            "seed": p.seed,
            "quick": quick,
        },
        "rows": rows,
        "throughput_growth": growth,  # max throughput at the largest tree / at the smallest
        "paper": {prof: PAPER.get(prof, {}) for prof in series},
        "load_average": list(load) if load else None,
        "seconds": round(seconds, 1),
        "deterministic": "routing and workload given --seed; the measured costs are not",
    }


def scaling_figure(doc: dict[str, Any]) -> Any:
    """Throughput and latency p50 versus brokers, one line per profile (the caller closes
    the figure). Throughput starts at zero, so the gap to plain reads as the ratio it is."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - matplotlib is a dependency
        raise ConfigError(f"matplotlib is needed for the figure: {exc}") from None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    by: dict[str, list[dict[str, Any]]] = {}
    for r in doc["rows"]:
        by.setdefault(r["profile"], []).append(r)
    for prof, rows in by.items():
        xs = [r["brokers"] for r in rows]
        style = dict(color=COLOURS.get(prof), marker="o", label=prof)
        ax1.plot(xs, [r["max_throughput_eps"] for r in rows], **style)
        lat = [(r["brokers"], r["latency_p50_ms"]) for r in rows if r["latency_p50_ms"]]
        ax2.plot([x for x, _ in lat], [y for _, y in lat], **style)
    for ax, title, unit in (
        (
            ax1,
            "max throughput (cf. eventguard Fig. 11, psguard Fig. 9)",
            "max sustained publications / s",
        ),
        (
            ax2,
            "latency p50 at 80% of max (cf. Fig. 12, Fig. 10)",
            "publish-to-delivery latency p50 (ms)",
        ),
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(doc["params"]["brokers"], [str(b) for b in doc["params"]["brokers"]])
        ax.set_xlabel("brokers (complete binary tree)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=8)
    prm = doc["params"]
    fig.suptitle(
        f"measured-cost simulation, one processor per entity: {prm['subscribers']} subscribers, "
        f"{prm['latency_ms']:g} ms per hop, Zipf topics (mean fan-out "
        f"{doc['rows'][0]['mean_fanout'] if doc['rows'] else 0})",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def plot_scaling(doc: dict[str, Any], path: Path) -> Path:
    """Write :func:`scaling_figure` of ``doc`` to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    fig = scaling_figure(doc)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ConfigError(f"cannot write the figure: {exc.strerror}", path=str(path)) from None
    finally:
        plt.close(fig)
    return path
