"""Every pipeline profile on the shared Spark session: profiles x modes x batch / streaming.

One small generated psguard-shape workload (topics, numeric ranges, a secret ``note``
attribute, payloads) runs end to end under default (both modes), eventguard and plain (psguard's
own runs are in test_pipeline.py and test_stream.py). Checks: opened deliveries equal the
reference matcher's (subscriber, event) pairs; no canary (secret attribute, payload) outside
``opened/`` for the secure profiles; forged, replayed, revoked and stale publications
dropped with the broker's reasons; filters with equal constraints under different ids each
delivered; a stream crashed after writing a batch and restarted from its checkpoint
delivers exactly what the batch run did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pubguard.errors import ConfigError, ValidationError
from pubguard.model import Event
from pubguard.pipeline.profiles import check_mode, get_profile, profile_names
from pubguard.pipeline.run import match_protected
from pubguard.pipeline.stream import run_stream
from pubguard.sim.workloads import Workload
from tests.pipeline.helpers import MASTER, NOW, Runs, expected_pairs, opened_pairs

MATRIX = [
    ("default", "randomized"),
    ("default", "deterministic"),
    ("eventguard", "deterministic"),
    ("plain", "deterministic"),
]  # psguard x both modes: test_pipeline.py


@pytest.fixture(scope="module")
def runs(profile_runs: Runs) -> Runs:
    return profile_runs


def _outbox_pairs(out: Path) -> list[tuple[str, str]]:
    df = pd.read_parquet(out / "outbox")
    return sorted(zip(df["subscriber"].astype(str), df["event_id"], strict=True))


def test_registry_names_modes_and_refusals() -> None:
    assert set(profile_names()) >= {"default", "eventguard", "psguard", "plain"}
    assert check_mode("default", None)[1] == "randomized"
    assert check_mode("eventguard", None)[1] == "deterministic"
    with pytest.raises(ConfigError, match="eventguard is deterministic only"):
        check_mode("eventguard", "randomized")
    with pytest.raises(ConfigError, match=r"unknown pipeline profile 'vcaps' \(valid: default"):
        get_profile("vcaps")


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "mode"), MATRIX)
def test_opened_deliveries_equal_the_reference(runs: Runs, profile: str, mode: str) -> None:
    out, summary = runs.get(profile, mode)
    pairs = opened_pairs(out)
    assert pairs == expected_pairs(runs.wl)
    twin = {e for s, e in pairs if s == "twin"}  # same constraints as another id: delivered
    assert twin and twin <= {e for s, e in pairs if s != "twin"}
    assert summary["profile"] == profile and summary["mode"] == mode
    assert summary["drops"] == {} and summary["opened"] > 0
    # eventguard routes on topics only: the subscriber's post-filter applies the rest (a
    # psguard-keyed client refuses, InvalidToken, what its own filter rejects)
    assert summary["deliveries"] == sum(summary[k] for k in ("opened", "post_filtered", "refused"))
    if profile == "eventguard":
        assert summary["post_filtered"] > 0


@pytest.mark.parametrize("profile", ["default", "psguard"])
def test_open_on_spark_equals_open_on_driver(
    spark: Any,
    runs: Runs,
    psguard_run: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    profile: str,
) -> None:
    """The local session's open (deliveries joined with their publications by Spark, grouped
    by filter) opens what the driver's did; tiny outboxes take the driver path, so the
    threshold is lowered here."""
    import pubguard.pipeline.opener as opener

    if profile == "psguard":
        out, wl, summary = psguard_run
    else:
        (out, summary), wl = runs.get(profile, "randomized"), runs.wl
    prof = get_profile(profile)
    ctx = prof.trusted(MASTER, list(wl.types.values()), mode="randomized", now_ms=NOW, seed=5)
    monkeypatch.setattr(opener, "OPEN_ON_DRIVER_ROWS", 0)
    stats = prof.open_outbox(out / "outbox", tmp_path / "opened", ctx, wl.filters, spark)
    assert stats.opened == summary["opened"] and stats.refused == summary["refused"]
    assert opened_pairs(tmp_path) == opened_pairs(out)


def _canaries(wl: Workload) -> set[bytes]:
    out = set()
    for e in wl.events:
        out.add(str(e["note"]).encode())  # the secret attribute
        out.add(e.payload[:24])
    return out


def _leaks(root: Path, canaries: set[bytes]) -> set[str]:
    found = set()
    for f in root.rglob("*"):
        if f.is_file() and "opened" not in f.relative_to(root).parts:
            data = f.read_bytes()
            for c in canaries:
                if c in data:
                    found.add(f"{f.relative_to(root)}: {c[:12]!r}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize(("profile", "mode"), MATRIX)
def test_canary_appears_nowhere_outside_opened(runs: Runs, profile: str, mode: str) -> None:
    out, _ = runs.get(profile, mode)
    canaries = _canaries(runs.wl)
    opened = pd.read_parquet(out / "opened")
    assert any(c.decode() in a for a in opened["attrs"] for c in canaries)  # it is there
    leaks = _leaks(out, canaries)
    if get_profile(profile).leaks_plaintext:
        assert leaks, "the plain baseline's tables hold the plaintext"
    else:
        assert not leaks, sorted(leaks)[:5]


def _attacked(runs: Runs, profile: str, mode: str, dst: Path) -> Path:
    """The run's protected folder plus a forged (re-labelled), a replayed (verbatim copy),
    three revoked-publisher and two stale publications; the manifest lists the revoked key."""
    out, _ = runs.get(profile, mode)
    prot = out / "protected"
    shutil.copytree(prot, dst)
    ev = pd.read_parquet(prot / "events")
    forged = ev.iloc[[0]].copy()
    forged["event_id"] = "forged-1"
    replay = ev.iloc[[1]].copy()
    prof = get_profile(profile)
    types = list(runs.wl.types.values())
    rogue = prof.trusted(MASTER, types, mode=mode, now_ms=NOW, seed=7, publisher="p1")
    fresh = [
        Event(dict(e.attrs), id=f"rogue-{e.id}", type=e.type, payload=e.payload)
        for e in runs.wl.events[:3]
    ]
    revoked = prof.protect_events_pandas(fresh, rogue)
    old = prof.trusted(MASTER, types, mode=mode, now_ms=NOW - 3_600_000, seed=8)
    stale = prof.protect_events_pandas(
        [Event(dict(e.attrs), id=f"old-{e.id}", type=e.type) for e in runs.wl.events[3:5]], old
    )
    shutil.rmtree(dst / "events")
    (dst / "events").mkdir()
    pd.concat([ev, forged, replay, revoked, stale], ignore_index=True).to_parquet(
        dst / "events" / "part-0.parquet", index=False
    )
    shutil.copy(prot / "events" / "_pubguard.json", dst / "events" / "_pubguard.json")
    feed = prof.public(prof.trusted(MASTER, types, mode=mode, now_ms=NOW, seed=5, revoked=("p1",)))
    m = json.loads((dst / "manifest.json").read_text())
    (dst / "manifest.json").write_text(json.dumps({**m, "revoked": feed["revoked"]}))
    return dst


@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile", "replayed"),
    # a verbatim copy: default's (ts, seq) per publisher key says replayed (narada §V-B);
    # eventguard's routing guard knows only identifiers: duplicate (eventguard.txt §4.7)
    [("default", "replayed"), ("eventguard", "duplicate")],
)
def test_forged_replayed_revoked_are_dropped_with_reasons(
    spark: Any, runs: Runs, tmp_path: Path, profile: str, replayed: str
) -> None:
    mode = get_profile(profile).modes[-1]
    out, summary = runs.get(profile, mode)
    dst = _attacked(runs, profile, mode, tmp_path / "attacked")
    res = match_protected(spark, dst, tmp_path / "out", now_ms=NOW)
    assert res["drops"] == {"forged": 1, replayed: 1, "revoked": 3, "stale": 2}
    assert res["deliveries"] == summary["deliveries"]
    assert _outbox_pairs(tmp_path / "out") == _outbox_pairs(out)


def _source(prot: Path, dst: Path, parts: list[pd.DataFrame]) -> Path:
    dst.mkdir(parents=True)
    for name in ("filters", "subscriptions"):
        shutil.copytree(prot / name, dst / name)
    shutil.copy(prot / "manifest.json", dst / "manifest.json")
    (dst / "events").mkdir()
    for i, p in enumerate(parts):
        p.to_parquet(dst / "events" / f"part-{i:03d}.parquet", index=False)
    return dst


@pytest.mark.slow
@pytest.mark.parametrize(
    ("profile", "mode", "crash"),
    [("default", "randomized", True), ("eventguard", "deterministic", False)],
)
def test_stream_restart_from_checkpoint_delivers_as_the_batch_run(
    spark: Any, runs: Runs, tmp_path: Path, profile: str, mode: str, crash: bool
) -> None:
    out, summary = runs.get(profile, mode)
    prot = out / "protected"
    ev = pd.read_parquet(prot / "events").sort_values("event_id").reset_index(drop=True)
    parts = [ev.iloc[i::2] for i in range(2)] if crash else [ev]  # the crash hits batch 1
    src = _source(prot, tmp_path / "src", parts)
    kw: dict[str, Any] = {"available_now": True, "max_files_per_trigger": 1, "now_ms": NOW}
    if crash:
        with pytest.raises(Exception, match="simulated crash after writing batch 1"):
            run_stream(spark, src, tmp_path / "out", tmp_path / "ck", fail_after_write=1, **kw)
    res = run_stream(spark, src, tmp_path / "out", tmp_path / "ck", **kw)
    assert res["profile"] == profile and res["batches"] == len(parts) and res["drops"] == {}
    assert _outbox_pairs(tmp_path / "out") == _outbox_pairs(out)
    assert res["deliveries"] == summary["deliveries"]
    # the subscribers open the stream's outbox (deliveries -> publications by event and
    # micro-batch) to what they opened from the batch run
    prof = get_profile(profile)
    ctx = prof.trusted(MASTER, list(runs.wl.types.values()), mode=mode, now_ms=NOW, seed=5)
    stats = prof.open_outbox(
        tmp_path / "out" / "outbox", tmp_path / "opened", ctx, runs.wl.filters, None
    )
    assert stats.opened == summary["opened"]
    assert opened_pairs(tmp_path) == opened_pairs(out)


def test_eventguard_refuses_a_filter_without_topic(runs: Runs) -> None:
    from pubguard.model import Filter

    prof = get_profile("eventguard")
    ctx = prof.trusted(
        MASTER, list(runs.wl.types.values()), mode="deterministic", now_ms=NOW, seed=1
    )
    with pytest.raises(ValidationError, match="profile mismatch: eventguard routes on topics"):
        prof.protect_filters_pandas({"fx": Filter.of(("num", ">", 3))}, ctx)
