"""``pubguard experiments flood`` (eventguard.txt Fig. 13 / Fig. 3): JSON, PNG, bad options."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from pubguard.cli import security_cmds
from pubguard.cli.main import cli


def _cli() -> click.Group:
    exp = cli.commands.get("experiments")
    if not isinstance(exp, click.Group) or "flood" not in exp.commands:
        security_cmds.register(cli)  # registered by main unless the module list changed
    return cli


SMALL = ["--depth", "2", "--duration", "0.3", "--warmup", "0.1", "--flood-rates", "0,200"]


def test_flood_json_and_png(tmp_path):
    png = tmp_path / "fig" / "flood.png"
    res = CliRunner().invoke(_cli(), ["experiments", "flood", "--json", "--out", str(png), *SMALL])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["experiment"] == "flood"
    assert {"params", "paper", "series", "reach", "summary", "png", "seconds", "notes"} <= set(doc)
    assert doc["paper"]["numbers"] is None and "drastically" in doc["paper"]["fig13"]
    assert [r["flood_rate"] for r in doc["series"]] == [0.0, 200.0]
    for row in doc["series"]:
        assert "paper" in row
        for v in ("guard", "noguard", "plain"):
            pt = row[v]
            for key in (
                "throughput",
                "relative",
                "sustainable",
                "reached",
                "utilisation",
                "reach_by_hop",
                "max_utilisation",
                "flood_sent",
                "drops",
            ):
                assert key in pt
    first = doc["series"][0]
    assert all(first[v]["relative"] == 1.0 for v in ("guard", "noguard", "plain"))
    assert doc["summary"]["guard_contained"] is True
    assert doc["summary"]["noguard_spreads_further"] is True
    hops = [r["hops"] for r in doc["reach"]["by_hop"]]
    assert hops == sorted(hops) and hops[0] == 1
    assert doc["params"]["brokers"] == 7 and doc["params"]["attackers"] == ["b6"]
    assert doc["png"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_flood_table_output(tmp_path):
    res = CliRunner().invoke(
        _cli(),
        ["experiments", "flood", "--variants", "guard", "--out", str(tmp_path / "f.png"), *SMALL],
    )
    assert res.exit_code == 0, res.output
    assert "Fig. 13" in res.output and "Fig. 3" in res.output and "guard" in res.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--flood-rates", "1,x"], "--flood-rates must be comma-separated numbers"),
        (["--flood-rates", ","], "--flood-rates needs at least one rate"),
        (["--variants", "guard,spam"], "--variants must be drawn from"),
        (["--depth", "0"], "depth"),
        (["--attackers", "9", "--depth", "2"], "attackers must be between"),
        (["--route-us", "-1"], "costs and scale must be numbers >= 0"),
        (["--load", "0"], "load must be a positive number"),
    ],
)
def test_bad_options_give_one_line_errors(tmp_path, args, message):
    res = CliRunner().invoke(
        _cli(), ["experiments", "flood", "--out", str(tmp_path / "f.png"), *args]
    )
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubguard: error: ") and message in lines[0]
    assert not (tmp_path / "f.png").exists()
