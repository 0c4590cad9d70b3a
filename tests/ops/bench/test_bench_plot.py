"""``pubguard bench network --plot``: the figure names every run the tables list (the headline,
each variant, plain from the same invocation) and labels its axes in plain numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from pubguard.ops.bench.plot import network_figure, plot_network
from tests.figure_checks import assert_labelled


def _result(brokers: int, scale: float) -> dict[str, Any]:
    variant = {
        "variant": "psguard-merkle",
        "max_throughput_eps": 3000 * scale,
        "latency_p50_ms": 80.0,
        "latency_p99_ms": 160.0,
    }
    return {
        "profile": "psguard",
        "variant": "psguard",
        "payload": 16,
        "brokers": brokers,
        "max_throughput_eps": 3250 * scale,
        "latency_p50_ms": 63.0,
        "latency_p99_ms": 117.0,
        "baseline_max_throughput_eps": 8000 * scale,
        "baseline_latency_p50_ms": 40.0,
        "variants": [variant],
    }


def test_every_run_is_a_named_line_and_axes_say_what_they_show(tmp_path: Path) -> None:
    results = [_result(1, 1.0), _result(3, 0.5)]
    fig = network_figure(results, title="pubguard bench network --profile psguard")
    try:
        labels = assert_labelled(fig)
        ax_t, ax_l = fig.axes
        assert "psguard-merkle, 16 B" in labels and "psguard, 16 B" in labels
        assert "plain, 16 B (same run)" in labels and "plain, 16 B p50 (same run)" in labels
        assert len(ax_t.lines) == 3 and len(ax_l.lines) == 5  # p50 + p99 per run, plain p50
        assert ax_t.get_ylim()[0] == 0  # a ratio to plain reads true only from zero
        assert [t.get_text() for t in ax_l.get_yticklabels(minor=True) if t.get_text()]
        assert "--profile psguard" in fig._suptitle.get_text()
    finally:
        plt.close(fig)
    png = plot_network(results, tmp_path / "a" / "n.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
