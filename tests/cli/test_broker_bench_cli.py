"""``pubguard bench broker``: the in-process core bench reports agreement with the baseline."""

from __future__ import annotations

import json

from click.testing import CliRunner

from pubguard.cli.main import cli

SMALL = [
    "bench",
    "broker",
    "-n",
    "4",
    "-n",
    "40",
    "--events",
    "60",
    "--batch",
    "16",
    "--reference-events",
    "20",
    "--repeat",
    "1",
]


def test_bench_broker_json_reports_every_count_with_a_ratio() -> None:
    r = CliRunner().invoke(cli, [*SMALL, "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert report["profile"] == "plain" and report["goal_events_per_s"] == 20_000
    rows = report["results"]
    assert [row["subscriptions"] for row in rows] == [4, 40]
    for row in rows:
        assert row["agrees"] is True  # the indexed core routes as the linear baseline does
        assert row["deliveries_per_event"] == 1.0  # fan-out one, as in bench network
        assert row["handle_events_per_s"] > 0 and row["ratio"] > 0


def test_bench_broker_table_and_bad_input() -> None:
    r = CliRunner().invoke(cli, SMALL)
    assert r.exit_code == 0 and "bench broker" in r.output and "yes" in r.output
    bad = CliRunner().invoke(cli, ["bench", "broker", "-n", "0"])
    assert bad.exit_code == 2 and "Invalid value" in bad.output
