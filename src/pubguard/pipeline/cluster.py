"""A Spark standalone master and worker on loopback, from the pyspark wheel.

For tests and for trying distribution on one machine (ARCHITECTURE.md, Pipeline): the wheel
ships ``bin/spark-class`` and every jar, so ``spark-class org.apache.spark.deploy.master.Master``
and ``...deploy.worker.Worker`` run with nothing else installed beyond a JDK. Ports are picked
free on 127.0.0.1; pids, logs and the master URL live in a state directory so ``down`` (possibly
from another process) stops exactly the processes ``up`` started.

``up`` returns only when the worker has registered with the master (polled on the master's
JSON status page), so a job submitted right after finds executors.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pubguard.errors import StateError, TransportError
from pubguard.pipeline.session import spark_home

__all__ = ["ClusterInfo", "cluster_down", "cluster_status", "cluster_up", "default_state_dir"]

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STATE_FILE = "cluster.json"
DEFAULT_START_TIMEOUT = 120.0


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "pubguard" / "spark-cluster"


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    master_url: str
    master_ui: str
    master_pid: int
    worker_pid: int  # the first worker (every worker's pid: worker_pids)
    cores: int  # per worker
    memory: str  # per worker
    state_dir: str
    worker_pids: tuple[int, ...] = ()

    @property
    def workers(self) -> int:
        return len(self.worker_pids) or 1

    @classmethod
    def from_json(cls, d: dict[str, object]) -> ClusterInfo:
        d = dict(d)
        pids: Any = d.get("worker_pids") or (d["worker_pid"],)
        d["worker_pids"] = tuple(int(p) for p in pids)
        return cls(**d)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's pid
        return True
    return True


def _env(state: Path, java_opts: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_HOME"] = spark_home()
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_LOG_DIR"] = str(state / "logs")
    env["SPARK_WORKER_DIR"] = str(state / "work")
    env["SPARK_NO_DAEMONIZE"] = "1"
    env["PYSPARK_PYTHON"] = sys.executable
    if java_opts:  # read by spark-class for the Master and Worker classes
        theirs = env.get("SPARK_DAEMON_JAVA_OPTS", "")
        env["SPARK_DAEMON_JAVA_OPTS"] = f"{theirs} {java_opts}".strip()
    return env


def _spawn(
    cls: str, args: list[str], state: Path, name: str, java_opts: str = ""
) -> subprocess.Popen[bytes]:
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    log = (state / "logs" / f"{name}.log").open("ab")
    try:
        return subprocess.Popen(
            [spark_class, cls, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_env(state, java_opts),
            start_new_session=True,  # its own process group: `down` signals exactly it
        )
    finally:
        log.close()


def _master_json(ui: str) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"{ui}/json/", timeout=2) as resp:  # noqa: S310 - loopback
            data = json.loads(resp.read())
            return data if isinstance(data, dict) else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _stop_pid(pid: int, timeout: float = 20.0) -> None:
    if not _alive(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        try:  # reap if it is our child
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cluster_status(state_dir: Path | str | None = None) -> ClusterInfo | None:
    """The running cluster recorded in ``state_dir``, or None."""
    state = Path(state_dir) if state_dir else default_state_dir()
    f = state / STATE_FILE
    if not f.exists():
        return None
    try:
        info = ClusterInfo.from_json(json.loads(f.read_text()))
    except (ValueError, TypeError, KeyError):
        return None
    if not (_alive(info.master_pid) and all(_alive(p) for p in info.worker_pids)):
        return None
    return info


def cluster_up(
    state_dir: Path | str | None = None,
    *,
    cores: int = 2,
    memory: str = "2g",
    workers: int = 1,
    timeout: float = DEFAULT_START_TIMEOUT,
    java_opts: str = "",
) -> ClusterInfo:
    """Start a master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1;
    wait until every worker is registered. ``java_opts``: extra options for the master's and
    workers' own JVMs (``SPARK_DAEMON_JAVA_OPTS``), not for the executors they launch."""
    if workers < 1:
        raise StateError("a cluster needs at least one worker")
    state = Path(state_dir) if state_dir else default_state_dir()
    running = cluster_status(state)
    if running is not None:
        raise StateError(
            f"a cluster is already running from {state} ({running.master_url}); "
            "run `pubguard spark-cluster down` first"
        )
    for sub in ("logs", "work"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    port, ui_port = _free_port(), _free_port()
    master_url, ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    master = _spawn(
        MASTER_CLASS,
        ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
        state,
        "master",
        java_opts,
    )
    started: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + timeout
        while _master_json(ui) is None:
            if master.poll() is not None or time.monotonic() > deadline:
                raise TransportError(
                    f"spark master did not start (see {state / 'logs' / 'master.log'})"
                )
            time.sleep(0.25)
        for i in range(workers):
            started.append(
                _spawn(
                    WORKER_CLASS,
                    [
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(_free_port()),
                        "--webui-port",
                        str(_free_port()),
                        "--cores",
                        str(cores),
                        "--memory",
                        memory,
                        "--work-dir",
                        str(state / "work" / f"worker-{i}"),
                        master_url,
                    ],
                    state,
                    "worker" if i == 0 else f"worker-{i}",
                    java_opts,
                )
            )
        while True:
            status = _master_json(ui) or {}
            if int(status.get("aliveworkers", 0) or 0) >= workers:  # type: ignore[call-overload]
                break
            if any(w.poll() is not None for w in started) or time.monotonic() > deadline:
                raise TransportError(
                    f"spark workers did not register (see {state / 'logs' / 'worker.log'})"
                )
            time.sleep(0.25)
    except BaseException:
        for p in (*started, master):
            _stop_pid(p.pid)
            p.wait()
        raise
    pids = tuple(w.pid for w in started)
    info = ClusterInfo(master_url, ui, master.pid, pids[0], cores, memory, str(state), pids)
    (state / STATE_FILE).write_text(json.dumps(info.to_json(), indent=2))
    return info


def cluster_down(state_dir: Path | str | None = None) -> ClusterInfo | None:
    """Stop the worker and master recorded in ``state_dir`` (None if nothing was recorded)."""
    state = Path(state_dir) if state_dir else default_state_dir()
    f = state / STATE_FILE
    if not f.exists():
        return None
    try:
        info = ClusterInfo.from_json(json.loads(f.read_text()))
    except (ValueError, TypeError, KeyError):
        f.unlink()
        return None
    for pid in info.worker_pids:
        _stop_pid(pid)
    _stop_pid(info.master_pid)
    f.unlink()
    return info
