"""The life of a ``pubguard cluster`` after a crash, over real broker processes: one broker
killed with ``kill -9`` is shown down and brought back alone (``cluster up`` again, or
``cluster restart``); a broker started by hand from its ``broker.toml`` is stopped by
``cluster down``; a port really in use is reported as such, without earlier runs' log lines;
a wildcard bind address and a certificate that does not verify are one line each."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pubguard.cli.main import cli
from pubguard.crypto.x509 import Role
from pubguard.net.server.pidfile import read_pidfile
from pubguard.ops.pki import ClusterPki

PUBGUARD = [sys.executable, "-m", "pubguard.cli.main"]
THREE = '[topology]\nkind = "tree"\narity = 2\ndepth = 1\n'  # b0 with children b1, b2
ONE = '[topology]\nkind = "tree"\narity = 2\ndepth = 0\n'


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _up(tmp_path: Path, topology: str) -> Path:
    config, state = tmp_path / "cluster.toml", tmp_path / "net"
    config.write_text(topology)
    r = _run("cluster", "up", "--config", str(config), "--state", str(state))
    assert r.exit_code == 0, r.output
    return state


def _pid(state: Path, name: str) -> int:
    rec = read_pidfile(state / name)
    assert rec is not None, f"{name} wrote no pid file"
    return rec.pid


def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split()[2] == "Z":
            return True  # a zombie: it exited, its parent (not us) has not reaped it yet
        time.sleep(0.05)
    return False


def _kill9(state: Path, name: str) -> int:
    pid = _pid(state, name)
    os.killpg(pid, signal.SIGKILL)
    assert _gone(pid)
    return pid


def _status(state: Path) -> dict[str, dict[str, object]]:
    r = _run("status", "--state", str(state), "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)  # type: ignore[no-any-return]


def _routes(state: Path, sub_at: str, pub_at: str, event_id: str) -> None:
    """A subscriber at ``sub_at`` receives an event published at ``pub_at``."""
    sub = subprocess.Popen(
        [
            *PUBGUARD,
            "subscribe",
            "--state",
            str(state),
            "--broker",
            sub_at,
            "--identity",
            "cli/sub",
            "--count",
            "1",
            "--timeout",
            "60",
            "price > 10",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while _status(state)["b0"]["subscriptions"] == 0:  # until it reached the root
            assert time.monotonic() < deadline, "the subscription never reached b0"
            assert sub.poll() is None, sub.communicate()
            time.sleep(0.1)
        event = json.dumps({"id": event_id, "attrs": {"price": 12}})
        r = _run("publish", "--state", str(state), "--broker", pub_at, event)
        assert r.exit_code == 0, r.output
        out, err = sub.communicate(timeout=60)
    finally:
        sub.kill()
        sub.wait()
    assert sub.returncode == 0, err
    assert [json.loads(ln)["id"] for ln in out.decode().splitlines()] == [event_id]


@pytest.mark.slow
def test_a_killed_broker_shows_down_and_comes_back_alone(tmp_path: Path) -> None:
    state = _up(tmp_path, THREE)
    try:
        pids = {n: _pid(state, n) for n in ("b0", "b1", "b2")}
        _kill9(state, "b1")

        st = _status(state)  # down, neither an error nor a hang
        assert st["b1"]["down"] is True and "error" not in st["b1"]
        assert "subscriptions" in st["b0"] and "subscriptions" in st["b2"]
        table = _run("cluster", "status", "--state", str(state))
        assert table.exit_code == 0 and "down" in table.output

        r = _run("cluster", "up", "--state", str(state))  # on a running cluster
        assert r.exit_code == 0, r.output
        assert r.output.startswith("restarted b1;")
        assert _pid(state, "b0") == pids["b0"] and _pid(state, "b2") == pids["b2"]
        assert _pid(state, "b1") != pids["b1"]
        assert not any(s.get("down") for s in _status(state).values())
        _routes(state, "b1", "b2", "after-up")  # through the restarted broker

        r = _run("cluster", "up", "--state", str(state))
        assert r.exit_code == 0 and "all 3 brokers" in r.output and "already running" in r.output

        r = _run("cluster", "restart", "--state", str(state), "b2")  # a running one, by name
        assert r.exit_code == 0 and r.output.strip() == "restarted b2", r.output
        assert _pid(state, "b2") != pids["b2"] and _gone(pids["b2"], 0.1)
        _routes(state, "b2", "b1", "after-restart")
    finally:
        down = _run("cluster", "down", "--state", str(state))
    assert "stopped 3 brokers" in down.output


@pytest.mark.slow
def test_cluster_down_stops_a_broker_started_by_hand(tmp_path: Path) -> None:
    state = _up(tmp_path, THREE)
    hand = None
    try:
        _kill9(state, "b1")
        # the documented manual way, from another folder with a relative path
        hand = subprocess.Popen(
            [*PUBGUARD, "broker", "--config", os.path.relpath(state / "b1" / "broker.toml")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while (rec := read_pidfile(state / "b1")) is None or rec.pid != hand.pid:
            assert time.monotonic() < deadline and hand.poll() is None
            time.sleep(0.05)
        assert "subscriptions" in _status(state)["b1"]
    finally:
        down = _run("cluster", "down", "--state", str(state))
    try:
        assert down.exit_code == 0, down.output
        assert "stopped 3 brokers: b0, b1, b2" in down.output
        assert hand is not None and hand.wait(timeout=20) == 0  # SIGTERM: a clean stop
        assert not (state / "cluster.json").exists()
        assert not (state / "b1" / "pid").exists()  # the broker removed its own
    finally:
        if hand is not None and hand.poll() is None:
            hand.kill()


def test_a_port_in_use_is_named_without_old_log_lines(tmp_path: Path) -> None:
    state = _up(tmp_path, ONE)
    port = _status(state)["b0"]["port"]
    assert "stopped 1 brokers" in _run("cluster", "down", "--state", str(state)).output
    with (state / "b0" / "broker.log").open("a") as log:
        log.write("pubguard: error: OLD-RUN an earlier run's last words\n")
    with socket.socket() as taken:  # someone else now holds b0's sticky port
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        taken.bind(("127.0.0.1", int(str(port))))
        taken.listen()
        r = _run("cluster", "up", "--config", str(tmp_path / "cluster.toml"), "--state", str(state))
    if r.exit_code == 0:
        _run("cluster", "down", "--state", str(state))
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    assert lines == [
        f"pubguard: error: broker b0 exited with 1: broker b0: listen address "
        f"127.0.0.1:{port}: Address already in use"
    ]


def test_a_wildcard_host_is_refused_in_one_line(tmp_path: Path) -> None:
    config, state = tmp_path / "cluster.toml", tmp_path / "net"
    config.write_text('host = "0.0.0.0"\n' + ONE)
    r = _run("cluster", "up", "--config", str(config), "--state", str(state))
    if r.exit_code == 0:
        _run("cluster", "down", "--state", str(state))
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines() == [
        f"pubguard: error: {config}: host: '0.0.0.0' would listen on every interface, but "
        "clients verify the broker's certificate against the address they dial; set host "
        'to that address (e.g. "127.0.0.1")'
    ]
    assert not state.exists()


def test_a_certificate_that_does_not_verify_is_one_line(tmp_path: Path) -> None:
    state = _up(tmp_path, ONE)
    try:
        other = tmp_path / "other"  # the same brokers, trusted through another CA
        other.mkdir()
        shutil.copy(state / "cluster.json", other / "cluster.json")
        ClusterPki(other / "pki").identity("cli", Role.CLIENT)
        r = _run("publish", "--state", str(other), '{"attrs": {"price": 1}}')
    finally:
        _run("cluster", "down", "--state", str(state))
    assert r.exit_code == 1
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("pubguard: error: cannot connect to 127.0.0.1:")
    assert "the broker's certificate does not verify" in line
    assert "Error(" not in line and "_ssl.c" not in line
