"""End-to-end batch runs: ``pubguard pipeline run`` and ``pubguard pipeline match``.

``run_pipeline`` protects a workload folder on the trusted side, writes the protected tables
(the match stage's input) to ``OUT/protected``, then runs the untrusted part
(:func:`match_protected`: validate, match, deliver) *from those files*, exactly as a cluster
given only ``OUT/protected`` would, and finally opens the outbox on the trusted side.

Errors raised inside executors (a filter the profile cannot tokenise, say) come back from Spark
wrapped in Java and Python tracebacks; :func:`spark_errors` turns them back into the pubguard
exception with its one-line message, so the CLI prints ``pubguard: error: ...``.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubguard import errors as E
from pubguard.errors import ConfigError, InputError, ValidationError
from pubguard.pipeline import stages as S
from pubguard.pipeline.profiles import PipelineProfile, check_mode, get_profile, profile_names
from pubguard.pipeline.tables import (
    EVENT_COLUMNS,
    FILTER_COLUMNS,
    SUBSCRIPTION_COLUMNS,
    atomic_replace,
    check_columns,
    read_manifest,
    write_manifest,
)
from pubguard.schemes.psguard.record import DEFAULT_MAX_DELAY_MS

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from pubguard.sim.workloads import Workload

__all__ = [
    "DEFAULT_PROFILE",
    "check_record_rows",
    "load_run_workload",
    "match_protected",
    "name_filters",
    "profile_names",
    "run_pipeline",
    "spark_errors",
    "write_protected",
]

DEFAULT_PROFILE = "default"  # the composed profile, as on the broker network
TABLE_META = "_pubguard.json"  # inside a Parquet dir: Spark ignores files starting with "_"

Progress = Callable[[str, str], None]


def _noop(stage: str, msg: str) -> None:
    pass


_ERR = re.compile(r"pubguard\.errors\.(\w+): ([^\n]*)")


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Re-raise a pubguard error thrown inside a Spark task as itself."""
    try:
        yield
    except E.PubguardError:
        raise
    except Exception as exc:  # pyspark / py4j errors
        m = _ERR.search(str(exc))
        if m is None:
            raise
        cls = getattr(E, m.group(1), None)
        msg = m.group(2).strip()
        if isinstance(cls, type) and issubclass(cls, ValidationError | ConfigError):
            raise cls(msg) from None
        raise InputError(msg) from None


def write_protected(
    spark: SparkSession,
    events: DataFrame,
    filters: DataFrame,
    subscriptions: DataFrame,
    folder: Path,
    ctx: Any,
    profile: PipelineProfile | None = None,
) -> None:
    """Write a protected folder atomically (events, filters, subscriptions, manifest with the
    profile's public material only)."""
    prof = profile or get_profile("psguard")
    meta = {"profile": prof.name, "mode": ctx.mode, "epoch": ctx.epoch}

    def write(staging: Path) -> None:
        with spark_errors():
            for name, df in (("events", events), ("filters", filters)):
                df.write.mode("overwrite").parquet(str(staging / name))
                (staging / name / TABLE_META).write_text(json.dumps(meta))
            subscriptions.write.mode("overwrite").parquet(str(staging / "subscriptions"))
        write_manifest(staging, {**meta, **prof.public(ctx)})

    atomic_replace(folder, write)


def _read_table_meta(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((path / TABLE_META).read_text()))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"unreadable table metadata: {exc}", path=str(path)) from None


def _read_parquet(spark: SparkSession, path: Path, what: str) -> DataFrame:
    if not path.exists():
        raise InputError(f"missing {what} table", path=str(path))
    try:
        return spark.read.parquet(str(path))
    except Exception as exc:  # AnalysisException: empty dir, not parquet
        raise InputError(
            f"cannot read {what} table: {str(exc).splitlines()[0]}", path=str(path)
        ) from None


