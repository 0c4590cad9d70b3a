"""``pubguard experiments hermes --small`` and ``pubguard demo --scenario police`` as a new
user runs them (hermes-encrypted-access-control.txt Figs. 1, 6-8, §4.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli


def test_experiments_hermes_small_writes_json_rows_and_plots(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["experiments", "hermes", "--small", "--json", "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out == json.loads((tmp_path / "results.json").read_text()) | {"plots": out["plots"]}
    for row in out["fig6"] + out["fig7"]:
        assert row["plain_eps"] > 0 and row["hermes-attribute_eps"] > 0
        assert 0 < row["attribute_ratio"] < 2  # a ratio measured in the same run
    assert {r["attributes"]: r["paper_attribute_ratio"] for r in out["fig6"]} == {
        1: 0.46,
        10: 0.117,
    }
    by_groups = {r["groups"]: r for r in out["fig8"]}
    ten = by_groups[10]
    assert ten["attribute_hops"] < ten["emulation_hops"] < ten["emulation_all_hops"]
    assert ten["paper_emulation_hops"] == 251.0
    fit = out["oft"]["fit_a_log2n_plus_b"]["join_updates"]
    assert fit["a"] == pytest.approx(1.0, abs=0.1) and fit["r2"] > 0.95  # log2 n, §4.1
    assert set(out["goals"]) >= {"fig6_attribute_ratio_at_1", "fig7_worst_overhead"}
    for p in out["plots"]:
        assert Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_demo_police_scenario_ends_cleanly_and_each_broker_reads_what_it_may() -> None:
    res = CliRunner().invoke(cli, ["demo", "--scenario", "police", "--events", "6", "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)["police"]
    assert r["correct"] and r["clean"]
    brokers = {b["name"]: b for b in r["brokers"]}
    assert brokers["ccs1"]["readable"] == ["numberplate"]  # Fig. 1: numberplate only
    assert "location" not in brokers["ccs1"]["plaintext_found"]
    rv = brokers[r["rendezvous"]]
    assert rv["readable"] == [] and rv["plaintext_found"] == [] and rv["publications_routed"] > 0
    assert all(set(e) == {"numberplate"} for e in r["delivered"]["ccs"])
