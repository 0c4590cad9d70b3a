"""``pubguard experiments psguard-cost-ratio`` and ``pubguard bench kmc-oft`` (real runs, small)."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner

from pubguard.cli import experiment_cmds
from pubguard.cli.main import cli


def _cli() -> click.Group:
    if "experiments" not in cli.commands:  # registered by main unless the module list changed
        experiment_cmds.register(cli)
    return cli


def test_psguard_cost_ratio_quick_json_and_png(tmp_path):
    res = CliRunner().invoke(
        _cli(),
        ["experiments", "psguard-cost-ratio", "--quick", "--joins", "8", "--json",
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert [r["phi"] for r in doc["table5"]] == [10, 100, 1000, 10_000]
    assert [r["paper"] for r in doc["table6"]] == [0.09, 0.90, 9.04]
    for row in doc["table5"] + doc["table6"]:
        assert row["analytical"] > 0 and row["measured"] > 0
        assert row["psguard_keys_per_publisher"] == 1
    assert abs(doc["table5"][1]["analytical"] - 9.03) < 0.01
    png = tmp_path / "psguard-cost-ratio.png"
    assert doc["png"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_options_give_one_line_errors(tmp_path):
    res = CliRunner().invoke(_cli(), ["experiments", "psguard-cost-ratio", "--joins", "0"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == ["pubguard: error: --joins must be at least 1"]
    res = CliRunner().invoke(_cli(), ["bench", "kmc-oft", "--members", "1"])
    assert res.exit_code == 1 and "pubguard: error:" in res.output


def test_bench_kmc_oft_small_json():
    res = CliRunner().invoke(
        _cli(), ["bench", "kmc-oft", "--json", "--members", "256", "--repeat", "5"]
    )
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout.strip().splitlines()[-1])["rows"]}
    token = rows["KMC: generate signed security token"]
    assert token["paper_ms"] == 54.89 and token["baseline_us"] > 0 and token["ratio"] > 0
    join = rows["OFT join at 256 members"]
    assert join["depth"] <= 9 and join["updates"] <= 2 * 10 and join["ours_us"] > 0
