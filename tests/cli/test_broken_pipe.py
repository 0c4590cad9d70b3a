"""``pubguard ... | head``: when the reader of stdout goes away the command ends quietly with
the status of a process killed by SIGPIPE (141), as ``yes | head -1`` does. Real pipes, a real
shell, a fresh interpreter."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from pubguard.cli.main import READER_GONE_STATUS

PUBGUARD = f"{shlex.quote(sys.executable)} -m pubguard.cli.main"


def _workload(d: Path, events: int) -> Path:
    # far more output than a pipe buffers (64 KiB), so the writer meets the closed pipe
    d.mkdir()
    sub = {"subscriber": "s1", "filter": {"id": "f1", "constraints": [["age", ">", 20]]}}
    (d / "subscriptions.jsonl").write_text(json.dumps(sub) + "\n")
    lines = (json.dumps({"id": f"e{i}", "attrs": {"age": i % 50}}) for i in range(events))
    (d / "events.jsonl").write_text("\n".join(lines) + "\n")
    return d


def _pipe(cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {cmd}"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_match_into_head_ends_quietly_with_the_sigpipe_status(tmp_path: Path) -> None:
    w = _workload(tmp_path / "w", 20_000)
    res = _pipe(f"{PUBGUARD} match --workload {shlex.quote(str(w))} | head -1")
    assert json.loads(res.stdout) == {"event": "e0", "filters": [], "subscribers": []}
    assert res.stderr == ""  # no "Broken pipe", no "Exception ignored", no traceback
    assert res.returncode == READER_GONE_STATUS == 141


def test_a_reader_that_takes_everything_still_gets_status_zero(tmp_path: Path) -> None:
    w = _workload(tmp_path / "w", 100)
    res = _pipe(f"{PUBGUARD} match --workload {shlex.quote(str(w))} | tail -1")
    assert res.returncode == 0 and res.stderr == ""
    assert json.loads(res.stdout)["event"] == "e99"
