"""Small matplotlib helpers shared by the figures the experiments and benchmarks draw.

Log-scaled axes: matplotlib's default labels a log axis that spans less than a decade with
``6 x 10^1``-style minor tick labels, which read badly next to linear panels; these label the
same ticks with plain numbers (``60``, ``0.2``). matplotlib is imported lazily, so importing
this module costs nothing when no figure is drawn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plain_log_ticks"]


def plain_log_ticks(ax: Any, *, axis: str = "y") -> None:
    """Label the log-scaled ``axis`` (``"x"``, ``"y"`` or ``"both"``) of ``ax`` with plain
    numbers; matplotlib still chooses which ticks get a label."""
    from matplotlib.ticker import LogFormatter

    class _Plain(LogFormatter):  # type: ignore[misc]
        def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
            return f"{x:g}"

    axes = [ax.xaxis, ax.yaxis] if axis == "both" else [getattr(ax, f"{axis}axis")]
    for a in axes:
        a.set_major_formatter(_Plain(labelOnlyBase=False))
        a.set_minor_formatter(_Plain(labelOnlyBase=False, minor_thresholds=(2, 0.4)))
