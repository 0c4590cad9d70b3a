"""The ``wire`` table layout: a profile's publications as they travel on the broker network.

Theory of operation. A wire-layout profile (plain, eventguard, default; more register later)
protects on the trusted side with its scheme's own *client* (``protect_events``: the same
bytes a publisher sends to a broker), and stores each publication as msgpack ``routing``,
``body`` and ``meta`` beside the public fields executors order and join on (``publisher``,
``pkey``, ``ts``, ``seq``, ``mode``, ``nonce``, ``tokens``), which the profile reads from the
publication with its *broker* face's decoder. Nothing here encodes a field of a scheme, so a
change of what a scheme puts on the wire flows through unchanged.

Executors (untrusted brokers) then run, per partition:

- *validate*: the profile's broker scheme, built once per partition from the manifest's
  public keys, runs ``broker_check`` on every publication, ordered by ``(pkey, ts, seq)``
  within the partition. So a Merkle batch's root signature is verified once per partition
  it lands in (``SignedRootVerifier``), permits once, and every drop carries the broker's own
  reason (``forged``, ``stale``, ``unauthorised``, ``revoked``, ``replayed``, ``malformed``).
  Across partitions two Spark window passes finish the replay defence: a second publication
  with an accepted ``(publisher key, ts, seq)`` is ``replayed`` (narada §V-B, profiles that
  sequence their publications), a second one with an accepted identifier ``duplicate`` (the
  routing guard's de-dup, eventguard.txt §4.7);
- *match*: the token profiles' counting join (:func:`pubguard.pipeline.stages.match`) on the
  ``tokens`` column, or a profile's own map-side matcher (plain: its scheme's index). Either
  yields deliveries ``(subscriber, event_id, filter_id)`` only: the publication (``routing``,
  ``body``, ``meta``, many times a plaintext event's size: permits, signature, Merkle path)
  is attached once per delivered event afterwards (``stages.publications``);
- *deliver*: as every profile (``stages.deliver``).

Subscribers open on the trusted side with one scheme client per filter (holding that filter's
keys only), then re-check the plaintext filter (post-filter): :class:`WireOpener`, driven by
:func:`pubguard.pipeline.opener.open_deliveries` as every profile's opener is.
"""

from __future__ import annotations

import abc
import functools
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgpack

from pubguard.crypto import SecretBytes
from pubguard.errors import DropReason, InvalidToken, PubguardError, ValidationError
from pubguard.model import Event, EventType, Filter
from pubguard.pipeline import stages as S
from pubguard.pipeline.opener import MEMO_ROWS, OPENED_COLUMNS, OpenStats, open_deliveries
from pubguard.pipeline.profiles import PipelineProfile
from pubguard.pipeline.tables import (
    FILTER_COLUMNS,
    WIRE_EVENT_COLUMNS,
    filters_schema,
    wire_events_schema,
)
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind, ProtectedEvent

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MERKLE_BATCH", "WireContext", "WireOpener", "WireProfile", "pack", "unpack"]

#: publications per publisher signature (one Merkle root per batch; eventguard.txt §4.4): the
#: batch the broker network's clients sign by default, so a broker verifies one signature per
#: 64 publications; each executor partition verifies a batch's root once
MERKLE_BATCH: Final = 64
#: the identity an executor's guards see for the link the tables came on: a broker link
#: (strikes never ban it: one bad row must not refuse the rest of the table)
PIPELINE_LINK: Final = LinkInfo("pipeline", LinkKind.PARENT, "pipeline")


def pack(v: Mapping[str, Any]) -> bytes:
    """A wire mapping (routing or meta) as stored in a table."""
    return msgpack.packb(dict(v), use_bin_type=True)  # type: ignore[no-any-return]


