"""A figure path that cannot be written is refused *before* the run it would end (minutes of
benchmark or simulation), as one ``pubguard: error:`` line; a writable one passes the check
and leaves no scratch file behind."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.common import check_writable
from pubguard.cli.main import cli
from pubguard.errors import ConfigError

COMMANDS = [
    (
        ["bench", "network", "--profile", "plain", "--brokers", "1", "--in-process", "--plot"],
        "--plot",
        "x.png",
    ),
    (["experiments", "scaling", "--quick", "--profiles", "plain", "--plot"], "--plot", "x.png"),
    (["experiments", "flood", "--out"], "--out", "x.png"),
    (["experiments", "psguard-cost-ratio", "--quick", "--out"], "--out", "psguard-cost-ratio.png"),
    (
        ["bench", "pipeline", "--subscriptions", "10", "--events", "1", "--sweep"],
        "--sweep",
        "x.png",
    ),
]


@pytest.mark.parametrize(("args", "option", "name"), COMMANDS)
def test_unwritable_figure_path_fails_first(
    tmp_path: Path, args: list[str], option: str, name: str
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / "sub"
    arg = str(target if option == "--out" and name != "x.png" else target / name)
    t0 = time.perf_counter()
    res = CliRunner().invoke(cli, [*args, arg])
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pubguard: error: {option} "), res.stderr
    assert "cannot write there (Not a directory)" in lines[0]
    # refused up front, nothing ran: no result printed, and far less than a run's minutes (a
    # generous bound: a loaded machine may take seconds to refuse)
    assert res.stdout == "" and time.perf_counter() - t0 < 60
    assert blocker.read_text() == "x"


def test_check_writable(tmp_path: Path) -> None:
    png = tmp_path / "a" / "b" / "fig.png"
    check_writable(png, "--plot")
    assert png.parent.is_dir() and list(png.parent.iterdir()) == []
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        check_writable(png.parent, "--plot")
