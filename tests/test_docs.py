"""Every fenced code block in ``README.md`` and ``docs/*.md`` runs here, or says why it does not.

The convention for writing docs:

- ```` ```python ````: run as a script in a fresh temporary folder (its working directory),
  bounded by a timeout.
- ```` ```sh ```` / ```` ```bash ````: run with ``bash -e`` in a fresh temporary folder, with the
  package's ``pubguard`` on ``PATH`` and ``.venv`` linked there (as in a clone); ``/tmp/`` in a
  command means that folder, so runs never collide.
- ```` ```console ````: a transcript. Lines starting with ``$`` are the commands (a trailing
  ``\\`` continues one) and run as for ``sh``; the other lines are sample output, not compared,
  except the JSON events it shows a subscriber print, which the run must print.
- ```` ```toml ```` and ```` ```json ```` must parse; ```` ```text ```` is not run (diagrams,
  grammars, sample output).
- A ``python`` / ``sh`` / ``console`` block that cannot run here (a service that runs until
  stopped, a Spark cluster, minutes of CPU) is preceded by ``<!-- not run: REASON -->``, and
  REASON names where it is tested if it is.

Any other label, or none, fails :func:`test_every_block_is_labelled`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "sh", "bash", "console"}
PARSE = {"toml", "json"}
KNOWN = RUN | PARSE | {"text"}
TIMEOUT = 300.0  # bounds a block's run (a cluster started on a loaded machine), never a result
_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: (\S.*\S) -->$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason, from the marker line just above

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        above = lines[start - 1] if start else ""
        marker = _NOT_RUN.match(above)
        out.append(
            Block(path, start + 1, m.group(1), "\n".join(body) + "\n", marker and marker.group(1))
        )
        i += 1
    return out


ALL = [b for p in DOCS for b in blocks(p)]
RUNNABLE = [b for b in ALL if b.lang in RUN and b.not_run is None]


def _ids(b: Block) -> str:
    return b.id


def console_commands(text: str) -> str:
    """The commands of a ``console`` transcript (``$`` lines and their ``\\`` continuations)."""
    cmds: list[str] = []
    cont = False
    for line in text.splitlines():
        if cont:
            cmds.append(line)
        elif line.startswith("$ "):
            cmds.append(line[2:])
        else:
            continue
        cont = line.endswith("\\")
    return "\n".join(cmds) + "\n"


def test_every_block_is_labelled() -> None:
    bad = [f"{b.id}: label {b.lang!r}" for b in ALL if b.lang not in KNOWN]
    assert not bad, "label each block (python, sh, console, toml, json, text): " + "; ".join(bad)
    # a marker on a block that is not run anyway is a mistake (it would hide a future change)
    stray = [b.id for b in ALL if b.not_run and b.lang not in RUN]
    assert not stray
    assert RUNNABLE, "the docs show no runnable block at all"


def test_the_network_examples_are_run() -> None:
    """The blocks the convention must not let slip: the Python examples and the quick
    starts are run, not marked."""
    run = {(b.path.name, b.lang) for b in RUNNABLE}
    assert ("network.md", "python") in run and ("network.md", "console") in run
    assert ("README.md", "sh") in run
    assert len([b for b in RUNNABLE if b.lang == "python"]) >= 2


@pytest.mark.parametrize("block", [b for b in ALL if b.lang in PARSE], ids=_ids)
def test_data_block_parses(block: Block) -> None:
    if block.lang == "toml":
        tomllib.loads(block.text)
    else:
        json.loads(block.text)


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(tmp)
    for k in ("PUBGUARD_CA_PASSPHRASE", "PUBGUARD_TLS_PASSPHRASE", "COLUMNS"):
        env.pop(k, None)
    return env


def _run(cmd: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run in a session of its own, so a timeout ends every process the block started."""
    with subprocess.Popen(
        cmd,
        cwd=tmp,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail(f"{shlex.join(cmd)} still running after {TIMEOUT:.0f} s:\n{out}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def _stop_clusters(script: str, tmp: Path) -> None:
    """A block that failed half-way may have left a cluster up: stop each state folder's
    (what ``pubguard cluster down --state`` does, called here rather than started as one
    more process per folder after every block)."""
    from pubguard.ops.cluster import stop_cluster

    for state in set(re.findall(r"--state ([^\s;]+)", script)):
        folder = tmp / state
        if folder.is_dir():
            with contextlib.suppress(Exception):
                stop_cluster(folder)


def _check(r: subprocess.CompletedProcess[str], block: Block) -> None:
    assert r.returncode == 0, f"{block.id} failed (exit {r.returncode}):\n{r.stdout}"
    for bad in ("Traceback", "Broken pipe", "Error:"):
        assert bad not in r.stdout, f"{block.id}: {bad!r} in its output:\n{r.stdout}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.lang != "python"], ids=_ids)
def test_shell_block_runs(block: Block, tmp_path: Path) -> None:
    text = console_commands(block.text) if block.lang == "console" else block.text
    script = text.replace("/tmp/", f"{tmp_path}/")
    (tmp_path / ".venv").symlink_to(sys.prefix)  # the clone's .venv, for `. .venv/bin/activate`
    (tmp_path / "block.sh").write_text(f"set -e\n{script}wait\n")
    try:
        r = _run(["bash", "block.sh"], tmp_path)
    finally:
        _stop_clusters(script, tmp_path)
    _check(r, block)
    if block.lang == "console":  # the events a transcript shows a subscriber print, it prints
        shown = [x for x in block.text.splitlines() if x.startswith("{") and "..." not in x]
        for line in shown:
            assert json.loads(line) in _json_lines(r.stdout), f"{block.id}: no {line} printed"


def _json_lines(out: str) -> list[object]:
    found = []
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            found.append(json.loads(line))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in RUNNABLE if b.lang == "python"], ids=_ids)
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    (tmp_path / "block.py").write_text(block.text)
    _check(_run([sys.executable, "block.py"], tmp_path), block)


CLIENT_DRIVER = """
import asyncio
import sys

from block import open_client
from pubguard.net.config import parse_cluster_config
from pubguard.ops.cluster import run_local_cluster


async def main() -> None:
    config = parse_cluster_config({"topology": {"kind": "tree", "arity": 1, "depth": 0}})
    async with run_local_cluster(config, "state") as cluster:
        name = next(iter(cluster.config.brokers))
        alice = cluster.pki.identity("alice")
        client = await open_client(
            cluster.url(name), str(alice.cert_path), str(alice.key_path), str(alice.ca_path)
        )
        async with client:
            sub = await client.subscribe("age > 20")
            await client.flush()
            await client.publish({"age": 30})
            delivery = await sub.next(timeout=60)
            print("delivered", dict(delivery.event.attrs))


asyncio.run(main())
"""


@pytest.mark.slow
def test_network_md_client_example_connects_with_mutual_tls(tmp_path: Path) -> None:
    """The example that builds its own client (``open_client``) imports what it names from
    where the docs say, and its client talks to a real broker process over mutual TLS."""
    (block,) = [b for b in RUNNABLE if b.lang == "python" and "def open_client" in b.text]
    (tmp_path / "block.py").write_text(block.text)
    (tmp_path / "driver.py").write_text(CLIENT_DRIVER)
    r = _run([sys.executable, "driver.py"], tmp_path)
    _check(r, block)
    assert "delivered {'age': 30}" in r.stdout
