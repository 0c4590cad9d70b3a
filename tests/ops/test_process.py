"""Finding and stopping a state folder's brokers from the pid files they write: a pid that
now belongs to another process (recycled after a crash) is never signalled."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pubguard.net.server.pidfile import live_pid, read_pidfile, write_pidfile
from pubguard.ops.cluster import running_brokers, stop_cluster

BROKER_CMD = [sys.executable, "-m", "pubguard.net.server.main", "--config"]


def _stranger() -> subprocess.Popen[bytes]:
    """An unrelated process leading its own group, as a broker started by the cluster does."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )


def _state(tmp_path: Path, pid: int) -> Path:
    """A state folder whose broker b0 crashed, its pid now another process's."""
    state = tmp_path / "net"
    b0 = state / "b0"
    b0.mkdir(parents=True)
    config = b0 / "broker.toml"
    config.write_text('name = "b0"\n')
    (b0 / "pid").write_text(json.dumps({"pid": pid, "cmdline": [*BROKER_CMD, str(config)]}))
    entry = {"pid": pid, "port": 1, "config": str(config)}
    (state / "cluster.json").write_text(json.dumps({"b0": entry}))
    return state


def test_a_recycled_pid_is_not_stopped(tmp_path: Path) -> None:
    stranger = _stranger()
    try:
        state = _state(tmp_path, stranger.pid)
        assert live_pid(state / "b0") is None
        assert running_brokers(state) == {}
        assert stop_cluster(state) == []
        assert stranger.poll() is None  # still running: it was never the broker
        assert not (state / "cluster.json").exists()  # no broker of it runs
    finally:
        stranger.kill()
        stranger.wait()


def test_a_pid_file_names_this_process_with_its_command_line(tmp_path: Path) -> None:
    rec = write_pidfile(tmp_path)
    assert read_pidfile(tmp_path) == rec
    assert live_pid(tmp_path) == rec.pid  # alive, and the command line still matches
    (tmp_path / "pid").write_text("12345")  # the old format, or garbage: no record
    assert read_pidfile(tmp_path) is None and live_pid(tmp_path) is None
