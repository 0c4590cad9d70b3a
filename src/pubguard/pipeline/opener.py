"""Stage *open*: subscribers read their outbox and decrypt (trusted side, never on executors).

Each delivery names the filter whose authorisation keys open it (psguard.txt §3.1 ``K(f)``);
the subscriber's client (:class:`~pubguard.schemes.psguard.authority.FilterKeys`) derives ``K(e)`` from
them, opens the sealed secret attributes and payload, and re-checks its own plaintext filter
(post-filter, exactness under least-count snapping). With a local (trusted) Spark session it
runs in parallel on the session's cores; otherwise on the driver over Arrow record batches, so
memory stays bounded by the batch size. ``OUT/opened`` is written atomically either way.

:func:`open_deliveries` is that machinery for every profile: it joins each delivery
``(subscriber, event_id, filter_id)`` with its event's publication (``OUT/outbox/_publications``,
one row per delivered event) and hands the rows to the profile's :class:`RowOpener` (here
:class:`_Opener` for psguard records; :class:`pubguard.pipeline.wire.WireOpener` for the
wire-layout profiles).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pubguard.errors import InvalidToken
from pubguard.model import Filter
from pubguard.pipeline.stages import PUBLICATIONS, TrustedContext
from pubguard.pipeline.tables import atomic_replace
from pubguard.schemes.psguard.authority import FilterKeys

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "OPENED_COLUMNS",
    "OPEN_ON_DRIVER_ROWS",
    "RECORD_BODY",
    "MakeOpener",
    "OpenStats",
    "RowOpener",
    "open_deliveries",
    "open_outbox",
    "opened_schema",
    "read_opened",
]

BATCH_ROWS = 8192


@dataclass
class OpenStats:
    opened: int = 0
    refused: int = 0  # InvalidToken: not authorised or tampered
    post_filtered: int = 0  # key trees admitted it, the filter did not (least count)
    by_subscriber: dict[str, int] = field(default_factory=dict)


def opened_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("subscriber", pa.string()),
            ("event_id", pa.string()),
            ("type", pa.string()),
            ("attrs", pa.string()),  # JSON of every decrypted attribute, routable and secret
            ("payload", pa.binary()),
        ]
    )


class _Opener:
    """One subscriber-side opener: filter keys on demand, and a memo of results.

    Subscribers holding the same filter derive the same ``K(e)`` from the same delivery, so
    the (deterministic) result of :meth:`FilterKeys.open_matching` is memoised by the filter
    and the delivery's full content (identifier, epoch and every ciphertext byte): a copy that
    differs in any byte is opened on its own. The memo is what the subscribers sharing a
    filter would each compute; it is bounded (cleared past :data:`MEMO_ROWS`)."""

    def __init__(self, ctx: TrustedContext, filters: Mapping[str, Filter]) -> None:
        self.auth = ctx.authority()
        self.filters = filters
        self.keys: dict[str, FilterKeys] = {}
        self.memo: dict[tuple[Any, ...], Any] = {}

    def open(self, fid: str, rec: dict[str, Any]) -> Any:
        """The opened Event, None (post-filtered) or :data:`REFUSED`."""
        key = (fid, rec["event_id"], rec["epoch"], rec["hint"], rec["secrets"], rec["payload"])
        got = self.memo.get(key, _MISS)
        if got is not _MISS:
            return got
        fk = self.keys.get(fid)
        if fk is None:
            f = self.filters.get(fid)
            if f is None:
                return REFUSED
            fk = self.keys[fid] = self.auth.authorise(f)
        try:
            got = fk.open_matching(rec)
        except InvalidToken:
            got = REFUSED
        if len(self.memo) >= MEMO_ROWS:
            self.memo.clear()
        self.memo[key] = got
        return got

    def open_columns(
        self, cols: Mapping[str, list[Any]], n: int
    ) -> tuple[dict[str, list[Any]], list[str]]:
        """Open ``n`` delivery rows given as columns: the opened rows and each row's status
        (``opened``, ``refused``, ``post_filtered``)."""
        out: dict[str, list[Any]] = {k: [] for k in OPENED_COLUMNS}
        status: list[str] = []
        for i in range(n):
            rec = {k: cols[k][i] for k in ("event_id", "epoch", "hint", "secrets", "payload")}
            ev = self.open(cols["filter_id"][i], rec)
            if ev is REFUSED:
                status.append("refused")
                continue
            if ev is None:
                status.append("post_filtered")
                continue
            status.append("opened")
            out["subscriber"].append(str(cols["subscriber"][i]))
            out["event_id"].append(ev.id)
            out["type"].append(ev.type)
            out["attrs"].append(json.dumps(dict(ev.attrs), sort_keys=True))
            out["payload"].append(ev.payload)
        return out, status


_MISS = object()
REFUSED = object()
MEMO_ROWS = 200_000
OPENED_COLUMNS = ("subscriber", "event_id", "type", "attrs", "payload")
#: the columns of a psguard record a subscriber opens
RECORD_BODY = ("epoch", "hint", "secrets", "payload")
#: an outbox this small is opened on the driver: starting Spark tasks would cost more
OPEN_ON_DRIVER_ROWS = 5000


class RowOpener(Protocol):
    """A profile's subscriber side over delivery rows given as columns (``subscriber``,
    ``event_id``, ``filter_id`` and the profile's publication columns): the opened rows and
    each row's status (``opened``, ``refused``, ``post_filtered``)."""

    def open_columns(
        self, cols: Mapping[str, list[Any]], n: int
    ) -> tuple[dict[str, list[Any]], list[str]]: ...


