"""``pubguard pipeline ...`` and ``spark-cluster status`` refuse bad input with one
``pubguard: error:`` line and exit 1 *before* a Spark JVM starts: no Java stack trace, no
Spark log lines, nothing written (a user's typo must not cost a JVM start-up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.cli.pipeline_cmds import check_master
from pubguard.errors import ConfigError
from pubguard.sim.workloads import generate


def _one_line_error(args: list[str]) -> str:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubguard: error: "), res.stderr
    assert "Traceback" not in res.output and res.stdout == ""
    return lines[0]


@pytest.fixture
def workload(tmp_path: Path) -> Path:
    d = tmp_path / "w"
    generate("vcaps", d, seed=1, filters=5, subscribers=2, events=2, max_filters_per_subscriber=2)
    return d


def test_unknown_profile_is_refused_before_spark(workload: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    line = _one_line_error(
        ["pipeline", "run", "--workload", str(workload), "--out", str(out), "--profile", "nosuch"]
    )
    # every registered profile is listed (more register later: v-CAPS, Hermes)
    assert line.startswith(
        "pubguard: error: unknown pipeline profile 'nosuch' "
        "(valid: default, eventguard, plain, psguard"
    )
    assert not out.exists()


def test_missing_workload_is_refused_before_spark(tmp_path: Path) -> None:
    w, out = tmp_path / "nope", tmp_path / "out"
    line = _one_line_error(["pipeline", "run", "--workload", str(w), "--out", str(out)])
    assert line == f"pubguard: error: {w}: not a workload folder (no such directory)"
    assert not out.exists()


@pytest.mark.parametrize("master", ["bogus", "local[0]", "local[x]", "spark://", "http://h:1"])
def test_bad_master_is_one_line_not_a_java_trace(
    workload: Path, tmp_path: Path, master: str
) -> None:
    out = tmp_path / "out"
    for args in (
        ["pipeline", "run", "--workload", str(workload), "--out", str(out)],
        [
            "pipeline",
            "stream",
            "--source",
            str(tmp_path),
            "--out",
            str(out),
            "--checkpoint",
            str(tmp_path / "ck"),
        ],
    ):
        line = _one_line_error([*args, "--master", master])
        assert line == (
            "pubguard: error: --master must be local, local[N], local[*] or "
            f"spark://host:port, got {master!r}"
        )
    assert not out.exists() and not (tmp_path / "ck").exists()


def test_the_masters_spark_accepts_pass() -> None:
    for master in (
        "local",
        "local[*]",
        "local[2]",
        "local[2,3]",
        "local[*,4]",
        "spark://127.0.0.1:7077",
        "spark://h1:7077,h2:7077",
        "yarn",
    ):
        check_master(master)
    with pytest.raises(ConfigError) as info:
        check_master("local[]")
    assert info.value.key == "master"


def test_match_on_a_missing_protected_folder_is_refused_before_spark(tmp_path: Path) -> None:
    p = tmp_path / "nope"
    line = _one_line_error(
        ["pipeline", "match", "--protected", str(p), "--out", str(tmp_path), "--master", "bogus"]
    )
    assert line == f"pubguard: error: {p}: not a protected folder (no manifest.json)"


def test_spark_cluster_status_without_a_cluster(tmp_path: Path) -> None:
    line = _one_line_error(["spark-cluster", "status", "--state-dir", str(tmp_path / "sc")])
    assert line == "pubguard: error: no Spark cluster is running (pubguard spark-cluster up)"
    help_text = CliRunner().invoke(cli, ["spark-cluster", "--help"]).output
    assert "status  The running master's URL" in help_text


def test_demo_refuses_a_bad_master_before_the_network_part() -> None:
    line = _one_line_error(["demo", "--in-process", "--master", "bogus"])
    assert line.startswith("pubguard: error: --master must be local")


def test_bench_pipeline_refuses_empty_runs_before_spark() -> None:
    for flag in ("--subscriptions", "--events", "--cores", "--repeat"):
        res = CliRunner().invoke(cli, ["bench", "pipeline", flag, "0"])
        assert res.exit_code == 2 and "Traceback" not in res.output
        assert f"Invalid value for '{flag}': 0 is not in the range x>=1." in res.stderr


def _corrupt_events(workload: Path) -> str:
    """The last event line loses a ':'; the expected error line."""
    p = workload / "events.jsonl"
    lines = p.read_text().splitlines()
    lines[-1] = lines[-1].replace('"attrs":', '"attrs"', 1)
    p.write_text("\n".join(lines) + "\n")
    col = lines[-1].index('"attrs"') + len('"attrs"') + 2
    return f"{p}:{len(lines)}: malformed JSON: Expecting ':' delimiter (column {col})"


def _bad_type(workload: Path) -> str:
    p = workload / "events.jsonl"
    lines = p.read_text().splitlines()
    lines[0] = lines[0].replace('"type": "', '"type": "nosuch', 1)
    p.write_text("\n".join(lines) + "\n")
    return f"{p}: event e1: unknown event type"


def _one_id_two_filters(workload: Path) -> str:
    """A filter id given to a second, different filter (a filter without an id, or two ids
    for equal constraints, are fine: docs/workloads.md)."""
    p = workload / "subscriptions.jsonl"
    line = {"subscriber": "sx", "filter": {"id": "f0", "constraints": [["nosuch", ">", 1]]}}
    first = json.loads(p.read_text().splitlines()[0])["filter"]["id"]
    line["filter"]["id"] = first  # type: ignore[index]
    with p.open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    return f"{workload}: subscription"


@pytest.mark.parametrize("spoil", [_corrupt_events, _bad_type, _one_id_two_filters])
def test_a_bad_workload_is_refused_before_spark_starts(
    workload: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: object
) -> None:
    from pubguard.pipeline import session

    started: list[str] = []

    def no_spark(**kw: object) -> object:
        started.append(str(kw))
        raise AssertionError("a Spark session was asked for before the workload was checked")

    monkeypatch.setattr(session, "get_spark", no_spark)
    expected = spoil(workload)  # type: ignore[operator]
    out = tmp_path / "out"
    line = _one_line_error(["pipeline", "run", "--workload", str(workload), "--out", str(out)])
    assert line.startswith(f"pubguard: error: {expected}"), line
    assert started == [] and not out.exists()
