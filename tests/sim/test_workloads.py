"""Workload folders: determinism, the three shapes' distributions, strict loading."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pubguard.errors import ConfigError, InputError
from pubguard.model import EventType, Op
from pubguard.sim import (
    PSGUARD_KINDS,
    SHAPES,
    VCAPS_DICTIONARY,
    generate,
    load_workload,
    resolve_params,
)

FILES = ("subscriptions.jsonl", "events.jsonl", "workload.json")
SMALL = {
    "vcaps": {"filters": 300, "subscribers": 20, "events": 50},
    "eventguard": {"subscribers": 300, "events": 200, "publishers": 8},
    "psguard": {"subscribers": 16, "events": 300},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for shape, params in SMALL.items():
        d = tmp_path_factory.mktemp(shape)
        generate(shape, d, seed=42, force=True, **params)
        out[shape] = d
    return out


@pytest.mark.parametrize("shape", list(SHAPES))
def test_same_seed_gives_byte_identical_files(
    shape: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    again = tmp_path / "again"
    generate(shape, again, seed=42, **SMALL[shape])
    for f in FILES:
        assert (again / f).read_bytes() == (folders[shape] / f).read_bytes(), f
    other = tmp_path / "other"
    generate(shape, other, seed=43, **SMALL[shape])
    assert (other / "events.jsonl").read_bytes() != (again / "events.jsonl").read_bytes()


@pytest.mark.parametrize("shape", list(SHAPES))
def test_types_round_trip_and_events_conform(shape: str, folders: dict[str, Path]) -> None:
    meta = json.loads((folders[shape] / "workload.json").read_text())
    assert meta["shape"] == shape and meta["seed"] == 42
    for t in meta["types"]:
        assert EventType.from_json(t).to_json() == t
    w = load_workload(folders[shape])  # validates every event against its type
    assert len(w.types) == meta["counts"]["types"]
    assert len(w.subscriptions) == meta["counts"]["subscriptions"]
    assert len(w.events) == meta["counts"]["events"] == SMALL[shape]["events"]
    assert len(w.filters) == meta["counts"]["filters"]
    for e in w.events:
        assert e.type in w.types
    # one id, one filter: equal filters share an id and different ids hold different filters
    by_id: dict[str, object] = {}
    for s in w.subscriptions:
        assert by_id.setdefault(s.filter.id or "", s.filter) == s.filter
    assert len(set(by_id.values())) == len(by_id)


def test_vcaps_shape(folders: dict[str, Path]) -> None:
    w = load_workload(folders["vcaps"])
    (t,) = w.types.values()
    assert [a.name for a in t.attributes] == list(VCAPS_DICTIONARY)
    assert all(a.type == "int" and a.routable and a.range_size == 128 for a in t.attributes)
    per_sub = Counter(s.subscriber for s in w.subscriptions)
    assert len(per_sub) == 20
    assert all(1 <= n <= 200 for n in per_sub.values())
    pairs = [(s.subscriber, s.filter.id) for s in w.subscriptions]
    assert len(pairs) == len(set(pairs))  # a subset: no subscriber takes a filter twice
    for f in w.filters.values():
        assert 1 <= len(f.constraints) <= 4
        assert all(1 <= c.value <= 100 for c in f.constraints)  # type: ignore[operator]


def test_psguard_shape(folders: dict[str, Path]) -> None:
    w = load_workload(folders["psguard"])
    kinds = w.extras["kinds"]
    assert len(kinds) == 128 == len(w.types)
    assert Counter(kinds.values()) == {k: 32 for k in PSGUARD_KINDS}
    trees = w.extras["category_trees"]
    assert set(trees) == {t for t, k in kinds.items() if k == "category"}
    for tree in trees.values():
        nodes = tree["nodes"]
        assert tree["height"] == 4 and nodes[0] == "/"
        assert max(n.count("/") - 1 for n in nodes) == 4
        for n in nodes:  # inner nodes have 2-4 children
            kids = [m for m in nodes if m.startswith(n) and m.count("/") == n.count("/") + 1]
            assert kids == [] or 2 <= len(kids) <= 4
            assert kids != [] or n.count("/") == 5
    per_sub = Counter(s.subscriber for s in w.subscriptions)
    assert set(per_sub.values()) == {32}
    seen_kind_ops = set()
    for s in w.subscriptions:
        cs = {c.name: [] for c in s.filter.constraints}
        for c in s.filter.constraints:
            cs[c.name].append(c)
        (topic,) = cs.pop("topic")
        assert topic.op is Op.EQ
        kind = kinds[topic.value]
        if kind == "simple":
            assert cs == {}
        elif kind == "numeric":
            ge, le = sorted(cs["num"], key=lambda c: c.op.value, reverse=True)
            assert (ge.op, le.op) == (Op.GE, Op.LE)
            assert 0 <= ge.value <= le.value < 256
            assert ge.value % 4 == 0 and le.value % 4 == 3  # aligned to least count 4
        elif kind == "category":
            (c,) = cs["category"]
            assert c.op is Op.PREFIX and c.value in trees[topic.value]["nodes"]
        else:
            (c,) = cs["name"]
            spec = w.types[topic.value].attribute("name")
            assert c.op.value == spec.kind and 1 <= len(c.value) <= 8  # type: ignore[arg-type]
            seen_kind_ops.add(c.op)
    assert seen_kind_ops == {Op.PREFIX, Op.SUFFIX}
    for t in w.types.values():
        assert not t.attribute("note").routable and t.attribute("topic").kind == "topic"
        if kinds[t.name] == "numeric":
            num = t.attribute("num")
            assert (num.range_size, num.least_count, num.routable) == (256, 4, True)
    for e in w.events:
        assert len(e.payload) == 256 and "note" in e
        if kinds[e["topic"]] == "numeric":
            assert 0 <= e["num"] < 256  # type: ignore[operator]
        if kinds[e["topic"]] == "category":
            assert e["category"] in trees[e["topic"]]["nodes"]


def test_eventguard_shape_and_zipf_skew(folders: dict[str, Path]) -> None:
    w = load_workload(folders["eventguard"])
    pop = w.extras["popularity"]
    assert len(pop) == 128 and abs(sum(pop.values()) - 1) < 1e-9
    assert max(pop.values()) / min(pop.values()) == pytest.approx(128.0)  # Zipf s = 1
    per_sub = Counter(s.subscriber for s in w.subscriptions)
    assert len(per_sub) == 300 and set(per_sub.values()) == {4}
    per_topic = Counter(s.filter.constraints[0].value for s in w.subscriptions)
    top = max(pop, key=pop.get)  # type: ignore[arg-type]
    counts = sorted((per_topic.get(t, 0) for t in pop), reverse=True)
    assert per_topic[top] > 8 * counts[len(counts) // 2]  # popular topic far above the median
    pubs = w.extras["publishers"]
    assert len(pubs) == 8 and all(len(set(ts)) == 16 for ts in pubs.values())
    for e in w.events:
        assert e["topic"] in pubs[e["publisher"]] and len(e.payload) == 256
        assert not w.types[e.type or ""].attribute("publisher").routable


def test_bad_parameters_are_refused_before_writing(tmp_path: Path) -> None:
    d = tmp_path / "w"
    for shape, params in [
        ("nope", {}),
        ("eventguard", {"filters": 3}),
        ("vcaps", {"filters": -1}),
        ("vcaps", {"events": 2.5}),
        ("psguard", {"topics_per_subscriber": 500}),
        ("eventguard", {"zipf_s": -1.0}),
    ]:
        with pytest.raises(ConfigError):
            generate(shape, d, seed=1, **params)
        assert not d.exists()
    with pytest.raises(ConfigError):
        resolve_params("vcaps", {"subscribers": True})


def test_non_empty_folder_needs_force(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        generate("vcaps", tmp_path, seed=1, filters=10, subscribers=2, events=3)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
    meta = generate("vcaps", tmp_path, seed=1, force=True, filters=10, subscribers=2, events=3)
    assert meta["counts"]["events"] == 3 and (tmp_path / "keep.txt").exists()


def test_loading_is_strict(folders: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "w"
    d.mkdir()
    for f in FILES:
        (d / f).write_bytes((folders["psguard"] / f).read_bytes())
    lines = (d / "events.jsonl").read_text().splitlines()
    bad = list(lines)
    bad[6] = bad[6][:-3]  # truncated JSON on line 7
    (d / "events.jsonl").write_text("\n".join(bad) + "\n")
    with pytest.raises(InputError) as err:
        load_workload(d)
    assert err.value.line == 7 and "events.jsonl" in str(err.value)

    wrong = json.loads(lines[2])
    wrong["type"] = "nosuchtopic"
    (d / "events.jsonl").write_text("\n".join([*lines[:2], json.dumps(wrong)]) + "\n")
    with pytest.raises(InputError, match="unknown event type"):
        load_workload(d)

    (d / "workload.json").write_text("{not json")
    with pytest.raises(InputError, match="workload.json"):
        load_workload(d)
    (d / "workload.json").unlink()
    with pytest.raises(InputError):
        load_workload(d)
    with pytest.raises(InputError):
        load_workload(tmp_path / "missing")


def test_a_malformed_workload_json_names_its_line_and_column(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    d = tmp_path / "w"
    d.mkdir()
    for f in FILES:
        (d / f).write_bytes((folders["vcaps"] / f).read_bytes())
    text = (d / "workload.json").read_text()  # indented: "seed" sits on a line of its own
    lines = text.splitlines()
    n = next(i for i, ln in enumerate(lines) if '"seed":' in ln)
    lines[n] = lines[n].replace('"seed":', '"seed"')
    (d / "workload.json").write_text("\n".join(lines) + "\n")
    col = lines[n].index('"seed"') + len('"seed"') + 2  # 1-based: the value after the key
    with pytest.raises(InputError) as err:
        load_workload(d)
    assert (err.value.line, err.value.column) == (n + 1, col)
    assert str(err.value) == (
        f"{d / 'workload.json'}:{n + 1}: malformed JSON: Expecting ':' delimiter (column {col})"
    )
