"""The v-CAPS profiles on the shared Spark session: executors intersect routing vectors with
the broadcast BFPoset of tokens; opened deliveries equal the reference matcher's, no filter
attribute name is in the protected tables, and a tampered routing vector is dropped forged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pubguard.pipeline.profiles import get_profile
from pubguard.pipeline.run import match_protected, run_pipeline
from pubguard.pipeline.vcaps_run import reference_pairs
from pubguard.pipeline.wire import pack, unpack
from tests.pipeline.helpers import MASTER, NOW, expected_pairs, make_workload, opened_pairs


@pytest.mark.parametrize("profile", ["vcaps-rv", "vcaps-srv", "vcaps-srv-fast"])
def test_executor_match_equals_reference_without_spark(tmp_path: Path, profile: str) -> None:
    """The executors' map-side match (one worker's BFPoset of the broadcast tokens) on the
    protected tables, for every profile; the Spark run itself is the slow test below."""
    wl_dir, wl = make_workload(tmp_path, "vcaps")
    prof = get_profile(profile)
    ctx = prof.trusted(MASTER, list(wl.types.values()), mode=prof.modes[0], now_ms=NOW, seed=5)
    filters = {str(f.id): f for f in wl.filters.values()}
    frows = prof.protect_filters_pandas(filters, ctx)
    ev = prof.protect_events_pandas(wl.events, ctx)
    subs: dict[str, list[str]] = {}
    for s in wl.subscriptions:
        subs.setdefault(str(s.filter.id), []).append(s.subscriber)
    index = {"tokens": dict(zip(frows["filter_id"], frows["token"], strict=True)), "subs": subs}
    got = {(s, e) for s, e, _ in prof.match_partition(index, ev)}  # type: ignore[attr-defined]
    # executors see opaque wire ids only; the application's ids are inside E_KN(N)
    wire = prof.wire_id  # type: ignore[attr-defined]
    assert got == {(s, wire(ctx, e)) for s, e in expected_pairs(wl)}
    assert not {e for _, e in expected_pairs(wl)} & set(ev["event_id"])


@pytest.mark.slow
def test_vcaps_rv_on_spark(spark: Any, tmp_path: Path) -> None:
    profile = "vcaps-rv"
    wl_dir, wl = make_workload(tmp_path, "vcaps")
    out = tmp_path / "out"
    summary = run_pipeline(
        spark, wl_dir, out, profile=profile, master_secret=MASTER, now_ms=NOW, seed=5
    )
    assert summary["drops"] == {} and summary["opened"] > 0
    assert opened_pairs(out) == expected_pairs(wl)
    # the attribute names of the filters ("epoch", a dictionary word, is also a meta key)
    names = {c.name.encode() for f in wl.filters.values() for c in f.constraints} - {b"epoch"}
    tables = [p.read_bytes() for p in (out / "protected").rglob("*.parquet")]
    assert tables and not [n for n in names if any(n in t for t in tables)]

    dst = tmp_path / "tampered"
    shutil.copytree(out / "protected", dst)
    ev = pd.read_parquet(dst / "events")
    r = unpack(ev.at[0, "routing"])
    key = next(k for k in r if k in ("rv", "srv", "v"))
    r[key] = [*r[key], bytes(16)]
    ev.at[0, "routing"] = pack(r)
    shutil.rmtree(dst / "events")
    (dst / "events").mkdir()
    ev.to_parquet(dst / "events" / "part-0.parquet", index=False)
    shutil.copy(out / "protected" / "events" / "_pubguard.json", dst / "events")
    res = match_protected(spark, dst, tmp_path / "out2", now_ms=NOW)
    assert res["drops"] == {"forged": 1}
    assert json.dumps(res["drops"])


def test_spark_experiment_reference_is_the_reference_matchers(tmp_path: Path) -> None:
    """What ``experiments vcaps --spark`` compares each profile's opened pairs with (the
    indexed matcher) equals the reference matcher's pairs (the Spark run itself is the CLI's:
    minutes at the paper's sizes)."""
    _, wl = make_workload(tmp_path, "vcaps")
    assert reference_pairs(wl) == expected_pairs(wl) != set()
