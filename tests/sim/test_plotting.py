"""``plain_log_ticks``: a log axis spanning less than a decade is labelled 40, 60, 100, not
with ``6 x 10^1`` mathtext; values below 1 keep their decimals."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pubguard.sim.plotting import plain_log_ticks  # noqa: E402
from tests.figure_checks import tick_texts  # noqa: E402


def test_log_ticks_are_plain_numbers() -> None:
    fig, (a, b) = plt.subplots(1, 2)
    try:
        a.plot([1, 2], [38, 120])
        b.plot([0.05, 0.8], [0.05, 0.8])
        a.set_yscale("log")
        b.set_xscale("log")
        b.set_yscale("log")
        plain_log_ticks(a)
        plain_log_ticks(b, axis="both")
        fig.canvas.draw()
        ys = [t.get_text() for t in a.get_yticklabels(minor=True) if t.get_text()]
        assert {"40", "60"} <= set(ys)
        assert {"0.1"} <= {t.get_text() for t in b.get_xticklabels() if t.get_text()}
        for text in tick_texts(a) + tick_texts(b):
            assert "times" not in text and "^" not in text, text
    finally:
        plt.close(fig)