def check_record_rows(events: DataFrame, mode: str, path: Path) -> None:
    """The record layout's row checks: no null field, every row in ``mode``, a 16-byte
    nonce in randomized mode."""
    from pyspark.sql import functions as F

    bad = None
    for c in EVENT_COLUMNS:
        cond = F.col(c).isNull()
        bad = cond if bad is None else bad | cond
    assert bad is not None
    wrong_mode = F.col("mode") != F.lit(mode)
    bad_nonce = F.lit(mode == "randomized") & (F.length("nonce") != 16)
    row = (
        events.select(
            F.sum(bad.cast("int")).alias("nulls"),
            F.sum(wrong_mode.cast("int")).alias("mode"),
            F.sum(bad_nonce.cast("int")).alias("nonce"),
        )
        .collect()[0]
        .asDict()
    )
    if row["nulls"]:
        raise InputError(
            f"protected events: {row['nulls']} malformed row(s) with null fields", path=str(path)
        )
    if row["mode"]:
        raise ValidationError(
            f"profile mismatch: {row['mode']} protected event(s) are not in {mode!r} mode"
        )
    if row["nonce"]:
        raise InputError(
            f"protected events: {row['nonce']} row(s) without a 16-byte nonce", path=str(path)
        )


def match_protected(
    spark: SparkSession,
    protected: Path | str,
    out: Path | str,
    *,
    now_ms: int | None = None,
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
    progress: Progress = _noop,
) -> dict[str, Any]:
    """The untrusted part on a protected folder: validate, match, deliver to ``OUT/outbox``,
    with the profile the folder's manifest names."""
    prot, outp = Path(protected), Path(out)
    manifest = read_manifest(prot)
    prof, mode = check_mode(manifest["profile"], manifest["mode"])
    tables = {n: prot / n for n in ("events", "filters", "subscriptions")}
    em, fm = _read_table_meta(tables["events"]), _read_table_meta(tables["filters"])
    for what, m in (("events", em), ("subscriptions", fm)):
        for key in ("profile", "mode", "epoch"):
            if m and m.get(key) != manifest[key]:
                raise ValidationError(
                    f"profile mismatch: {what} are {m.get('profile')}/{m.get('mode')} "
                    f"(epoch {m.get('epoch')}) but the folder is {manifest['profile']}/"
                    f"{manifest['mode']} (epoch {manifest['epoch']})"
                )
    events = _read_parquet(spark, tables["events"], "protected events")
    filters = _read_parquet(spark, tables["filters"], "protected filters")
    subs = _read_parquet(spark, tables["subscriptions"], "subscriptions")
    check_columns(events, prof.event_columns, "protected events", str(tables["events"]))
    check_columns(filters, FILTER_COLUMNS, "protected filters", str(tables["filters"]))
    check_columns(subs, SUBSCRIPTION_COLUMNS, "subscriptions", str(tables["subscriptions"]))
    secs: dict[str, float] = {}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    with spark_errors():
        t = time.perf_counter()
        prof.check_malformed(events, mode, tables["events"])
        checked = prof.validate(events, manifest, now_ms=now, max_delay_ms=max_delay_ms)
        checked = checked.cache()
        by_reason = S.reason_counts(checked)  # one job: every drop reason and the accepted
        n_events = sum(by_reason.values())
        drops = {r: n for r, n in by_reason.items() if r is not None}
        secs["validate"] = time.perf_counter() - t
        progress("validate", f"{n_events} events, drops {drops or 'none'}")
        t = time.perf_counter()
        ok = S.accepted(checked)
        deliveries = prof.match(ok, filters, subs, mode=mode).cache()
        n_deliveries = deliveries.count()
        secs["match"] = time.perf_counter() - t
        progress("match", f"{n_deliveries} deliveries ({prof.name}, {mode})")
        t = time.perf_counter()
        pubs = S.publications(ok, deliveries, prof.delivery_body)
        S.deliver(deliveries, outp / "outbox", pubs)
        secs["deliver"] = time.perf_counter() - t
        progress("deliver", f"outbox written to {outp / 'outbox'}")
        deliveries.unpersist()
        checked.unpersist()
    return {
        "profile": prof.name,
        "mode": mode,
        "events": n_events,
        "deliveries": n_deliveries,
        "drops": drops,
        "seconds": secs,
    }


