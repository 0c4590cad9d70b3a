from __future__ import annotations

from pathlib import Path

import pytest

from pubguard.errors import InputError
from pubguard.model import Event, read_events, read_subscriptions


def test_reads_workload_lines(tmp_path: Path) -> None:
    p = tmp_path / "subscriptions.jsonl"
    p.write_text(
        '{"subscriber": "s1", "filter": {"id": "f1", "constraints": [["age", ">", 20], ["n", "exists"]]}}\n'
    )
    (sub,) = list(read_subscriptions(p))
    assert sub.subscriber == "s1" and sub.filter.id == "f1"
    assert sub.filter.matches(Event({"age": 21, "n": "x"}))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "malformed JSON"),
        ('{"subscriber": "s1", "filter": {"constraints": [["a", "~", 1]]}}', "unknown operator"),
        ('{"subscriber": "s1", "filter": {"constraints": [["a", "prefix", 1]]}}', "needs a string"),
        ('{"subscriber": "s1", "filter": {"constraints": []}}', "at least one constraint"),
    ],
)
def test_bad_line_names_file_and_line_and_stops(tmp_path: Path, line: str, message: str) -> None:
    good = '{"subscriber": "s1", "filter": {"constraints": [["a", "=", 1]]}}'
    p = tmp_path / "subs.jsonl"
    p.write_text(f"{good}\n{line}\n{good}\n")
    it = read_subscriptions(p)
    assert next(it).subscriber == "s1"
    with pytest.raises(InputError, match=message) as ei:
        next(it)
    assert ei.value.line == 2 and f"{p}:2:" in str(ei.value)


def test_events_round_trip(tmp_path: Path) -> None:
    e = Event({"a": 1, "b": "x", "c": 2.5, "d": True}, id="e1", type="t", payload=b"hi")
    p = tmp_path / "events.jsonl"
    import json

    p.write_text(json.dumps(e.to_json()) + "\n")
    (back,) = list(read_events(p))
    assert back == e


def test_equal_filter_lines_share_one_parsed_filter(tmp_path: Path) -> None:
    f = '{"id": "f1", "constraints": [["age", ">", 20]]}'
    g = '{"id": "f1", "constraints": [["age", ">", 20.0]]}'  # 20.0 is not 20: parsed apart
    p = tmp_path / "subscriptions.jsonl"
    p.write_text(
        "\n".join(f'{{"subscriber": "s{i}", "filter": {x}}}' for i, x in enumerate([f, f, g, f]))
        + '\n{"subscriber": "s9", "filter": {"constraints": [["age", "~", 1]]}}\n'
    )
    subs = []
    with pytest.raises(InputError, match=r"subscriptions.jsonl:5: unknown operator"):
        for s in read_subscriptions(p):
            subs.append(s)
    assert [s.subscriber for s in subs] == ["s0", "s1", "s2", "s3"]
    assert subs[0].filter is subs[1].filter is subs[3].filter
    assert subs[2].filter is not subs[0].filter
    assert isinstance(subs[2].filter.constraints[0].value, float)
    assert isinstance(subs[0].filter.constraints[0].value, int)


def test_malformed_json_is_reported_at_its_real_line_and_column(tmp_path: Path) -> None:
    from pubguard.model import parse_json

    line = '{"id": "e1", "attrs": {"a": 1, "b": 2, "c": 3, "d" 4}}'  # ':' missing before 4
    col = line.index("4}") + 1  # 1-based: 52
    p = tmp_path / "events.jsonl"
    p.write_text('{"attrs": {"a": 1}}\n\n' + line + "\n")
    it = read_events(p)
    next(it)
    with pytest.raises(InputError) as ei:
        next(it)
    assert (ei.value.path, ei.value.line, ei.value.column) == (str(p), 3, col)
    assert str(ei.value) == f"{p}:3: malformed JSON: Expecting ':' delimiter (column {col})"
    # a text that starts on line 10 of its file, with the fault on its own second line
    with pytest.raises(InputError) as ei:
        parse_json('{"a": 1,\n  "b" 2}', path="f.json", line=10)
    assert (ei.value.line, ei.value.column) == (11, 7)
    # a command-line argument: no line number unless the fault is past its first line
    with pytest.raises(InputError) as ei:
        parse_json('{"a": tru}', path="argument 1", line=None)
    assert str(ei.value) == "argument 1: malformed JSON: Expecting value (column 7)"
