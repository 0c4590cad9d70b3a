"""The network CLI: cluster up / status / publish / subscribe / down, and config errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli import net_cmds
from pubguard.cli.main import cli

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
def test_cluster_up_publish_subscribe_down(tmp_path: Path) -> None:
    state = tmp_path / "net"
    runner = CliRunner()
    try:
        r = runner.invoke(cli, ["cluster", "up", "--state", str(state)])
        assert r.exit_code == 0, r.output
        assert "7 brokers up" in r.output
        sub = subprocess.Popen(
            [*PUBGUARD, "subscribe", "--state", str(state), "--broker", "b4", "--count", "1",
             "--timeout", "30", "price > 10"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # until the subscription reached the root
                st = json.loads(
                    runner.invoke(cli, ["status", "--state", str(state), "--json"]).output
                )
                if st["b0"]["subscriptions"] >= 1:
                    break
                time.sleep(0.1)
            r = runner.invoke(cli, ["publish", "--state", str(state), "--broker", "b6",
                                    '{"id": "x1", "attrs": {"price": 5}}',
                                    '{"id": "x2", "attrs": {"price": 12}}'])  # fmt: skip
            assert r.exit_code == 0, r.output
            out, err = sub.communicate(timeout=30)
        finally:
            sub.kill()
        assert sub.returncode == 0, err
        assert [json.loads(line)["id"] for line in out.decode().splitlines()] == ["x2"]
        r = runner.invoke(cli, ["status", "--state", str(state)])
        assert r.exit_code == 0 and "b6" in r.output
        r = runner.invoke(cli, ["publish", "--state", str(state), "{not json"])
        assert r.exit_code == 1 and "<events>:1" in r.output
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
