"""``pubguard experiments psguard-cost-ratio`` and ``pubguard bench kmc-oft`` (real runs, small)."""

from __future__ import annotations

import json

import click
import pytest
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
        [
            "experiments",
            "psguard-cost-ratio",
            "--quick",
            "--joins",
            "8",
            "--json",
            "--out",
            str(tmp_path),
        ],
    )
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


@pytest.mark.slow  # two profiles x two trees of real crypto, and matplotlib
def test_scaling_quick_json_fields_and_png(tmp_path):
    png = tmp_path / "scaling.png"
    res = CliRunner().invoke(
        _cli(),
        [
            "experiments",
            "scaling",
            "--quick",
            "--profiles",
            "eventguard-nosig",
            "--brokers",
            "1,3",
            "--subscribers",
            "8",
            "--topics",
            "6",
            "--per-subscriber",
            "2",
            "--publications",
            "36",
            "--observe-every",
            "6",
            "--json",
            "--plot",
            str(png),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["experiment"] == "scaling" and "measured-cost simulation" in doc["method"]
    assert doc["params"]["brokers"] == [1, 3] and doc["params"]["latency_ms"] == 70.0
    rows = {(r["profile"], r["brokers"]): r for r in doc["rows"]}
    assert set(rows) == {(p, b) for p in ("plain", "eventguard-nosig") for b in (1, 3)}
    for r in rows.values():
        assert r["max_throughput_eps"] > 0 and r["mean_fanout"] > 1
        assert r["latency_p50_ms"] >= 140 and r["latency_p99_ms"] >= r["latency_p50_ms"]
    ng = rows[("eventguard-nosig", 3)]
    assert ng["baseline_max_throughput_eps"] == rows[("plain", 3)]["max_throughput_eps"]
    assert ng["throughput_ratio"] > 0 and ng["latency_p50_ratio"] > 0
    assert doc["paper"]["eventguard-nosig"]["paper_throughput_drop_pct"] == 5.0
    assert doc["png"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scaling_prints_a_table_and_refuses_bad_options():
    res = CliRunner().invoke(
        _cli(),
        [
            "experiments",
            "scaling",
            "--quick",
            "--profiles",
            "plain",
            "--brokers",
            "1",
            "--subscribers",
            "4",
            "--topics",
            "4",
            "--per-subscriber",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "experiments scaling" in res.output and "plain" in res.output
    assert "measured-cost simulation" in res.output
    for args, text in (
        (["--profiles", "nope"], "unknown profile 'nope'"),
        (["--brokers", "5"], "brokers must be among 1, 3, 7, 15, 31"),
        (["--brokers", "x"], "--brokers must be a comma-separated list"),
        (["--per-subscriber", "40"], "each subscriber needs 1..topics topics"),
        (["--cost-scale", "0"], "cost scale must be a positive number"),
    ):
        res = CliRunner().invoke(_cli(), ["experiments", "scaling", *args])
        assert res.exit_code == 1, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pubguard: error:") and text in lines[0]


def test_cost_ratio_figure_labels_every_panel() -> None:
    import matplotlib.pyplot as plt

    from tests.figure_checks import assert_labelled

    def row(ns: int) -> dict[str, float]:
        return {
            "ns": ns,
            "sg_keys_per_subscriber": ns / 50,
            "psguard_keys_per_subscriber": 6.5,
            "sg_keys_per_publisher": ns * 1.9,
            "psguard_keys_per_publisher": 1,
            "sg_kdc_ms_per_join": ns / 1000,
            "psguard_kdc_ms_per_join": 0.17,
            "sg_kb_per_join": ns / 400,
            "psguard_kb_per_join": 0.46,
        }

    fig = experiment_cmds._figure(
        {"uniform": [row(n) for n in (10, 100, 1000)], "gaussian": [row(n) for n in (2, 8, 64)]}
    )
    try:
        labels = assert_labelled(fig)
        assert [ax.get_ylabel() for ax in fig.axes] == [
            "keys held per subscriber",
            "keys held per publisher",
            "KDC CPU per join (ms)",
            "sealed keys sent per join (KB)",
        ]
        assert "PSGuard (phi=100, R=10^4)" in labels and len(labels) == 4
    finally:
        plt.close(fig)