def unpack(blob: Any) -> dict[str, Any]:
    """A stored wire mapping back (ValidationError if it is not one)."""
    try:
        v = msgpack.unpackb(bytes(blob), raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        raise ValidationError("undecodable wire field") from None
    if not isinstance(v, dict):
        raise ValidationError("a wire field is a mapping")
    return v


@dataclass(frozen=True, slots=True)
class _Publish:
    """A publication as a broker scheme's guard reads it (the core's message, duck-typed)."""

    profile: str
    event_id: str
    routing: Mapping[str, Any]
    body: bytes
    meta: Mapping[str, Any]
    op: str = "publish"


@dataclass(frozen=True)
class WireContext:
    """The trusted side of a wire-layout run: the master secret the profile derives its key
    services from, the event types, the clock and the publisher. Picklable (a local
    session's tasks open with it); the scheme objects are rebuilt lazily after unpickling."""

    profile: str
    master: SecretBytes
    types: tuple[str, ...]  # EventType JSON texts
    mode: str
    now_ms: int
    seed: int | None = None
    publisher: str = "p0"
    revoked: tuple[str, ...] = ()  # publisher names whose keys the manifest lists as revoked
    epoch: int = 0
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "cache", {})

    @property
    def now(self) -> float:
        return self.now_ms / 1000.0

    def event_types(self) -> list[EventType]:
        return [EventType.from_json(json.loads(t)) for t in self.types]

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = make()
        return got

    def rng(self, label: str) -> random.Random | None:
        """Deterministic randomness for tests and demos (``seed``); None: the OS's."""
        if self.seed is None:
            return None
        return random.Random(f"pubguard-pipeline/{self.profile}/{self.seed}/{label}")


