"""What every figure pubguard writes must say: each panel that holds data has a title and
both axis labels, the lines are named in a legend, and tick labels are plain numbers (no
``6 x 10^1`` mathtext on log axes). Used by the tests of each plotting function."""

from __future__ import annotations

from typing import Any


def tick_texts(ax: Any) -> list[str]:
    """Every non-empty tick label of ``ax`` (major and minor, both axes), after a draw."""
    out = []
    for axis in (ax.xaxis, ax.yaxis):
        for minor in (False, True):
            out += [t.get_text() for t in axis.get_ticklabels(minor=minor) if t.get_text()]
    return out


def assert_labelled(fig: Any) -> list[str]:
    """Assert the rules above on ``fig`` and return the legend labels of all its panels."""
    fig.canvas.draw()
    labels: list[str] = []
    panels = [ax for ax in fig.axes if ax.lines or ax.patches or ax.collections]
    assert panels, "the figure draws nothing"
    for ax in panels:
        where = ax.get_title() or repr(ax)
        assert ax.get_title(), "a panel without a title"
        assert ax.get_xlabel(), f"{where}: no x label"
        assert ax.get_ylabel(), f"{where}: no y label"
        for text in tick_texts(ax):
            assert "times" not in text and "^" not in text and "\u00d7" not in text, (where, text)
        legend = ax.get_legend()
        if legend is not None:
            labels += [t.get_text() for t in legend.get_texts()]
    assert labels, "no legend names the lines"
    return labels
