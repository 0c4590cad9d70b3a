"""Structured Streaming: a query crashed after its sink wrote a batch and restarted from its
checkpoint yields exactly the deliveries of an uninterrupted run (and of the batch job), and
events replayed in a later file are dropped across batches."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pubguard.pipeline.stream import run_stream, stream_summary
from tests.pipeline.helpers import NOW


def _source(prot: Path, dst: Path, parts: list[pd.DataFrame]) -> Path:
    dst.mkdir(parents=True)
    for name in ("filters", "subscriptions"):
        shutil.copytree(prot / name, dst / name)
    shutil.copy(prot / "manifest.json", dst / "manifest.json")
    (dst / "events").mkdir()
    for i, p in enumerate(parts):
        p.to_parquet(dst / "events" / f"part-{i:03d}.parquet", index=False)
    return dst


def _outbox_pairs(out: Path) -> list[tuple[str, str]]:
    df = pd.read_parquet(out / "outbox")
    return sorted(zip(df["subscriber"].astype(str), df["event_id"], strict=True))


def test_restart_from_checkpoint_is_exactly_once(
    spark: Any, psguard_run: Any, tmp_path: Path
) -> None:
    out, _, summary = psguard_run
    prot = out / "protected"
    ev = pd.read_parquet(prot / "events").sort_values("event_id").reset_index(drop=True)
    parts = [ev.iloc[i::2] for i in range(2)]  # two micro-batches: the crash hits the 2nd
    kw: dict[str, Any] = {"available_now": True, "max_files_per_trigger": 1, "now_ms": NOW}

    # the uninterrupted reference is the batch job's outbox (the same deliveries an
    # uninterrupted stream yields: test_profiles checks that per profile)
    src_b = _source(prot, tmp_path / "src-b", parts)
    with pytest.raises(Exception, match="simulated crash after writing batch 1"):
        run_stream(spark, src_b, tmp_path / "out-b", tmp_path / "ck-b", fail_after_write=1, **kw)
    assert stream_summary(tmp_path / "out-b")["batches"] == 1  # batch 1 written, not committed
    b = run_stream(spark, src_b, tmp_path / "out-b", tmp_path / "ck-b", **kw)
    assert b["batches"] == 2 and b["events"] == len(ev)

    pairs_b = _outbox_pairs(tmp_path / "out-b")
    assert len(pairs_b) == len(set(pairs_b)) == summary["deliveries"]
    assert pairs_b == _outbox_pairs(out)  # same as the batch job
    # one publication per delivered event, none left by the crashed attempt
    pubs = pd.read_parquet(tmp_path / "out-b" / "outbox" / "_publications")
    assert sorted(pubs["event_id"]) == sorted({e for _, e in pairs_b})

    # a later file replays two already-delivered events: dropped across batches
    ev.iloc[:2].to_parquet(src_b / "events" / "part-100.parquet", index=False)
    c = run_stream(spark, src_b, tmp_path / "out-b", tmp_path / "ck-b", **kw)
    assert c["batches"] == 3 and c["drops"] == {"replayed": 2}
    assert _outbox_pairs(tmp_path / "out-b") == pairs_b
