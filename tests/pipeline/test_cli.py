"""``pubguard pipeline ...`` through click, on the shared session (``get_spark`` returns the
active one): a JSON summary on success, one ``pubguard: error:`` line and exit 1 on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.sim.workloads import generate, load_workload


def test_pipeline_run_json_summary(spark: Any, tmp_path: Path) -> None:
    # the smallest workload that still delivers: the command's wiring and summary are under
    # test here (the profiles' deliveries are checked by test_profiles)
    d = tmp_path / "wl"
    generate(
        "eventguard",
        d,
        seed=11,
        subscribers=3,
        events=6,
        topics=2,
        publishers=1,
        topics_per_publisher=2,
        topics_per_subscriber=1,
    )
    wl = load_workload(d)
    out = tmp_path / "out"
    args = ["pipeline", "run", "--workload", str(d), "--out", str(out)]
    res = CliRunner().invoke(cli, [*args, "--mode", "deterministic", "--seed", "3", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["events"] == len(wl.events) and summary["opened"] == summary["deliveries"]
    assert summary["profile"] == "default" and summary["deliveries"] > 0
    assert (out / "opened").is_dir() and (out / "summary.json").exists()


def test_pipeline_match_bad_input_is_one_line(spark: Any, tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["pipeline", "match", "--protected", str(tmp_path / "nope"), "--out", str(tmp_path)]
    )
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines() == [
        f"pubguard: error: {tmp_path / 'nope'}: not a protected folder (no manifest.json)"
    ]
    assert not (tmp_path / "outbox").exists()
