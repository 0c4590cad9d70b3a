"""``pubguard workload generate|info`` through the real click group (the demo's tests are in
tests/cli/test_demo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pubguard.cli import workload_cmds
from pubguard.cli.main import cli


@pytest.fixture(scope="module")
def root() -> click.Group:
    # main.COMMAND_MODULES decides what the installed command registers; register here only if
    # it does not list these modules yet, so the tests run the same group either way.
    if "workload" not in cli.commands:
        workload_cmds.register(cli)
    return cli


def run(root: click.Group, *args: str) -> object:
    return CliRunner().invoke(root, list(args), catch_exceptions=False)


def test_generate_json_and_info(root: click.Group, tmp_path: Path) -> None:
    out = tmp_path / "w"
    r = run(
        root,
        "workload",
        "generate",
        "--shape",
        "psguard",
        "--out",
        str(out),
        "--seed",
        "5",
        "--subscribers",
        "4",
        "--events",
        "30",
        "--json",
    )
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["shape"] == "psguard" and obj["seed"] == 5
    assert obj["counts"]["subscribers"] == 4 and obj["counts"]["events"] == 30
    assert obj["counts"]["subscriptions"] == 4 * 32
    assert sorted(p.name for p in out.iterdir()) == [
        "events.jsonl",
        "subscriptions.jsonl",
        "workload.json",
    ]
    info = run(root, "workload", "info", "--workload", str(out), "--json")
    assert info.exit_code == 0
    assert json.loads(info.stdout)["counts"] == obj["counts"]
    table = run(root, "workload", "info", "--workload", str(out))
    assert table.exit_code == 0 and "subscriptions" in table.stdout and "128" in table.stdout


def test_generate_table_output(root: click.Group, tmp_path: Path) -> None:
    r = run(
        root,
        "workload",
        "generate",
        "--shape",
        "vcaps",
        "--out",
        str(tmp_path / "v"),
        "--filters",
        "50",
        "--subscribers",
        "3",
        "--events",
        "10",
    )
    assert r.exit_code == 0
    assert "workload vcaps" in r.stdout and "filters" in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--shape", "eventguard", "--filters", "3"], "--filters does not apply"),
        (["--shape", "psguard", "--subscribers", "0"], "subscribers must be >= 1"),
        (["--shape", "vcaps", "--zipf", "1.5"], "--zipf does not apply"),
    ],
)
def test_bad_options_one_line_error(
    root: click.Group, tmp_path: Path, args: list[str], needle: str
) -> None:
    out = tmp_path / "w"
    r = run(root, "workload", "generate", "--out", str(out), *args)
    assert r.exit_code == 1
    assert r.stderr.startswith("pubguard: error: ") and needle in r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == ""
    assert not out.exists()


def test_non_empty_out_refused_then_forced(root: click.Group, tmp_path: Path) -> None:
    (tmp_path / "note.txt").write_text("x")
    args = [
        "workload",
        "generate",
        "--shape",
        "vcaps",
        "--out",
        str(tmp_path),
        "--filters",
        "20",
        "--subscribers",
        "2",
        "--events",
        "5",
    ]
    r = run(root, *args)
    assert r.exit_code == 1 and "not empty" in r.stderr and "--force" in r.stderr
    assert not (tmp_path / "events.jsonl").exists()
    r = run(root, *args, "--force")
    assert r.exit_code == 0 and (tmp_path / "events.jsonl").exists()


def test_usage_errors_and_help(root: click.Group, tmp_path: Path) -> None:
    r = run(root, "workload", "generate", "--shape", "nope", "--out", str(tmp_path / "w"))
    assert r.exit_code == 2 and "nope" in r.stderr
    h = run(root, "workload", "generate", "--help")
    assert h.exit_code == 0 and "--shape" in h.stdout and "psguard:" in h.stdout
