"""Client sessions of the CLI against a cluster it started (real broker processes, mutual TLS).

What a new-user run found: every CLI command connected as ``cli``, so a background
``subscribe`` and a ``publish`` on one broker knocked each other off (0 of 3 events, exit 0);
two subscribers under one identity flapped with nothing logged; a subscriber that lost its
broker and came back as a new session said nothing about the events it missed; and a durable
subscription was only reachable from Python. One three-broker tree (b0 the root, b1 and b2 its
children) is shared by the module; the restart test runs last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli

pytestmark = pytest.mark.slow

TREE = '[topology]\nkind = "tree"\narity = 2\ndepth = 1\n'
WAIT = 60.0  # seconds a step may take at most on a loaded machine (bounds waits only)


@dataclass
class Net:
    state: Path
    tmp: Path
    extra: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pubguard.cli.main", *args, "--state", str(self.state)],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )

    def start(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
        """A CLI command in the background; its stdout and stderr go to files."""
        out, err = self.tmp / f"{name}.out", self.tmp / f"{name}.err"
        cmd = [sys.executable, "-m", "pubguard.cli.main", *args, "--state", str(self.state)]
        with out.open("wb") as o, err.open("wb") as e:
            p = subprocess.Popen(cmd, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        self.extra.append(p)
        return p, out, err

    def log(self, broker: str) -> str:
        return (self.state / broker / "broker.log").read_text()


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes] | None = None) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = path.read_text() if path.exists() else ""
        if text in got:
            return got
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.05)
    got = path.read_text() if path.exists() else ""
    raise AssertionError(f"{text!r} not in {path.name}: {got!r}")


def _finish(p: subprocess.Popen[bytes]) -> int:
    return p.wait(timeout=WAIT)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    tmp = tmp_path_factory.mktemp("sessions")
    (tmp / "cluster.toml").write_text(TREE)
    state = tmp / "net"
    runner = CliRunner()
    res = runner.invoke(
        cli, ["cluster", "up", "--config", str(tmp / "cluster.toml"), "--state", str(state)]
    )
    assert res.exit_code == 0, res.output
    n = Net(state, tmp)
    try:
        yield n
    finally:
        for p in n.extra:  # only the processes this module started
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        runner.invoke(cli, ["cluster", "down", "--state", str(state)])


def test_background_subscribe_and_publish_on_one_broker_deliver_everything(net: Net) -> None:
    sub, out, err = net.start("bg", "subscribe", "--broker", "b0", "--count", "3", "bg >= 0")
    _wait_for(err, "subscribed to", sub)
    events = [json.dumps({"attrs": {"bg": i}, "id": f"bg{i}"}) for i in range(3)]
    res = net.run("publish", "--broker", "b0", *events)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["published", "bg0", "published", "bg1", "published", "bg2"]
    assert _finish(sub) == 0, err.read_text()
    got = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert got == ["bg0", "bg1", "bg2"]
    assert "replaced" not in net.log("b0")  # two processes, two identities: nobody knocked off


def test_a_replaced_subscriber_stops_with_one_line_and_the_broker_warns(net: Net) -> None:
    same = ("--broker", "b2", "--identity", "cli/twin")
    first, _, err1 = net.start("twin1", "subscribe", *same, "twin >= 0")
    _wait_for(err1, "subscribed to", first)
    second, _, err2 = net.start("twin2", "subscribe", *same, "--count", "1", "twin >= 0")
    _wait_for(err2, "subscribed to", second)
    assert _finish(first) == 1  # it stops instead of taking the identity back in a loop
    lines = err1.read_text().splitlines()
    assert lines[-1] == (
        "pubguard: error: another connection with identity 'cli/twin' replaced this one at "
        "broker b2 (give each client process its own identity)"
    )
    assert "Traceback" not in err1.read_text()
    warned = [ln for ln in net.log("b2").splitlines() if "replaced by a new connection" in ln]
    assert len(warned) == 1 and "WARNING" in warned[0] and "'cli/twin'" in warned[0]
    # the survivor still works
    res = net.run("publish", "--broker", "b2", json.dumps({"attrs": {"twin": 1}, "id": "tw1"}))
    assert res.returncode == 0, res.stderr
    assert _finish(second) == 0
    assert len([ln for ln in net.log("b2").splitlines() if "replaced by" in ln]) == 1  # no flap


def test_durable_sub_id_survives_a_broker_restart_and_a_fresh_session_says_so(net: Net) -> None:
    """b1 is killed (-9) and started again by hand: the durable subscriber gets what was
    published meanwhile, and says nothing; the other one says it may have missed events."""
    durable, dout, derr = net.start(
        "durable",
        "subscribe",
        "--broker",
        "b1",
        "--durable",
        "--sub-id",
        "keep",
        "--count",
        "3",
        "rs >= 0",
    )
    plain, _, perr = net.start("plain", "subscribe", "--broker", "b1", "rs >= 0")
    _wait_for(derr, "subscribed to", durable)
    _wait_for(perr, "subscribed to", plain)
    info = json.loads((net.state / "cluster.json").read_text())["b1"]
    os.killpg(info["pid"], signal.SIGKILL)  # the detached broker leads its process group
    events = [json.dumps({"attrs": {"rs": i}, "id": f"rs{i}"}) for i in range(3)]
    res = net.run("publish", "--broker", "b0", *events)  # b0 keeps them for b1
    assert res.returncode == 0, res.stderr
    log = (net.state / "b1" / "restart.log").open("ab")
    broker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pubguard.net.server.main",
            "--config",
            str(net.state / "b1" / "broker.toml"),
        ],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    net.extra.append(broker)
    assert _finish(durable) == 0, derr.read_text()
    got = [json.loads(line)["id"] for line in dout.read_text().splitlines()]
    assert got == ["rs0", "rs1", "rs2"]
    assert "missed" not in derr.read_text()  # resumed: nothing was lost
    notice = _wait_for(perr, "may have been missed", plain)
    assert notice.splitlines()[-1] == (
        "pubguard: reconnected to b1 as a new session: events published while the link was "
        "down may have been missed"
    )


def test_durable_needs_a_sub_id(net: Net) -> None:
    res = net.run("subscribe", "--durable", "x > 1")
    assert res.returncode == 2
    assert "needs --sub-id" in res.stderr
