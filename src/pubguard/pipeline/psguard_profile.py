"""The psguard pipeline profile: psguard records in the ``record`` table layout (psguard.txt
§3-§4.1), the stages of :mod:`pubguard.pipeline.stages` and the opener of
:mod:`pubguard.pipeline.opener`, registered under ``psguard``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubguard.errors import DropReason
from pubguard.pipeline import stages as S
from pubguard.pipeline.opener import RECORD_BODY, OpenStats, open_outbox
from pubguard.pipeline.profiles import PipelineProfile, register
from pubguard.pipeline.tables import EVENT_COLUMNS, events_schema
from pubguard.schemes.psguard.record import MODES, PROFILE

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

    from pubguard.model import Event, EventType, Filter

__all__ = ["PSGuardPipeline"]


class PSGuardPipeline(PipelineProfile):
    """psguard on Spark: executors verify each record's Ed25519 signature and the
    ``max_delay`` window, and match tokens (deterministic join or randomized PRF)."""

    name = PROFILE
    modes: tuple[str, ...] = tuple(sorted(MODES, reverse=True))  # randomized first
    mode_note = "psguard defines deterministic and randomized tokens"
    layout = "record"
    event_columns: tuple[str, ...] = EVENT_COLUMNS
    delivery_body: tuple[str, ...] = RECORD_BODY

    def trusted(
        self,
        master: bytes,
        types: Sequence[EventType],
        *,
        mode: str,
        now_ms: int,
        seed: int | None,
        publisher: str = "p0",
        revoked: Sequence[str] = (),
    ) -> S.TrustedContext:
        return S.TrustedContext.create(
            master, list(types), mode=mode, now_ms=now_ms, seed=seed, publisher=publisher
        )

    def protect(
        self,
        spark: SparkSession,
        events: Sequence[Event],
        filters: Mapping[str, Filter],
        ctx: S.TrustedContext,
    ) -> tuple[DataFrame, DataFrame]:
        from pubguard.pipeline.run import spark_errors
        from pubguard.pipeline.tables import filters_schema

        ev_plain = S.events_frame(spark, events)
        f_plain = S.filters_frame(spark, filters)
        if (spark.sparkContext.master or "").startswith("local"):
            return S.protect_events(ev_plain, ctx), S.protect_filters(f_plain, ctx)
        with spark_errors():  # never ship keys to a remote cluster: protect on the driver
            ev = spark.createDataFrame(
                S.protect_events_pandas(ev_plain.toPandas(), ctx), events_schema()
            )
            fl = spark.createDataFrame(
                S.protect_filters_pandas(f_plain.toPandas(), ctx), filters_schema()
            )
        return ev, fl

    def protect_events_pandas(self, events: Sequence[Event], ctx: S.TrustedContext) -> Any:
        import pandas as pd

        return S.protect_events_pandas(pd.DataFrame([S._event_row(e) for e in events]), ctx)

    def protect_filters_pandas(self, filters: Mapping[str, Filter], ctx: S.TrustedContext) -> Any:
        import json

        import pandas as pd

        rows = [(fid, json.dumps(f.to_json())) for fid, f in filters.items()]
        return S.protect_filters_pandas(pd.DataFrame(rows, columns=["filter_id", "filter"]), ctx)

    def public(self, ctx: S.TrustedContext) -> dict[str, Any]:
        return {"publishers": {p: k.hex() for p, k in ctx.verify_keys.items()}}

    def open_outbox(
        self,
        outbox: Path,
        opened: Path,
        ctx: S.TrustedContext,
        filters: Mapping[str, Filter],
        spark: SparkSession | None,
    ) -> OpenStats:
        return open_outbox(outbox, opened, ctx, filters, spark=spark)

    def events_schema(self) -> Any:
        return events_schema()

    def check_malformed(self, events: DataFrame, mode: str, path: Path) -> None:
        from pubguard.pipeline.run import check_record_rows

        check_record_rows(events, mode, path)

    def validate(
        self, events: DataFrame, manifest: Mapping[str, Any], *, now_ms: int, max_delay_ms: int
    ) -> DataFrame:
        keys = {p: bytes.fromhex(k) for p, k in manifest["publishers"].items()}
        return S.validate(events, verify_keys=keys, now_ms=now_ms, max_delay_ms=max_delay_ms)

    def seen_columns(self) -> tuple[str, ...]:
        return ("event_id", "sig", "ts")

    def against_seen(self, checked: DataFrame, seen: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        seen = seen.select("event_id", F.col("sig").alias("_seen_sig"))
        return (
            checked.join(F.broadcast(seen), "event_id", "left")
            .withColumn(
                "drop",
                F.when(F.col("drop").isNotNull(), F.col("drop"))
                .when(F.col("_seen_sig").isNull(), F.lit(None))
                .when(F.col("_seen_sig") == F.col("sig"), F.lit(DropReason.REPLAYED.value))
                .otherwise(F.lit(DropReason.DUPLICATE.value)),
            )
            .drop("_seen_sig")
        )

    def match(
        self, events: DataFrame, filters: DataFrame, subs: DataFrame, *, mode: str
    ) -> DataFrame:
        return S.match(events, filters, subs, mode=mode)

    def stream_matcher(
        self, spark: SparkSession, filters: DataFrame, subs: DataFrame, mode: str
    ) -> tuple[Callable[[DataFrame], DataFrame], Any]:
        from pubguard.pipeline.stream import build_index, match_with_index

        bc = spark.sparkContext.broadcast(build_index(filters, subs))
        return (lambda ev: match_with_index(ev, bc, mode)), bc


PSGUARD = register(PSGuardPipeline())