def load_run_workload(
    workload: Path | str, *, profile: str = DEFAULT_PROFILE, mode: str | None = None
) -> Workload:
    """Everything :func:`run_pipeline` checks before it needs Spark: the profile and mode, and
    the workload folder read strictly (every record, every event against its type). A caller
    that starts Spark itself calls this first, so a bad workload fails in about a second,
    with one line and no JVM. Filters are named by their ids (:func:`name_filters`)."""
    from pubguard.sim.workloads import load_workload  # shares each distinct filter (codec)

    check_mode(profile, mode)
    return name_filters(load_workload(workload), str(workload))


def name_filters(wl: Workload, where: str) -> Workload:
    """``wl`` with every subscription's filter named: its own id, or (none given) an id
    derived from its constraints, so subscriptions with equal constraints share one. Two
    subscribers who each chose ``age > 20`` under different ids keep both ids (``Filter``
    equality ignores ids); one id given to two different filters is refused."""
    import dataclasses
    import hashlib

    from pubguard.model import Subscription

    by_id: dict[str, Any] = {}
    subs = []
    for n, s in enumerate(wl.subscriptions, 1):
        f = s.filter
        if f.id is None:
            f = f.with_id("auto-" + hashlib.sha256(str(f).encode()).hexdigest()[:16])
            s = Subscription(s.subscriber, f)
        assert f.id is not None
        other = by_id.setdefault(f.id, f)
        if other != f:  # same id, other constraints
            raise InputError(
                f"subscription {n}: filter id {f.id!r} names two different filters "
                f"({other} and {f})",
                path=where,
            )
        subs.append(s)
    return dataclasses.replace(wl, subscriptions=tuple(subs))


def run_pipeline(
    spark: SparkSession,
    workload: Path | str | Workload,
    out: Path | str,
    *,
    profile: str = DEFAULT_PROFILE,
    mode: str | None = None,
    master_secret: bytes | None = None,
    now_ms: int | None = None,
    seed: int | None = None,
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
    revoked: tuple[str, ...] = (),
    progress: Progress = _noop,
) -> dict[str, Any]:
    """protect -> validate -> match -> deliver -> open on a workload folder (or one already
    loaded by :func:`load_run_workload`) with ``profile`` (``mode``: the profile's default
    when None); the summary. ``revoked``: publisher names the manifest lists as revoked (the
    key service's revocation feed)."""
    from pubguard.crypto import random_bytes

    prof, mode = check_mode(profile, mode)
    outp = Path(out)
    secs: dict[str, float] = {}
    t = time.perf_counter()
    if isinstance(workload, Path | str):
        wl = load_run_workload(workload, profile=profile, mode=mode)
    else:
        wl = name_filters(workload, "workload")
    filters = wl.filters
    secs["load"] = time.perf_counter() - t
    progress("load", f"{len(wl.events)} events, {len(wl.subscriptions)} subscriptions")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    ctx = prof.trusted(
        master_secret or random_bytes(32),
        list(wl.types.values()),
        mode=mode,
        now_ms=now,
        seed=seed,
        revoked=revoked,
    )
    t = time.perf_counter()
    with spark_errors():
        ev_prot, f_prot = prof.protect(spark, wl.events, filters, ctx)
        subs = S.subscriptions_frame(spark, wl.subscriptions)
        write_protected(spark, ev_prot, f_prot, subs, outp / "protected", ctx, prof)
    secs["protect"] = time.perf_counter() - t
    progress("protect", f"protected tables written to {outp / 'protected'}")
    res = match_protected(
        spark, outp / "protected", outp, now_ms=now, max_delay_ms=max_delay_ms, progress=progress
    )
    secs.update(res["seconds"])
    t = time.perf_counter()
    with spark_errors():
        stats = prof.open_outbox(outp / "outbox", outp / "opened", ctx, filters, spark)
    secs["open"] = time.perf_counter() - t
    progress("open", f"{stats.opened} deliveries opened into {outp / 'opened'}")
    summary = {
        "profile": prof.name,
        "mode": mode,
        "master": spark.sparkContext.master,
        "events": len(wl.events),
        "subscriptions": len(wl.subscriptions),
        "filters": len(filters),
        "subscribers": len(wl.subscribers),
        "deliveries": res["deliveries"],
        "opened": stats.opened,
        "post_filtered": stats.post_filtered,
        "refused": stats.refused,
        "drops": res["drops"],
        "seconds": {k: round(v, 3) for k, v in secs.items()},
        "out": str(outp),
    }
    (outp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
