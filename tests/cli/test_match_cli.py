"""``pubguard match`` and ``pubguard bench match`` through the real click group."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pubguard.cli import match_cmds
from pubguard.cli.main import cli
from pubguard.matching import ReferenceMatcher
from pubguard.model import read_events, read_subscriptions


@pytest.fixture(scope="module")
def root() -> click.Group:
    if "match" not in cli.commands:
        match_cmds.register(cli)
    return cli


def run(root: click.Group, *args: str) -> object:
    return CliRunner().invoke(root, list(args), catch_exceptions=False)


def write_workload(d: Path, subs: list[object], events: list[object]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    lines = [s if isinstance(s, str) else json.dumps(s) for s in subs]
    (d / "subscriptions.jsonl").write_text("\n".join(lines) + "\n")
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    (d / "events.jsonl").write_text("\n".join(lines) + "\n")
    return d


SUBS = [
    {"subscriber": "s1", "filter": {"id": "f1", "constraints": [["age", ">", 20]]}},
    {"subscriber": "s2", "filter": {"id": "f1", "constraints": [["age", ">", 20]]}},
    {"subscriber": "s2", "filter": {"id": "f2", "constraints": [["name", "prefix", "Dr."]]}},
    {"subscriber": "s3", "filter": 'age <= 30 && name = "Dr. Who"'},
]
EVENTS = [
    {"id": "e1", "attrs": {"age": 25, "name": "Dr. Who"}},
    {"id": "e2", "attrs": {"age": 18}},
    {"attrs": {"name": "Dr. No"}},
]


def test_match_writes_sorted_json_lines(root: click.Group, tmp_path: Path) -> None:
    d = write_workload(tmp_path / "w", SUBS, EVENTS)
    res = run(root, "match", "--workload", str(d))
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert lines[0] == {
        "event": "e1",
        "filters": ['age <= 30 && name = "Dr. Who"', "f1", "f2"],
        "subscribers": ["s1", "s2", "s3"],
    }
    assert lines[1] == {"event": "e2", "filters": [], "subscribers": []}
    assert lines[2] == {"event": "3", "filters": ["f2"], "subscribers": ["s2"]}
    assert run(root, "match", "--workload", str(d), "--json").stdout == res.stdout


def test_match_on_generated_workload_equals_reference(root: click.Group, tmp_path: Path) -> None:
    pytest.importorskip("pubguard.sim.workloads")
    from pubguard.sim.workloads import generate

    d = tmp_path / "vc"
    generate("vcaps", d, seed=3, filters=300, subscribers=20, events=40)
    res = run(root, "match", "--workload", str(d))
    assert res.exit_code == 0, res.output
    filters = {s.filter.id: s.filter for s in read_subscriptions(d / "subscriptions.jsonl")}
    ref = ReferenceMatcher(filters)
    out = [json.loads(x) for x in res.stdout.splitlines()]
    events = list(read_events(d / "events.jsonl"))
    assert len(out) == len(events)
    for line, ev in zip(out, events, strict=True):
        assert line["event"] == ev.id
        assert line["filters"] == sorted(ref.match(ev))
    summary = run(root, "match", "--workload", str(d), "--summary")
    assert summary.exit_code == 0 and "matched filters / event" in summary.output


@pytest.mark.parametrize(
    ("file", "bad", "message"),
    [
        ("events", "{not json", "events.jsonl:2: malformed JSON"),
        ("subscriptions", '{"subscriber": "s", "filter": "a ~ 1"}', "subscriptions.jsonl:5:"),
        ("subscriptions", '{"subscriber": "s", "filter": {"constraints": []}}', "at least one"),
        (
            "subscriptions",
            '{"subscriber": "s", "filter": {"constraints": [["a", "prefix", 3]]}}',
            "needs a string",
        ),
        (
            "subscriptions",
            '{"subscriber": "s9", "filter": {"id": "f1", "constraints": [["age", "<", 1]]}}',
            "subscriptions.jsonl:5: filter id 'f1' reused",
        ),
    ],
)
def test_bad_lines_fail_with_one_line_naming_the_line(
    root: click.Group, tmp_path: Path, file: str, bad: str, message: str
) -> None:
    subs: list[object] = list(SUBS)
    events: list[object] = list(EVENTS)
    if file == "events":
        events.insert(1, bad)
    else:
        subs.append(bad)
    d = write_workload(tmp_path / "w", subs, events)
    res = CliRunner().invoke(root, ["match", "--workload", str(d)])
    assert res.exit_code == 1
    err = res.stderr if hasattr(res, "stderr") else res.output
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert '"event"' not in res.stdout  # nothing is matched from a half-read workload


def test_missing_folder_is_an_error(root: click.Group, tmp_path: Path) -> None:
    res = CliRunner().invoke(root, ["match", "--workload", str(tmp_path / "nope")])
    assert res.exit_code == 1 and "not a workload folder" in res.output


def test_bench_match_json(root: click.Group) -> None:
    res = run(
        root, "bench", "match", "--filters", "300", "--events", "30", "--batch", "8", "--json"
    )
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    for field in (
        "filters",
        "events",
        "build_s",
        "ms_per_event_p50",
        "ms_per_event_p95",
        "reference_ms_per_event_p50",
        "speedup",
        "rss_mib",
        "batch_events_per_s",
        "paper_siena_ms_per_event",
        "event_ruler_events_per_s",
    ):
        assert field in r
    assert r["filters"] == 300 and r["events"] == 30
    assert r["reference_agrees"] and r["batch_agrees"]
    assert r["paper_siena_ms_per_event"] == 10.0


def test_bench_match_samples_the_reference(root: click.Group) -> None:
    res = run(
        root,
        "bench",
        "match",
        "--filters",
        "200",
        "--events",
        "5",
        "--reference-sample",
        "50",
        "--json",
    )
    r = json.loads(res.stdout)
    assert r["reference_sampled_filters"] == 50 and r["reference_scaled_to_all_filters"]
    assert r["reference_agrees"]


def test_bench_match_table(root: click.Group) -> None:
    res = run(root, "bench", "match", "--filters", "100", "--events", "5")
    assert res.exit_code == 0 and "ms / event p50" in res.output
