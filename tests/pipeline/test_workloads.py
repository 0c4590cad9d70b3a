"""Bring-your-own workloads: the hand-written example of docs/workloads.md, loaded from the
document itself; filters with equal constraints under different ids (delivered end to end by
every profile: test_profiles.py); ``workload.json`` with ``types`` only."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pubguard.errors import InputError
from pubguard.pipeline.run import load_run_workload

DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"
_HEREDOC = re.compile(r"cat > /tmp/wl/(\S+) <<'EOF'\n(.*?)\nEOF\n", re.S)


def write_doc_example(dst: Path) -> Path:
    """The files of the document's example, as written there."""
    files = _HEREDOC.findall(DOC.read_text())
    assert {name for name, _ in files} == {"workload.json", "subscriptions.jsonl", "events.jsonl"}
    dst.mkdir(parents=True, exist_ok=True)
    for name, text in files:
        (dst / name).write_text(text + "\n")
    return dst


def test_the_documented_example_loads(tmp_path: Path) -> None:
    wl = load_run_workload(write_doc_example(tmp_path / "wl"), profile="default")
    assert wl.shape == "custom" and wl.seed is None and wl.params == {}
    ids = {s.subscriber: s.filter.id for s in wl.subscriptions}
    assert ids["alice"] == "alice-fx" and ids["bob"] == "bob-fx"  # same constraints, two ids
    assert ids["carol"] is not None and ids["carol"].startswith("auto-")
    assert set(wl.filters) == set(ids.values())


def test_one_id_for_two_different_filters_is_refused(tmp_path: Path) -> None:
    d = write_doc_example(tmp_path / "wl")
    line = {"subscriber": "dan", "filter": {"id": "bob-fx", "constraints": [["price", "<", 3]]}}
    with (d / "subscriptions.jsonl").open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    with pytest.raises(InputError, match="filter id 'bob-fx' names two different filters"):
        load_run_workload(d, profile="default")


def test_workload_json_needs_only_types(tmp_path: Path) -> None:
    d = write_doc_example(tmp_path / "wl")
    (d / "workload.json").write_text(json.dumps({"shape": "custom"}))
    with pytest.raises(InputError, match="missing or bad 'types'"):
        load_run_workload(d)
