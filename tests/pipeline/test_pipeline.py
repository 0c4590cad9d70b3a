"""The Spark dissemination pipeline end to end on the shared local session.

Checks: opened deliveries equal the reference matcher's (subscriber, event) pairs in
both modes on generated workloads; the match stage's tables hold no topic name, secret
attribute or payload; forged, replayed, duplicate and stale events are dropped with reasons;
bad input stops the job with a message naming the problem and leaves the outbox untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from pubguard.errors import InputError, PubguardError, ValidationError
from pubguard.pipeline import stages as S
from pubguard.pipeline.opener import read_opened
from pubguard.pipeline.run import match_protected
from pubguard.pipeline.tables import read_manifest
from tests.pipeline.helpers import MASTER, NOW, expected_pairs, make_workload, opened_pairs, run


def test_psguard_randomized_end_to_end(psguard_run: Any) -> None:
    out, wl, summary = psguard_run
    assert opened_pairs(out) == expected_pairs(wl)
    assert summary["drops"] == {} and summary["refused"] == 0
    assert summary["deliveries"] == summary["opened"] > 0
    assert set(summary["seconds"]) >= {"protect", "validate", "match", "deliver", "open"}
    opened = read_opened(out / "opened")
    e = {x.id: x for x in wl.events}
    row = opened.iloc[0]
    assert json.loads(row["attrs"]) == dict(e[row["event_id"]].attrs)
    assert row["payload"] == e[row["event_id"]].payload


def _cells(path: Path) -> list[bytes]:
    out = []
    for f in path.rglob("*.parquet"):
        for col in pq.read_table(f).to_pydict().values():
            for v in col:
                out.append(v if isinstance(v, bytes) else json.dumps(v, default=str).encode())
        out.append(f.read_bytes())
        out.append(str(f).encode())
    return out


def test_match_stage_tables_hold_no_plaintext(psguard_run: Any) -> None:
    out, wl, _ = psguard_run
    canaries = set()
    for e in wl.events:
        canaries |= {str(e["topic"]).encode(), str(e["note"]).encode()}
        canaries.add(e.payload[:32])
        for a in ("name", "category"):
            if a in e and len(str(e[a])) >= 6:
                canaries.add(str(e[a]).encode())
    tables = _cells(out / "protected") + _cells(out / "outbox")
    tables.append((out / "protected" / "manifest.json").read_bytes())
    leaks = {c for c in canaries for cell in tables if c in cell}
    assert not leaks, f"plaintext reached the executors' tables: {sorted(leaks)[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("shape", "mode"),
    # with psguard/randomized above, every shape and both modes run on Spark; the pure scheme
    # tests (tests/schemes/test_psguard.py) cover all six combinations without Spark
    [("psguard", "deterministic"), ("vcaps", "randomized"), ("eventguard", "deterministic")],
)
def test_every_shape_and_mode_equals_reference(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, shape: str, mode: str
) -> None:
    root = tmp_path_factory.mktemp("shapes")
    d, wl = make_workload(root, shape)  # shapes: conftest.SHAPES
    out = root / "out"
    summary = run(spark, d, out, mode)
    assert opened_pairs(out) == expected_pairs(wl)
    assert summary["opened"] == summary["deliveries"]


def _copy_protected(src: Path, dst: Path, events: pd.DataFrame) -> Path:
    shutil.copytree(src, dst)
    shutil.rmtree(dst / "events")
    (dst / "events").mkdir()
    events.to_parquet(dst / "events" / "part-0.parquet", index=False)
    shutil.copy(src / "events" / "_pubguard.json", dst / "events" / "_pubguard.json")
    return dst


def test_forged_replayed_duplicate_stale_are_dropped(
    spark: Any, psguard_run: Any, tmp_path: Path
) -> None:
    out, wl, summary = psguard_run
    prot = out / "protected"
    ev = pd.read_parquet(prot / "events")
    forged = ev.iloc[[0]].copy()
    forged["event_id"] = "forged-1"  # re-labelled: the signature no longer matches
    replay = ev.iloc[[1]].copy()  # an exact copy of a signed event
    plain = pd.DataFrame([S._event_row(e) for e in wl.events[2:4]])
    later = S.TrustedContext.create(
        MASTER, list(wl.types.values()), mode="randomized", now_ms=NOW + 1, seed=6
    )
    dup = S.protect_events_pandas(plain.iloc[[0]], later)  # same id, other content
    stale_ctx = S.TrustedContext.create(
        MASTER, list(wl.types.values()), mode="randomized", now_ms=NOW - 3_600_000, seed=5
    )
    e = wl.events[3]
    stale_plain = pd.DataFrame(
        [{"event_id": "old-1", "event": json.dumps({**e.to_json(), "id": "old-1"})}]
    )
    stale = S.protect_events_pandas(stale_plain, stale_ctx)
    attacked = pd.concat([ev, forged, replay, dup, stale], ignore_index=True)
    dst = _copy_protected(prot, tmp_path / "attacked", attacked)
    res = match_protected(spark, dst, tmp_path / "out", now_ms=NOW)
    assert res["drops"] == {"forged": 1, "replayed": 1, "duplicate": 1, "stale": 1}
    assert res["deliveries"] == summary["deliveries"]


def test_bad_input_stops_with_a_clear_message_and_keeps_the_outbox(
    spark: Any, psguard_run: Any, tmp_path: Path
) -> None:
    out, _, _ = psguard_run
    prot = out / "protected"
    ev = pd.read_parquet(prot / "events")
    target = tmp_path / "target"
    (target / "outbox" / "subscriber=s1").mkdir(parents=True)
    sentinel = target / "outbox" / "subscriber=s1" / "old.parquet"
    sentinel.write_bytes(b"previous outbox")

    def outbox_state() -> list[tuple[str, bytes]]:
        return sorted(
            (str(p), p.read_bytes()) for p in (target / "outbox").rglob("*") if p.is_file()
        )

    before = outbox_state()
    missing = _copy_protected(prot, tmp_path / "missing", ev.drop(columns=["sig"]))
    with pytest.raises(InputError, match="missing column.*'sig'"):
        match_protected(spark, missing, target, now_ms=NOW)
    nulls = ev.copy()
    nulls.loc[0, "hint"] = None
    bad = _copy_protected(prot, tmp_path / "nulls", nulls)
    with pytest.raises(InputError, match="1 malformed row"):
        match_protected(spark, bad, target, now_ms=NOW)
    mismatch = _copy_protected(prot, tmp_path / "mismatch", ev)
    meta = json.loads((mismatch / "filters" / "_pubguard.json").read_text())
    (mismatch / "filters" / "_pubguard.json").write_text(
        json.dumps({**meta, "mode": "deterministic"})
    )
    with pytest.raises(
        ValidationError, match="profile mismatch: subscriptions are psguard/deterministic"
    ):
        match_protected(spark, mismatch, target, now_ms=NOW)
    with pytest.raises(InputError, match="no manifest"):
        match_protected(spark, tmp_path / "nowhere", target, now_ms=NOW)
    assert outbox_state() == before
    assert not [p for p in target.iterdir() if p.name.startswith(".")]  # no staging left
    assert read_manifest(prot)["mode"] == "randomized"


def test_malformed_workload_names_file_and_line(spark: Any, tmp_path: Path) -> None:
    d, _ = make_workload(tmp_path, "eventguard")
    with (d / "events.jsonl").open("a") as fh:
        fh.write("{not json\n")
    with pytest.raises(InputError, match=r"events.jsonl:\d+: malformed JSON"):
        run(spark, d, tmp_path / "out", "deterministic")
    assert not (tmp_path / "out" / "outbox").exists()


def test_unsupported_filter_is_a_profile_mismatch(spark: Any, tmp_path: Path) -> None:
    d, _ = make_workload(tmp_path, "eventguard")
    line = json.dumps(
        {"subscriber": "sx", "filter": {"id": "fx", "constraints": [["topic", "prefix", "top"]]}}
    )
    with (d / "subscriptions.jsonl").open("a") as fh:
        fh.write(line + "\n")
    with pytest.raises(PubguardError, match="fx must constrain 'topic' with '=' only"):
        run(spark, d, tmp_path / "out", "deterministic")
    assert not (tmp_path / "out" / "outbox").exists()


def test_more_bad_input_each_one_clear_line(spark: Any, psguard_run: Any, tmp_path: Path) -> None:
    """The rest of the issue's list, through the CLI: a table missing a column, rows of the
    wrong mode or with a short nonce, an unknown profile; one line each, nothing written."""
    from click.testing import CliRunner

    from pubguard.cli.main import cli

    out, _, _ = psguard_run
    prot = out / "protected"
    ev = pd.read_parquet(prot / "events")
    cases: list[tuple[str, Path]] = []

    subs = _copy_protected(prot, tmp_path / "subs", ev)
    s = pd.read_parquet(subs / "subscriptions")
    shutil.rmtree(subs / "subscriptions")
    (subs / "subscriptions").mkdir()
    s.drop(columns=["subscriber"]).to_parquet(subs / "subscriptions" / "p.parquet", index=False)
    cases.append(("subscriptions table is missing column(s) 'subscriber'", subs))

    wrong = ev.copy()
    wrong.loc[[0, 1], "mode"] = "deterministic"
    cases.append(
        (
            "profile mismatch: 2 protected event(s) are not in 'randomized' mode",
            _copy_protected(prot, tmp_path / "wrong-mode", wrong),
        )
    )
    short = ev.copy()
    short.loc[0, "nonce"] = b"abc"
    cases.append(
        ("1 row(s) without a 16-byte nonce", _copy_protected(prot, tmp_path / "short", short))
    )
    other = _copy_protected(prot, tmp_path / "profile", ev)
    m = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**m, "profile": "vcaps"}))
    cases.append(("unknown pipeline profile 'vcaps'", other))

    for i, (want, folder) in enumerate(cases):
        target = tmp_path / f"target-{i}"
        args = ["pipeline", "match", "--protected", str(folder), "--out", str(target)]
        res = CliRunner().invoke(cli, [*args, "--now-ms", str(NOW)])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 1 and len(lines) == 1, res.output
        assert lines[0].startswith("pubguard: error: ") and want in lines[0], lines
        assert not (target / "outbox").exists()