#: builds a profile's :class:`RowOpener` for the filters it may open with (once per task)
MakeOpener = Callable[[Mapping[str, Filter]], RowOpener]


def open_outbox(
    outbox: Path | str,
    opened: Path | str,
    ctx: TrustedContext,
    filters: Mapping[str, Filter],
    *,
    spark: SparkSession | None = None,
    progress: Callable[[int], None] | None = None,
) -> OpenStats:
    """Decrypt every psguard delivery of ``outbox`` with its subscriber's keys into
    ``opened`` (:func:`open_deliveries` with :class:`_Opener`)."""
    return open_deliveries(
        outbox,
        opened,
        functools.partial(_Opener, ctx),
        filters,
        RECORD_BODY,
        spark=spark,
        progress=progress,
    )


def open_deliveries(
    outbox: Path | str,
    opened: Path | str,
    make: MakeOpener,
    filters: Mapping[str, Filter],
    body: Sequence[str],
    *,
    spark: SparkSession | None = None,
    progress: Callable[[int], None] | None = None,
) -> OpenStats:
    """Open every delivery of ``outbox`` (each joined with its event's publication from
    ``outbox/_publications``, stored once per event) with the opener ``make`` builds, into
    ``opened``. With a *local* ``spark`` session (the machine is trusted, as for protect) and
    more than :data:`OPEN_ON_DRIVER_ROWS` deliveries, in parallel on its cores, grouped by
    filter so an opener's memo hits; otherwise on the driver over Arrow batches (memory
    bounded by the batch size and the publications). Keys never go to a remote executor."""
    src = Path(outbox)
    rows = _rows(src)
    local = spark is not None and (spark.sparkContext.master or "").startswith("local")
    if spark is not None and local and rows > OPEN_ON_DRIVER_ROWS:
        return _open_on_spark(spark, src, Path(opened), make, filters, body)
    return _open_on_driver(src, Path(opened), make, filters, body, rows > 0, progress)


def _rows(outbox: Path) -> int:
    """Deliveries in an outbox, from the Parquet footers (no data read)."""
    import pyarrow.dataset as ds

    if not outbox.exists() or not any(outbox.glob("subscriber=*/*.parquet")):
        return 0
    return int(ds.dataset(str(outbox), format="parquet", partitioning="hive").count_rows())


def _join_keys(outbox: Path) -> tuple[str, ...]:
    """What a delivery and its publication share: the event id, and in a streaming outbox
    the micro-batch that accepted it (an identifier accepted again after the replay window
    is another publication)."""
    import pyarrow.parquet as pq

    pubs = outbox / PUBLICATIONS
    first = next(iter(sorted(pubs.rglob("*.parquet"))), None)
    if first is None:
        return ("event_id",)
    names = set(pq.read_schema(first).names)
    return ("event_id", "batch") if "batch" in names else ("event_id",)


def _publication_index(outbox: Path, body: Sequence[str]) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """``(event_id[, batch]) -> body values`` of the outbox's publications (driver path)."""
    import pyarrow.dataset as ds

    pubs = outbox / PUBLICATIONS
    if not pubs.exists():
        return {}
    keys = _join_keys(outbox)
    index: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for batch in ds.dataset(str(pubs), format="parquet").to_batches(columns=[*keys, *body]):
        d = batch.to_pydict()
        for i in range(batch.num_rows):
            index[tuple(d[k][i] for k in keys)] = tuple(d[c][i] for c in body)
    return index


def _as_bytes(values: list[Any]) -> list[Any]:
    return [bytes(v) if isinstance(v, (bytearray, memoryview)) else v for v in values]