class WireProfile(PipelineProfile):
    """Base of the wire-layout profiles: the table handling. A subclass supplies its scheme
    through the abstract hooks; a profile that does not match by the counting join on
    ``tokens`` (``token_join = False``) overrides :meth:`build_match_index` and
    :meth:`match_partition` (their defaults are the counting matcher, map side)."""

    event_columns: tuple[str, ...] = WIRE_EVENT_COLUMNS
    #: the publication a subscriber opens (stored once per delivered event)
    delivery_body: tuple[str, ...] = ("routing", "body", "meta")
    #: publications carry (ts, seq) per publisher key: a second one is ``replayed``
    sequenced = False
    #: match by the counting join on ``tokens`` (False: :meth:`match_partition`)
    token_join = True

    # -- hooks ----------------------------------------------------------------------------------
    @abc.abstractmethod
    def protect_batch(self, ctx: WireContext, events: Sequence[Event]) -> list[ProtectedEvent]:
        """One Merkle batch of publications from the profile's publishing client."""

    @abc.abstractmethod
    def join_fields(
        self, ctx: WireContext, pe: ProtectedEvent
    ) -> tuple[str, bytes, int, int, str, bytes, list[int]]:
        """``(publisher, pkey, ts_ms, seq, mode, nonce, tokens)`` of a publication, read with
        the broker face's decoder."""

    @abc.abstractmethod
    def filter_rows(
        self, ctx: WireContext, fid: str, f: Filter
    ) -> list[tuple[str, int, int, bytes]]:
        """``(filter_id, n, tok, token)`` rows of a subscription, from the profile's
        subscribing client (tokens only; its keys stay with the subscriber)."""

    @abc.abstractmethod
    def public(self, ctx: WireContext) -> dict[str, Any]:
        """Manifest material: ``publishers`` (name -> public key hex) and what the broker
        needs (the key service's public key, revoked keys)."""

    @abc.abstractmethod
    def broker(self, manifest: Mapping[str, Any], max_delay: float) -> Any:
        """The profile's broker scheme, from the manifest's public material."""

    @abc.abstractmethod
    def subscriber(self, ctx: WireContext, fid: str, f: Filter) -> Any:
        """A client holding ``f``'s keys only (its ``open_event`` opens deliveries)."""

    def build_match_index(self, filters: DataFrame, subs: DataFrame) -> Any:
        """The index :meth:`match_partition` matches against, broadcast once (default: the
        token index of the counting matcher)."""
        from pubguard.pipeline.stream import build_index

        return build_index(filters, subs)

    def match_partition(self, index: Any, pdf: Any) -> list[tuple[str, str, str]]:
        """Map-side match of one batch against the broadcast index: ``(subscriber, event_id,
        filter_id)`` (default: the counting matcher on deterministic ``tokens``)."""
        from pubguard.pipeline.stream import index_matches

        return index_matches(index, pdf, "deterministic")

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
    ) -> WireContext:
        m = master if isinstance(master, SecretBytes) else SecretBytes(master)
        texts = tuple(json.dumps(t.to_json(), sort_keys=True) for t in types)
        return WireContext(self.name, m, texts, mode, now_ms, seed, publisher, tuple(revoked))

    # -- trusted side ---------------------------------------------------------------------------
    def protect_events_pandas(self, events: Sequence[Event], ctx: WireContext) -> Any:
        """Protect on the driver, in Merkle batches from one publishing client (its sequence
        numbers are one strictly increasing run, as on the network)."""
        import pandas as pd

        rows = []
        evs = list(events)
        for i in range(0, len(evs), MERKLE_BATCH):
            for pe in self.protect_batch(ctx, evs[i : i + MERKLE_BATCH]):
                pub, pkey, ts, seq, mode, nonce, tokens = self.join_fields(ctx, pe)
                rows.append(
                    (pe.event_id, pub, pkey, ts, seq, mode, nonce, tokens)
                    + (pack(pe.routing), bytes(pe.body), pack(pe.meta))
                )
        return pd.DataFrame(rows, columns=list(WIRE_EVENT_COLUMNS))

    def protect_filters_pandas(self, filters: Mapping[str, Filter], ctx: WireContext) -> Any:
        import pandas as pd

        rows: list[tuple[str, int, int, bytes]] = []
        for fid, f in filters.items():
            rows += self.filter_rows(ctx, fid, f)
        return pd.DataFrame(rows, columns=list(FILTER_COLUMNS))

    def protect(
        self,
        spark: SparkSession,
        events: Sequence[Event],
        filters: Mapping[str, Filter],
        ctx: WireContext,
    ) -> tuple[DataFrame, DataFrame]:
        """Protected tables, built on the driver (keys never reach an executor)."""
        ev = spark.createDataFrame(self.protect_events_pandas(events, ctx), wire_events_schema())
        fl = spark.createDataFrame(self.protect_filters_pandas(filters, ctx), filters_schema())
        return ev, fl

    # -- untrusted side ---------------------------------------------------------------------------
    def events_schema(self) -> Any:
        return wire_events_schema()

    def check_malformed(self, events: DataFrame, mode: str, path: Path) -> None:
        from pyspark.sql import functions as F

        from pubguard.errors import InputError

        bad = None
        for c in WIRE_EVENT_COLUMNS:
            cond = F.col(c).isNull()
            bad = cond if bad is None else bad | cond
        assert bad is not None
        row = events.select(
            F.sum(bad.cast("int")).alias("nulls"),
            F.sum((F.col("mode") != F.lit(mode)).cast("int")).alias("mode"),
        ).collect()[0]
        if row["nulls"]:
            raise InputError(
                f"protected events: {row['nulls']} malformed row(s) with null fields",
                path=str(path),
            )
        if row["mode"]:
            raise ValidationError(
                f"profile mismatch: {row['mode']} protected event(s) are not in {mode!r} mode"
            )

    def validate(
        self, events: DataFrame, manifest: Mapping[str, Any], *, now_ms: int, max_delay_ms: int
    ) -> DataFrame:
        """``events`` plus ``drop``: the broker scheme's verdict per publication, then the
        cross-partition replay and duplicate passes (module docstring)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        public = dict(manifest)
        schema = T.StructType([*events.select(*WIRE_EVENT_COLUMNS).schema.fields]).add(
            "drop", T.StringType(), True
        )
        profile = self

        def fn(batches: Iterable[Any]) -> Iterator[Any]:
            broker = profile.broker(public, max_delay_ms / 1000.0)  # once per partition
            cc = CheckContext(now=now_ms / 1000.0, link=PIPELINE_LINK, broker_id="pipeline")
            for pdf in batches:
                drops = [profile._check_row(broker, cc, row) for row in pdf.itertuples(index=False)]
                pdf = pdf.copy()
                pdf["drop"] = drops
                yield pdf

        checked = (
            events.select(*WIRE_EVENT_COLUMNS)
            .sortWithinPartitions("pkey", "ts", "seq")
            .mapInPandas(fn, schema)
        )
        ok_first = F.col("drop").isNotNull()
        if self.sequenced:
            w = Window.partitionBy("pkey", "ts", "seq").orderBy(ok_first, "event_id")
            checked = checked.withColumn(
                "drop",
                F.when(ok_first, F.col("drop"))
                .when(F.row_number().over(w) > 1, F.lit(DropReason.REPLAYED.value))
                .otherwise(F.lit(None)),
            )
        w2 = Window.partitionBy("event_id").orderBy(ok_first, "ts", "seq", "pkey")
        return checked.withColumn(
            "drop",
            F.when(ok_first, F.col("drop"))
            .when(F.row_number().over(w2) > 1, F.lit(DropReason.DUPLICATE.value))
            .otherwise(F.lit(None)),
        )

    def _check_row(self, broker: Any, cc: CheckContext, row: Any) -> str | None:
        try:
            m = _Publish(
                self.name, row.event_id, unpack(row.routing), bytes(row.body), unpack(row.meta)
            )
        except ValidationError:
            return DropReason.MALFORMED.value
        reason = broker.broker_check(m, cc)
        return None if reason is None else str(reason.value)

    def seen_columns(self) -> tuple[str, ...]:
        return ("event_id", "pkey", "ts", "seq")

    def against_seen(self, checked: DataFrame, seen: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        out = checked
        if self.sequenced:
            by_seq = seen.select("pkey", "ts", "seq").withColumn("_seq_seen", F.lit(True))
            out = out.join(F.broadcast(by_seq), ["pkey", "ts", "seq"], "left")
        else:
            out = out.withColumn("_seq_seen", F.lit(None).cast("boolean"))
        by_id = seen.select("event_id").distinct().withColumn("_id_seen", F.lit(True))
        out = out.join(F.broadcast(by_id), "event_id", "left")
        return out.withColumn(
            "drop",
            F.when(F.col("drop").isNotNull(), F.col("drop"))
            .when(F.col("_seq_seen"), F.lit(DropReason.REPLAYED.value))
            .when(F.col("_id_seen"), F.lit(DropReason.DUPLICATE.value))
            .otherwise(F.lit(None)),
        ).drop("_seq_seen", "_id_seen")

    def match(
        self, events: DataFrame, filters: DataFrame, subs: DataFrame, *, mode: str
    ) -> DataFrame:
        """Deliveries ``(subscriber, event_id, filter_id)``; the publications are attached
        once per event afterwards (:func:`pubguard.pipeline.stages.publications`)."""
        if self.token_join:
            return S.match(events, filters, subs, mode=mode)
        spark = events.sparkSession
        bc = spark.sparkContext.broadcast(self.build_match_index(filters, subs))
        return self._map_match(events, bc)

    def stream_matcher(
        self, spark: SparkSession, filters: DataFrame, subs: DataFrame, mode: str
    ) -> tuple[Callable[[DataFrame], DataFrame], Any]:
        if self.token_join:
            from pubguard.pipeline.stream import build_index, match_with_index

            bc = spark.sparkContext.broadcast(build_index(filters, subs))
            return (lambda ev: match_with_index(ev, bc, mode)), bc
        bc = spark.sparkContext.broadcast(self.build_match_index(filters, subs))
        return (lambda ev: self._map_match(ev, bc)), bc

    def _map_match(self, events: DataFrame, bc: Any) -> DataFrame:
        from pyspark.sql import types as T

        cols = ("subscriber", "event_id", "filter_id")
        out_schema = T.StructType([T.StructField(c, T.StringType(), False) for c in cols])
        profile = self

        def fn(batches: Iterable[Any]) -> Iterator[Any]:
            import pandas as pd

            for pdf in batches:
                yield pd.DataFrame(profile.match_partition(bc.value, pdf), columns=list(cols))

        return events.select(*WIRE_EVENT_COLUMNS).mapInPandas(fn, out_schema)

    # -- subscriber side (trusted) ------------------------------------------------------------------
    def open_outbox(
        self,
        outbox: Path,
        opened: Path,
        ctx: WireContext,
        filters: Mapping[str, Filter],
        spark: SparkSession | None,
    ) -> OpenStats:
        """Open every delivery with a client holding its filter's keys only
        (:func:`pubguard.pipeline.opener.open_deliveries` with a :class:`WireOpener`)."""
        make = functools.partial(WireOpener, self, ctx)
        return open_deliveries(outbox, opened, make, filters, self.delivery_body, spark=spark)


class WireOpener:
    """The subscriber side of a wire-layout profile over delivery rows: one client per
    filter, holding that filter's keys only (``open_event``), then the plaintext filter
    re-checked (post-filter). Subscribers sharing a filter open the same publication to the
    same event, so the result is memoised by the filter and the publication's bytes (bounded
    as :class:`pubguard.pipeline.opener` bounds its own)."""

    def __init__(self, profile: WireProfile, ctx: WireContext, filters: Mapping[str, Filter]):
        self.profile, self.ctx, self.filters = profile, ctx, filters
        self.clients: dict[str, Any] = {}
        self.memo: dict[tuple[Any, ...], Any] = {}

    def open_row(self, fid: str, event_id: str, routing: Any, body: Any, meta: Any) -> Any:
        """The opened Event, or the status ``refused`` / ``post_filtered``."""
        key = (fid, event_id, bytes(routing), bytes(body), bytes(meta))
        got = self.memo.get(key)
        if got is None:
            got = self._open(fid, event_id, key[2], key[3], key[4])
            if len(self.memo) >= MEMO_ROWS:
                self.memo.clear()
            self.memo[key] = got
        return got

    def _open(self, fid: str, event_id: str, routing: bytes, body: bytes, meta: bytes) -> Any:
        f = self.filters.get(fid)
        if f is None:
            return "refused"
        c = self.clients.get(fid)
        if c is None:
            c = self.clients[fid] = self.profile.subscriber(self.ctx, fid, f)
        try:
            ev = c.open_event(event_id, unpack(routing), body, unpack(meta), now=self.ctx.now)
        except (InvalidToken, PubguardError):
            return "refused"
        return ev if f.matches(ev) else "post_filtered"

    def open_columns(
        self, cols: Mapping[str, list[Any]], n: int
    ) -> tuple[dict[str, list[Any]], list[str]]:
        out: dict[str, list[Any]] = {k: [] for k in OPENED_COLUMNS}
        status: list[str] = []
        for i in range(n):
            got = self.open_row(
                cols["filter_id"][i],
                cols["event_id"][i],
                cols["routing"][i],
                cols["body"][i],
                cols["meta"][i],
            )
            if isinstance(got, str):
                status.append(got)
                continue
            status.append("opened")
            out["subscriber"].append(str(cols["subscriber"][i]))
            out["event_id"].append(str(got.id))
            out["type"].append(got.type)
            out["attrs"].append(json.dumps(dict(got.attrs), sort_keys=True))
            out["payload"].append(got.payload)
        return out, status
