"""The network CLI: cluster up / status / publish / subscribe / down, and config errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli import net_cmds
from pubguard.cli.main import cli
from tests.loopback import PATIENCE, wait_until

if "publish" not in cli.commands:  # until pubguard.cli.main lists net_cmds
    net_cmds.register(cli)

PUBGUARD = [
    sys.executable,
    "-c",
    "from pubguard.cli.main import cli; from pubguard.cli import net_cmds\n"
    "'publish' in cli.commands or net_cmds.register(cli)\n"
    "cli(prog_name='pubguard')",
]


def test_bad_broker_config_is_one_line_error(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cfg.write_text('name = "b1"\nport = 99999\ntls_enabled = false\n')
    r = CliRunner().invoke(cli, ["broker", "--config", str(cfg)])
    assert r.exit_code == 1
    assert "port: 99999 is not a port number" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_status_without_cluster_fails_cleanly(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["status", "--state", str(tmp_path)])
    assert r.exit_code == 1 and "no cluster is running" in r.output


def test_bench_rejects_unknown_profile() -> None:
    r = CliRunner().invoke(cli, ["bench", "network", "--profile", "nope"])
    assert r.exit_code == 2 and "known profiles" in r.output


@pytest.mark.slow
def test_bench_plain_quick_json_and_plot(tmp_path: Path) -> None:
    # the method end to end on one in-process broker: subscribers in their own process,
    # latencies joined by event id, one JSON object, and the per-tree-size plot
    png = tmp_path / "plot" / "bench.png"
    r = CliRunner().invoke(
        cli,
        [
            "bench",
            "network",
            "--profile",
            "plain",
            "--brokers",
            "1",
            "--payload",
            "16",
            "--subscribers",
            "3",
            "--in-process",
            "--quick",
            "--repeat",
            "2",
            "--json",
            "--plot",
            str(png),
        ],
    )
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    runs = obj["max_throughput_runs_eps"]  # two searches, lowest first; the median reported
    assert len(runs) == 2 and runs == sorted(runs) and obj["max_throughput_eps"] == runs[0]
    assert obj["profile"] == "plain" and obj["brokers"] == 1 and obj["subscribers"] == 3
    assert obj["max_throughput_eps"] >= 1000 and not obj["drops"]
    assert obj["latency_samples"] > 0 and 0 < obj["latency_p50_ms"] <= obj["latency_p99_ms"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_plot_refuses_an_unwritable_path(tmp_path: Path) -> None:
    from pubguard.ops.bench.plot import plot_network

    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = [
        {
            "profile": "plain",
            "payload": 16,
            "brokers": 1,
            "max_throughput_eps": 1.0,
            "latency_p50_ms": 1.0,
            "latency_p99_ms": 2.0,
        }
    ]
    with pytest.raises(OSError):
        plot_network(r, blocker / "sub" / "x.png")


@pytest.mark.slow
def test_cluster_up_publish_subscribe_down(tmp_path: Path) -> None:
    state = tmp_path / "net"
    runner = CliRunner()
    try:
        r = runner.invoke(cli, ["cluster", "up", "--state", str(state)])
        assert r.exit_code == 0, r.output
        assert "7 brokers up" in r.output
        sub = subprocess.Popen(
            [
                *PUBGUARD,
                "subscribe",
                "--state",
                str(state),
                "--broker",
                "b4",
                "--count",
                "1",
                "--timeout",
                str(int(PATIENCE)),
                "price > 10",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:

            def at_root() -> bool:
                st = json.loads(
                    runner.invoke(cli, ["status", "--state", str(state), "--json"]).output
                )
                return bool(st["b0"]["subscriptions"] >= 1)

            wait_until(at_root, "the subscription at the root", every=0.1)
            r = runner.invoke(
                cli,
                [
                    "publish",
                    "--state",
                    str(state),
                    "--broker",
                    "b6",
                    '{"id": "x1", "attrs": {"price": 5}}',
                    '{"id": "x2", "attrs": {"price": 12}}',
                ],
            )
            assert r.exit_code == 0, r.output
            out, err = sub.communicate(timeout=2 * PATIENCE)
        finally:
            sub.kill()
        assert sub.returncode == 0, err
        assert [json.loads(line)["id"] for line in out.decode().splitlines()] == ["x2"]
        r = runner.invoke(cli, ["status", "--state", str(state)])
        assert r.exit_code == 0 and "b6" in r.output
        r = runner.invoke(cli, ["publish", "--state", str(state), "{not json"])
        assert r.exit_code == 1 and "argument 1:" in r.output and "column 2" in r.output
    finally:
        r = runner.invoke(cli, ["cluster", "down", "--state", str(state)])
    assert "stopped 7 brokers" in r.output
    assert not (state / "cluster.json").exists()


@pytest.mark.slow
def test_cluster_demo_in_process_is_correct_and_leaves_nothing_running() -> None:
    r = CliRunner().invoke(cli, ["cluster", "demo", "--events", "120", "--in-process", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["correct"] and out["brokers"] == 7
    assert sum(out["received"].values()) > 30


def test_median_run_takes_the_middle_search_and_lists_all() -> None:
    from pubguard.ops.bench.network import _median_run

    runs = [
        {"max_throughput_eps": x, "tag": t} for x, t in ((900.0, "a"), (300.0, "b"), (600.0, "c"))
    ]
    m = _median_run(runs)
    assert m["tag"] == "c" and m["max_throughput_runs_eps"] == [300.0, 600.0, 900.0]
    assert "max_throughput_runs_eps" not in runs[2]  # the inputs are not modified
    assert _median_run([{"max_throughput_eps": None}])["max_throughput_runs_eps"] == [None]
    # unconfirmed saturations are summed over the runs (a run without the count adds none)
    runs[0]["saturations_unconfirmed"], runs[1]["saturations_unconfirmed"] = 2, 1
    assert _median_run(runs)["saturations_unconfirmed"] == 3
