"""``pubguard experiments vcaps --small``: the v-CAPS figures on the smallest workload."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from pubguard.cli.main import cli


def test_small_run_prints_every_profile_beside_the_paper(tmp_path: Path) -> None:
    png = tmp_path / "vcaps.png"
    res = CliRunner().invoke(
        cli, ["experiments", "vcaps", "--small", "--events", "12", "--json", "--plot", str(png)]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    (w,) = doc["workloads"]
    assert w["filters"] == 100 and w["events"] == 12
    assert set(w["profiles"]) == {"plain", "vcaps-rv", "vcaps-srv", "vcaps-srv-fast"}
    assert doc["checks"]["deliveries_equal_reference"] is True
    for r in w["profiles"].values():
        assert r["deliveries"] == w["reference_deliveries"]
    assert doc["paper"]["deliveries"] == {"smallest": 5459, "largest": 125_418}
    steady = w["steady"]  # led by the steady broker figure: CPU time, interleaved repeats
    assert steady["repeats"] == 5 and set(steady["broker_ms_median"]) == {
        "plain",
        "vcaps-rv",
        "vcaps-srv-fast",
    }
    checks = list(doc["checks"])
    assert checks.index("steady_fast_over_rv_broker_popular") < checks.index(
        "fast_over_rv_broker_popular_wallclock_sums"
    )
    spread = doc["checks"]["steady_fast_over_rv_broker_popular"]
    assert spread["min"] <= spread["q1"] <= spread["median"] <= spread["q3"] <= spread["max"]
    assert png.stat().st_size > 10_000


def test_unknown_workload_is_one_line() -> None:
    res = CliRunner().invoke(cli, ["experiments", "vcaps", "--filters", "7"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        "pubguard: error: --filters 7: one of 100, 500, 1000, 5000, 10000"
    ]
