"""The figures ``bench pipeline --sweep`` and ``experiments scaling --plot`` write, drawn from
recorded points (no Spark, no simulation): every panel titled and labelled, lines named."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from pubguard.pipeline.bench import _figure, plot_sweep
from tests.figure_checks import assert_labelled

# docs/pipeline.md's quiet re-run of the sweep (seconds per join)
SWEEP = [
    {
        "series": "live",
        "live": 2500,
        "subscriptions": 2642,
        "events": 1000,
        "matches": 7298,
        "plain": 0.90,
        "deterministic": 1.09,
        "randomized": 2.13,
    },
    {
        "series": "live",
        "live": 5000,
        "subscriptions": 4771,
        "events": 1000,
        "matches": 11947,
        "plain": 1.27,
        "deterministic": 1.22,
        "randomized": 2.71,
    },
    {
        "series": "live",
        "live": 20000,
        "subscriptions": 19456,
        "events": 1000,
        "matches": 52095,
        "plain": 1.52,
        "deterministic": 1.49,
        "randomized": 3.41,
    },
    {
        "series": "non-matching added",
        "live": 5000,
        "subscriptions": 9771,
        "events": 1000,
        "matches": 11947,
        "plain": 1.08,
        "deterministic": 1.07,
        "randomized": 2.47,
    },
]


def test_sweep_figure_says_what_it_shows(tmp_path: Path) -> None:
    fig = _figure(SWEEP, ["deterministic", "randomized"])
    try:
        labels = assert_labelled(fig)
        assert "randomized (non-matching added)" in labels and len(labels) == 6
        left, right = fig.axes
        assert right.get_xlabel() == "events x subscriptions (millions)"
        assert right.xaxis.get_offset_text().get_text() == ""  # no "1e7" in the corner
        assert left.get_ylim()[0] == right.get_ylim()[0] == 0
        assert "1000 events" in fig._suptitle.get_text()
    finally:
        plt.close(fig)
    png = tmp_path / "s" / "sweep.png"
    plot_sweep(SWEEP, ["deterministic", "randomized"], png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scaling_figure_says_what_it_shows() -> None:
    from pubguard.sim.scaling_report import scaling_figure

    # the --quick psguard run of this audit (publications / s, ms)
    rows = [
        {
            "profile": prof,
            "brokers": b,
            "max_throughput_eps": t,
            "latency_p50_ms": lat,
            "mean_fanout": 12.62,
        }
        for prof, b, t, lat in (
            ("plain", 1, 9237, 141.8),
            ("plain", 3, 8202, 210.4),
            ("plain", 7, 14911, 280.6),
            ("psguard", 1, 2210, 141.3),
            ("psguard", 3, 3224, 211.0),
            ("psguard", 7, 3854, 283.1),
        )
    ]
    doc = {"rows": rows, "params": {"brokers": [1, 3, 7], "subscribers": 32, "latency_ms": 70.0}}
    fig = scaling_figure(doc)
    try:
        assert assert_labelled(fig) == ["plain", "psguard"]
        thr, lat = fig.axes
        assert thr.get_ylim()[0] == 0
        assert lat.get_ylabel() == "publish-to-delivery latency p50 (ms)"
    finally:
        plt.close(fig)