def _open_on_driver(
    outbox: Path,
    opened: Path,
    make: MakeOpener,
    filters: Mapping[str, Filter],
    body: Sequence[str],
    has_rows: bool,
    progress: Callable[[int], None] | None,
) -> OpenStats:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    stats = OpenStats()
    schema = opened_schema()

    def write(staging: Path) -> None:
        staging.mkdir(parents=True, exist_ok=True)
        if not has_rows:
            pq.write_table(schema.empty_table(), staging / "part-00000.parquet")
            return
        opener = make(filters)
        pubs = _publication_index(outbox, body)
        keys = _join_keys(outbox)
        dataset = ds.dataset(str(outbox), format="parquet", partitioning="hive")
        with pq.ParquetWriter(staging / "part-00000.parquet", schema) as writer:
            for batch in dataset.to_batches(batch_size=BATCH_ROWS):
                cols = batch.to_pydict()
                if pubs:
                    got = [pubs[tuple(cols[k][i] for k in keys)] for i in range(batch.num_rows)]
                    for j, c in enumerate(body):
                        cols[c] = [g[j] for g in got]
                out, status = opener.open_columns(cols, batch.num_rows)
                _count(stats, out["subscriber"], status)
                writer.write_table(pa.table(out, schema=schema))
                if progress is not None:
                    progress(batch.num_rows)

    atomic_replace(opened, write)
    return stats


def _count(stats: OpenStats, subscribers: list[str], status: list[str]) -> None:
    stats.opened += status.count("opened")
    stats.refused += status.count("refused")
    stats.post_filtered += status.count("post_filtered")
    for sub in subscribers:
        stats.by_subscriber[str(sub)] = stats.by_subscriber.get(str(sub), 0) + 1


def _open_on_spark(
    spark: SparkSession,
    outbox: Path,
    opened: Path,
    make: MakeOpener,
    filters: Mapping[str, Filter],
    body: Sequence[str],
) -> OpenStats:
    """The local-session path of :func:`open_deliveries`: the deliveries joined with their
    publications, repartitioned by filter, ``mapInPandas`` with one opener (keys, memo) per
    partition; the opened rows written by Spark to a staging directory swapped into place."""
    from pyspark.sql import functions as F

    texts = {fid: json.dumps(f.to_json()) for fid, f in filters.items()}
    bc = spark.sparkContext.broadcast(texts)
    schema = (
        "subscriber string, event_id string, type string, attrs string, payload binary, "
        "status string"
    )

    def fn(batches: Iterable[Any]) -> Iterable[Any]:
        import pandas as pd

        from pubguard.model import filter_from_json

        fs = {fid: filter_from_json(json.loads(t)) for fid, t in bc.value.items()}
        opener = make(fs)
        for pdf in batches:
            cols = {c: _as_bytes(pdf[c].tolist()) for c in pdf.columns}
            out, status = opener.open_columns(cols, len(pdf))
            rows = pd.DataFrame(out, columns=list(OPENED_COLUMNS))
            rows["status"] = "opened"
            bad = [s for s in status if s != "opened"]
            if bad:
                extra = pd.DataFrame({"status": bad})
                for c in OPENED_COLUMNS:
                    extra[c] = None
                rows = pd.concat([rows, extra[rows.columns]], ignore_index=True)
            yield rows

    deliveries = spark.read.parquet(str(outbox)).withColumn(
        "subscriber", F.col("subscriber").cast("string")
    )
    if (outbox / PUBLICATIONS).exists():
        pubs = spark.read.parquet(str(outbox / PUBLICATIONS))
        keys = list(_join_keys(outbox))
        deliveries = deliveries.select("subscriber", "filter_id", *keys).join(pubs, keys)
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)
    result = (
        deliveries.repartition(parts, "filter_id")
        .select("subscriber", "event_id", "filter_id", *body)
        .mapInPandas(fn, schema)
        .cache()
    )
    stats = OpenStats()
    try:
        for r in result.groupBy("status", "subscriber").count().collect():
            n = int(r["count"])
            if r["status"] == "opened":
                stats.opened += n
                stats.by_subscriber[r["subscriber"]] = n
            elif r["status"] == "refused":
                stats.refused += n
            else:
                stats.post_filtered += n

        def write(staging: Path) -> None:
            (
                result.where(F.col("status") == "opened")
                .drop("status")
                .write.mode("overwrite")
                .parquet(str(staging))
            )

        atomic_replace(opened, write)
    finally:
        result.unpersist()
        bc.unpersist()
    return stats


def read_opened(opened: Path | str) -> Any:
    """The opened deliveries as a pandas DataFrame."""
    import pyarrow.parquet as pq

    return pq.read_table(str(opened)).to_pandas()
