"""``pubguard pipeline stream``: the untrusted stages as a Structured Streaming query.

Theory of operation. Protected events arrive as Parquet files in ``SOURCE/events`` (file
source, offsets in the checkpoint). The subscription side is static: it is loaded once, turned
into a compact *index* (token -> (filter, group count); filter -> subscribers) and broadcast
once when the query starts, so each executor deserialises it once per Python worker instead of
a broadcast join rebuilding the table on every micro-batch.

Each micro-batch (``foreachBatch``) validates (signature, timestamp window, duplicates within
the batch and against the identifiers accepted by earlier batches inside the ``max_delay``
window: the routing guard's dedup window, eventguard.txt §4.7, which plays the watermark),
matches on executors against the index, and delivers. The sink is exactly-once by batch id:

1. if ``OUT/_batches/<id>.json`` exists the batch was committed: skip (Spark re-runs the last
   batch after a crash between our sink and its commit log);
2. otherwise remove any files a crashed attempt of ``<id>`` left, write the deliveries to a
   staging directory, move each file into ``OUT/outbox/subscriber=S/`` under a name carrying
   the batch id, record the accepted identifiers, and last write the marker.

So killing and restarting the query from its checkpoint neither loses nor duplicates a delivery.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubguard.pipeline import stages as S
from pubguard.pipeline.profiles import PipelineProfile, check_mode
from pubguard.pipeline.run import _read_parquet, spark_errors
from pubguard.pipeline.tables import check_columns, read_manifest
from pubguard.schemes.psguard.record import DEFAULT_MAX_DELAY_MS
from pubguard.schemes.psguard.tokens import NONCE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "build_index",
    "index_from_rows",
    "index_matches",
    "match_with_index",
    "run_stream",
    "stream_summary",
]

BATCHES = "_batches"
SEEN = "_seen"


def build_index(filters: DataFrame, subscriptions: DataFrame) -> dict[str, Any]:
    """The subscription index shipped to executors (tokens and ids only)."""
    return index_from_rows(
        filters.select("tok", "token", "filter_id", "n").toLocalIterator(),
        subscriptions.select("subscriber", "filter_id").toLocalIterator(),
    )


def index_from_rows(filters: Iterable[Any], subscriptions: Iterable[Any]) -> dict[str, Any]:
    """:func:`build_index` from rows (mappings with the filter table's ``tok``, ``token``,
    ``filter_id``, ``n``, and the subscriptions' ``subscriber``, ``filter_id``)."""
    by_tok: dict[int, list[tuple[str, int]]] = {}
    raw: dict[int, bytes] = {}
    for r in filters:
        by_tok.setdefault(int(r["tok"]), []).append((r["filter_id"], int(r["n"])))
        raw[int(r["tok"])] = bytes(r["token"])
    subs: dict[str, list[str]] = {}
    for r in subscriptions:
        subs.setdefault(r["filter_id"], []).append(r["subscriber"])
    toks = sorted(raw)
    return {"by_tok": by_tok, "subs": subs, "toks64": toks, "tokens": [raw[t] for t in toks]}


def match_with_index(events: DataFrame, index_bc: Any, mode: str) -> DataFrame:
    """Stage *match* against a broadcast index (map side; no shuffle of the filter table):
    deliveries ``(subscriber, event_id, filter_id)``. Randomized tokens are tested with the
    token matcher of :mod:`pubguard.native` (one call per Arrow batch, AES contexts set up
    once per Python worker and index: :func:`~pubguard.pipeline.stages.token_set_for`), as
    the batch match stage does."""
    from pyspark.sql import types as T

    out_schema = T.StructType(
        [T.StructField(c, T.StringType(), False) for c in ("subscriber", "event_id", "filter_id")]
    )

    def fn(batches: Iterable[Any]) -> Iterable[Any]:
        import pandas as pd

        idx = index_bc.value
        for pdf in batches:
            yield pd.DataFrame(
                index_matches(idx, pdf, mode), columns=["subscriber", "event_id", "filter_id"]
            )

    return events.select("event_id", "nonce", "tokens").mapInPandas(fn, out_schema)


def index_matches(idx: Mapping[str, Any], pdf: Any, mode: str) -> list[tuple[str, str, str]]:
    """``(subscriber, event_id, filter_id)`` of one batch of protected events (``event_id``,
    ``nonce``, ``tokens``) against an index of :func:`build_index`."""
    ids = pdf["event_id"].tolist()
    if mode == "randomized":
        nonces = b"".join(bytes(x) for x in pdf["nonce"])
        if len(nonces) != NONCE_BYTES * len(pdf):
            raise ValueError("randomized match needs a 16-byte nonce per event")
        toks64 = idx["toks64"]
        hits_by_ev: dict[int, list[int]] = {}
        for e, t in S.token_set_for(idx["tokens"]).match_batch(nonces, list(pdf["tokens"])):
            hits_by_ev.setdefault(e, []).append(toks64[t])
    else:
        hits_by_ev = {i: [int(x) for x in toks] for i, toks in enumerate(pdf["tokens"])}
    rows = []
    for i, toks in hits_by_ev.items():
        best = S.recipients(S.counted_filters(toks, idx["by_tok"]), idx["subs"])
        rows += [(sub, ids[i], fid) for sub, fid in best.items()]
    return rows


def _seen_ids(spark: SparkSession, out: Path, since_ms: int) -> DataFrame | None:
    seen = out / SEEN
    if not seen.exists() or not any(p.name.startswith("batch=") for p in seen.iterdir()):
        return None
    df = spark.read.parquet(str(seen))
    return df.where(df["ts"] >= since_ms)


def _process_batch(
    batch: DataFrame,
    batch_id: int,
    *,
    out: Path,
    prof: PipelineProfile,
    matcher: Callable[[DataFrame], DataFrame],
    manifest: dict[str, Any],
    now_ms: int | None,
    max_delay_ms: int,
    fail_after_write: int | None = None,
) -> None:
    marker = out / BATCHES / f"{batch_id:012d}.json"
    if marker.exists():
        return  # committed by an earlier attempt: exactly once
    outbox, tag = out / "outbox", f"part-b{batch_id:012d}-"
    if outbox.exists():  # files of a crashed attempt of this batch
        for p in [*outbox.glob(f"subscriber=*/{tag}*"), *outbox.glob(f"{S.PUBLICATIONS}/{tag}*")]:
            p.unlink()
    shutil.rmtree(out / SEEN / f"batch={batch_id}", ignore_errors=True)
    from pyspark.sql import functions as F

    spark = batch.sparkSession
    now = int(time.time() * 1000) if now_ms is None else now_ms
    checked = prof.validate(batch, manifest, now_ms=now, max_delay_ms=max_delay_ms)
    seen = _seen_ids(spark, out, now - max_delay_ms)
    if seen is not None:
        checked = prof.against_seen(checked, seen)
    checked = checked.cache()
    by_reason = S.reason_counts(checked)  # drops and the event count in one job
    drops = {r: c for r, c in by_reason.items() if r is not None}
    ok = S.accepted(checked)
    # the batch id rides on both sides of the delivery -> publication reference: an
    # identifier accepted again after the replay window is another publication
    batch_col = F.lit(batch_id).cast("long").alias("batch")
    deliveries = matcher(ok).select("*", batch_col).cache()
    n = deliveries.count()
    pubs = S.publications(ok, deliveries, prof.delivery_body).select("*", batch_col)
    staging = out / f".staging-b{batch_id:012d}"
    shutil.rmtree(staging, ignore_errors=True)
    deliveries.write.partitionBy("subscriber").parquet(str(staging / "d"))
    pubs.write.parquet(str(staging / "p"))
    moves = [(f, outbox / f.parent.name) for f in staging.glob("d/subscriber=*/*.parquet")]
    moves += [(f, outbox / S.PUBLICATIONS) for f in staging.glob("p/*.parquet")]
    for f, dest in sorted(moves):
        dest.mkdir(parents=True, exist_ok=True)
        os.replace(f, dest / f"{tag}{f.name}")
    shutil.rmtree(staging, ignore_errors=True)
    if fail_after_write is not None and batch_id == fail_after_write:
        raise RuntimeError(f"simulated crash after writing batch {batch_id}")
    ok.select(*prof.seen_columns()).write.parquet(str(out / SEEN / f"batch={batch_id}"))
    n_events = sum(by_reason.values())
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(
        json.dumps({"batch": batch_id, "events": n_events, "deliveries": n, "drops": drops})
    )
    os.replace(tmp, marker)
    checked.unpersist()
    deliveries.unpersist()


def stream_summary(out: Path | str) -> dict[str, Any]:
    """Totals over the committed batches of a stream's output folder."""
    d = Path(out) / BATCHES
    res: dict[str, Any] = {"batches": 0, "events": 0, "deliveries": 0, "drops": {}}
    for p in sorted(d.glob("*.json")) if d.exists() else []:
        m = json.loads(p.read_text())
        res["batches"] += 1
        res["events"] += m["events"]
        res["deliveries"] += m["deliveries"]
        for k, v in m["drops"].items():
            res["drops"][k] = res["drops"].get(k, 0) + v
    return res


def run_stream(
    spark: SparkSession,
    source: Path | str,
    out: Path | str,
    checkpoint: Path | str,
    *,
    available_now: bool = False,
    timeout: float | None = None,
    max_files_per_trigger: int | None = None,
    now_ms: int | None = None,
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
    fail_after_write: int | None = None,
) -> dict[str, Any]:
    """Run the streaming query until the source is drained (``available_now``), ``timeout``
    seconds pass, or it is interrupted; returns the totals of committed batches."""
    src, outp = Path(source), Path(out)
    manifest = read_manifest(src)
    prof, mode = check_mode(manifest["profile"], manifest["mode"])
    filters = _read_parquet(spark, src / "filters", "protected filters")
    subs = _read_parquet(spark, src / "subscriptions", "subscriptions")
    check_columns(filters, ("filter_id", "n", "tok", "token"), "protected filters")
    check_columns(subs, ("subscriber", "filter_id"), "subscriptions")
    (src / "events").mkdir(parents=True, exist_ok=True)
    outp.mkdir(parents=True, exist_ok=True)
    with spark_errors():
        matcher, index_bc = prof.stream_matcher(spark, filters, subs, mode)
        reader = spark.readStream.schema(prof.events_schema())
        if max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
        stream = reader.parquet(str(src / "events"))

        def sink(batch: DataFrame, batch_id: int) -> None:
            _process_batch(
                batch,
                batch_id,
                out=outp,
                prof=prof,
                matcher=matcher,
                manifest=manifest,
                now_ms=now_ms,
                max_delay_ms=max_delay_ms,
                fail_after_write=fail_after_write,
            )

        writer = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
        if available_now:
            writer = writer.trigger(availableNow=True)
        query = writer.start()
        try:
            query.awaitTermination(None if timeout is None else max(1, round(timeout)))
        finally:
            if query.isActive:
                query.stop()
            index_bc.unpersist()
        exc = query.exception()
        if exc is not None:
            raise RuntimeError(f"streaming query failed: {str(exc).splitlines()[0]}")
    return {"profile": prof.name, "mode": mode, **stream_summary(outp)}
