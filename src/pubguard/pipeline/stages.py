"""The dissemination stages as pure ``DataFrame -> DataFrame`` functions.

Theory of operation (psguard.txt §3-§4.1). The chain is::

    plaintext events --protect--> protected events --validate--> --match--> deliveries
                                                                   --deliver--> OUT/outbox
    OUT/outbox --open (trusted, subscriber side)--> OUT/opened

``protect`` runs where the keys are (the trusted side: a local session or the driver); it
closes over a :class:`TrustedContext` holding the KDC master. ``validate`` and ``match`` are
what Spark executors (untrusted brokers) run: their inputs and outputs hold tokens and
ciphertext only, and their closures hold public keys and tokens only.

Matching is a counting matcher: a protected filter of ``n`` token groups matches an event
meeting ``n`` of its tokens. ``deterministic`` mode is an equi-join of the event's exploded
tokens with the filter table on the 64-bit token; numeric ranges match because an event carries
the token of every prefix of its NAKT leaf id and a filter the tokens of its range cover.
``randomized`` mode evaluates each distinct subscription token as an AES PRF over all nonces of
a partition (one cipher call per token), emitting ``(event, token)`` hits, then joins the same
way. Either way the cost is one row per (event, filter token) hit, i.e. grows with matches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pubguard.crypto import AesPrf, SecretBytes, SigningKey, VerifyKey
from pubguard.crypto.ed25519_batch import verify_batch
from pubguard.errors import DropReason
from pubguard.keys.kdc import KDC
from pubguard.model import Event, EventType, Filter, Subscription, event_from_json, filter_from_json
from pubguard.pipeline.tables import (
    EVENT_COLUMNS,
    FILTER_COLUMNS,
    SUBSCRIPTION_COLUMNS,
    atomic_replace,
    check_columns,
    events_schema,
    filters_schema,
    subscriptions_schema,
)
from pubguard.schemes.psguard.authority import Authority
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import (
    DEFAULT_MAX_DELAY_MS,
    Schema,
    encode_secrets,
    signed_message,
)
from pubguard.schemes.psguard.tokens import NONCE_BYTES, TokenSet

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

#: the outbox's directory of publications, one row per delivered event
PUBLICATIONS: Final = "_publications"

__all__ = [
    "TrustedContext",
    "counted_filters",
    "deliver",
    "drop_counts",
    "event_keys",
    "events_frame",
    "filters_frame",
    "match",
    "protect_events",
    "protect_filters",
    "protect_events_pandas",
    "protect_filters_pandas",
    "PUBLICATIONS",
    "prfs_for",
    "publications",
    "reason_counts",
    "recipients",
    "routing_table",
    "subscriptions_frame",
    "validate",
]


class _MemoSchema(Schema):
    """:class:`Schema` with :meth:`candidates` memoised by the filter's attribute names (it
    depends on nothing else). It walked every type per filter, half of protecting a psguard
    filter when a workload has 128 types; filters naming a secret attribute are not memoised
    (the generic method raises, naming the filter)."""

    __slots__ = ("_cands",)

    def __init__(self, types: Any) -> None:
        super().__init__(types)
        self._cands: dict[frozenset[str], list[EventType]] = {}

    def candidates(self, f: Filter) -> list[EventType]:
        names = f.attribute_names
        got = self._cands.get(names)
        if got is None:
            got = self._cands[names] = Schema.candidates(self, f)
        return list(got)


# -- the trusted context (keys live here, never in an executor closure of an untrusted stage)


@dataclass(frozen=True)
class TrustedContext:
    """What the trusted side needs to protect: KDC master, publisher key, schema, clock."""

    master: SecretBytes
    signing_seed: SecretBytes
    types: tuple[str, ...]  # EventType JSON texts (picklable, hashable)
    mode: str = "randomized"
    epoch: int = 0
    publisher: str = "p0"
    now_ms: int = 0
    seed: int | None = None  # deterministic nonces for tests; None = OS randomness
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def create(
        cls,
        master: bytes | SecretBytes,
        types: Sequence[EventType],
        **kw: Any,
    ) -> TrustedContext:
        m = master if isinstance(master, SecretBytes) else SecretBytes(master)
        seed = SecretBytes(KDC(m).topic_key("\x01publisher-signing").reveal())
        texts = tuple(json.dumps(t.to_json(), sort_keys=True) for t in types)
        return cls(m, kw.pop("signing_seed", seed), texts, **kw)

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "_cache"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_cache", {})

    @property
    def schema(self) -> Schema:
        s = self._cache.get("schema")
        if s is None:
            s = self._cache["schema"] = _MemoSchema(
                [EventType.from_json(json.loads(t)) for t in self.types]
            )
        return s  # type: ignore[no-any-return]

    @property
    def kdc(self) -> KDC:
        k = self._cache.get("kdc")
        if k is None:
            k = self._cache["kdc"] = KDC(self.master)
        return k  # type: ignore[no-any-return]

    @property
    def signing_key(self) -> SigningKey:
        return SigningKey.from_seed(self.signing_seed.reveal())

    @property
    def verify_keys(self) -> dict[str, bytes]:
        """Public: publisher name -> Ed25519 public key bytes (goes into the manifest)."""
        return {self.publisher: self.signing_key.public.to_bytes()}

    def publisher_(self) -> Publisher:
        p = self._cache.get("publisher")
        if p is None:
            p = self._cache["publisher"] = Publisher(
                self.kdc,
                self.schema,
                name=self.publisher,
                signing_key=self.signing_key,
                epoch=self.epoch,
                mode=self.mode,
            )
        return p  # type: ignore[no-any-return]

    def authority(self) -> Authority:
        a = self._cache.get("authority")
        if a is None:
            a = self._cache["authority"] = Authority(self.kdc, self.schema, epoch=self.epoch)
        return a  # type: ignore[no-any-return]

    def rng_for(self, event_id: str) -> random.Random | None:
        if self.seed is None:
            return None
        return random.Random(f"pubguard-pipeline/{self.seed}/{event_id}")


# -- plaintext inputs ---------------------------------------------------------------------------


def _event_row(e: Event) -> dict[str, Any]:
    return {
        "event_id": e.id,
        "event": json.dumps(e.to_json(), sort_keys=True),
    }


def events_frame(spark: SparkSession, events: Sequence[Event]) -> DataFrame:
    """Plaintext events as ``(event_id, event)`` with the event's JSON (trusted side only)."""
    import pandas as pd

    pdf = pd.DataFrame([_event_row(e) for e in events], columns=["event_id", "event"])
    return spark.createDataFrame(pdf, "event_id string, event string")


def filters_frame(spark: SparkSession, filters: Mapping[str, Filter]) -> DataFrame:
    import pandas as pd

    rows = [(fid, json.dumps(f.to_json())) for fid, f in filters.items()]
    pdf = pd.DataFrame(rows, columns=["filter_id", "filter"])
    return spark.createDataFrame(pdf, "filter_id string, filter string")


def subscriptions_frame(spark: SparkSession, subs: Sequence[Subscription]) -> DataFrame:
    import pandas as pd

    rows = sorted({(s.subscriber, s.filter.id or str(s.filter)) for s in subs})
    pdf = pd.DataFrame(rows, columns=list(SUBSCRIPTION_COLUMNS))
    return spark.createDataFrame(pdf, subscriptions_schema())


# -- protect (trusted) ------------------------------------------------------------------------


def protect_events_pandas(pdf: Any, ctx: TrustedContext) -> Any:
    """One batch of plaintext events to protected rows (pure; used by the Spark stage and by
    the driver when the cluster is not trusted)."""
    import pandas as pd

    pub = ctx.publisher_()
    rows = []
    for text in pdf["event"]:
        e = event_from_json(json.loads(text))
        r = pub.protect(e, now_ms=ctx.now_ms, rng=ctx.rng_for(str(e.id)))
        rows.append(
            (
                r.event_id,
                r.publisher,
                r.ts,
                r.epoch,
                r.mode,
                r.nonce,
                list(r.tokens),
                r.hint,
                encode_secrets(r.secrets),
                r.payload,
                r.sig,
            )
        )
    return pd.DataFrame(rows, columns=list(EVENT_COLUMNS))


def protect_events(df: DataFrame, ctx: TrustedContext) -> DataFrame:
    """Stage *protect*: plaintext ``(event_id, event)`` -> protected events (trusted side)."""

    def fn(batches: Iterable[Any]) -> Iterable[Any]:
        for pdf in batches:
            yield protect_events_pandas(pdf, ctx)

    return df.mapInPandas(fn, events_schema())


def protect_filters_pandas(pdf: Any, ctx: TrustedContext) -> Any:
    import pandas as pd

    auth = ctx.authority()
    rows: list[tuple[str, int, int, bytes]] = []
    for fid, text in zip(pdf["filter_id"], pdf["filter"], strict=True):
        f = filter_from_json(json.loads(text))
        if f.id != str(fid):
            f = f.with_id(str(fid))
        rows += auth.protect_filter(f).rows()
    return pd.DataFrame(rows, columns=list(FILTER_COLUMNS))


def protect_filters(df: DataFrame, ctx: TrustedContext) -> DataFrame:
    """Stage *protect* for subscriptions: ``(filter_id, filter)`` -> token rows (KDC side)."""

    def fn(batches: Iterable[Any]) -> Iterable[Any]:
        for pdf in batches:
            yield protect_filters_pandas(pdf, ctx)

    return df.mapInPandas(fn, filters_schema())


# -- validate (untrusted) -----------------------------------------------------------------------


def validate(
    df: DataFrame,
    *,
    verify_keys: Mapping[str, bytes],
    now_ms: int,
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
) -> DataFrame:
    """Stage *validate*: adds a ``drop`` column (null = accepted) with the first failing guard:
    ``forged`` (unknown publisher or bad Ed25519 signature), ``stale`` (signed timestamp more
    than ``max_delay_ms`` from ``now_ms``), ``replayed`` (an exact copy of an accepted event)
    or ``duplicate`` (same identifier, different content). Keeps every row so drops can be
    counted; :func:`accepted` filters. Executors get public keys only."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    check_columns(df, EVENT_COLUMNS, "protected events")
    keys = dict(verify_keys)
    out_schema = T.StructType([*df.select(*EVENT_COLUMNS).schema.fields])
    out_schema = out_schema.add("drop", T.StringType(), True)

    def fn(batches: Iterable[Any]) -> Iterable[Any]:
        vks = {p: VerifyKey.from_bytes(k) for p, k in keys.items()}
        for pdf in batches:
            drops: list[str | None] = []
            rows = list(pdf.itertuples(index=False))
            # one signature per event, verified as one Ed25519 batch per Arrow batch (native;
            # pyca's verdict per signature either way: crypto.ed25519_batch)
            signed = [(vks.get(row.publisher), bytes(row.sig), _message(row)) for row in rows]
            valid = verify_batch([(vk, sig, m) for vk, sig, m in signed if vk is not None])
            verdicts = iter(valid)
            for row, (vk, _, _) in zip(rows, signed, strict=True):
                if vk is None or not next(verdicts):
                    drops.append(DropReason.FORGED.value)
                elif abs(now_ms - int(row.ts)) > max_delay_ms:
                    drops.append(DropReason.STALE.value)
                else:
                    drops.append(None)
            pdf = pdf.copy()
            pdf["drop"] = drops
            yield pdf

    checked = df.select(*EVENT_COLUMNS).mapInPandas(fn, out_schema)
    w = Window.partitionBy("event_id").orderBy(F.col("drop").isNotNull(), "ts", "sig")
    ranked = checked.withColumn("_rn", F.row_number().over(w)).withColumn(
        "_first_sig", F.first("sig").over(w)
    )
    drop = (
        F.when(F.col("drop").isNotNull(), F.col("drop"))
        .when(F.col("_rn") == 1, F.lit(None))
        .when(F.col("sig") == F.col("_first_sig"), F.lit(DropReason.REPLAYED.value))
        .otherwise(F.lit(DropReason.DUPLICATE.value))
    )
    return ranked.withColumn("drop", drop).drop("_rn", "_first_sig")


def _message(row: Any) -> bytes:
    """The bytes an event's Ed25519 signature covers (:func:`signed_message`)."""
    return signed_message(
        row.event_id,
        row.publisher,
        int(row.ts),
        int(row.epoch),
        row.mode,
        bytes(row.nonce),
        [int(t) for t in row.tokens],
        bytes(row.hint),
        _decode_or_empty(row.secrets),
        bytes(row.payload),
    )


def _decode_or_empty(blob: Any) -> tuple[tuple[str, bytes], ...]:
    from pubguard.errors import ValidationError
    from pubguard.schemes.psguard.record import decode_secrets

    try:
        return decode_secrets(bytes(blob))
    except ValidationError:
        return (("\x00malformed", bytes(blob)),)  # fails the signature, never raises


def accepted(df: DataFrame) -> DataFrame:
    return df.where(df["drop"].isNull()).drop("drop")


def drop_counts(df: DataFrame) -> dict[str, int]:
    rows = df.where(df["drop"].isNotNull()).groupBy("drop").count().collect()
    return {r["drop"]: int(r["count"]) for r in rows}


def reason_counts(df: DataFrame) -> dict[str | None, int]:
    """Rows per drop reason, ``None`` = accepted, in one Spark job."""
    return {r["drop"]: int(r["count"]) for r in df.groupBy("drop").count().collect()}


# -- match (untrusted) --------------------------------------------------------------------------


_PRF_MEMO: list[Any] = []  # [(tokens list, [AesPrf, ...])]: this Python worker's index


def prfs_for(tokens: Sequence[bytes]) -> list[Any]:
    """``F_tok`` with its AES context set up, for each distinct subscription token, built once
    per Python worker and index: a broadcast value is deserialised once per (reused) worker
    and is the same object for every task, so the contexts survive from task to task instead
    of being set up again per partition (psguard.txt §4.1; :class:`~pubguard.crypto.AesPrf`).
    Tokens are what an executor holds anyway; no key is involved."""
    if _PRF_MEMO and _PRF_MEMO[0][0] is tokens:
        return _PRF_MEMO[0][1]  # type: ignore[no-any-return]
    prfs = [AesPrf(t) for t in tokens]
    _PRF_MEMO[:] = [(tokens, prfs)]
    return prfs


_TOKEN_SET_MEMO: list[Any] = []  # [(tokens list, TokenSet)]: as _PRF_MEMO


def token_set_for(tokens: Sequence[bytes]) -> TokenSet:
    """:func:`prfs_for` as one :class:`~pubguard.schemes.psguard.tokens.TokenSet` (native in
    a worker where ``pubguard._native`` is active), built once per worker and index."""
    if _TOKEN_SET_MEMO and _TOKEN_SET_MEMO[0][0] is tokens:
        return _TOKEN_SET_MEMO[0][1]  # type: ignore[no-any-return]
    ts = TokenSet(tokens, prfs=None)
    _TOKEN_SET_MEMO[:] = [(tokens, ts)]
    return ts


def _randomized_hits(routing: DataFrame, tokens: Sequence[tuple[int, bytes]]) -> DataFrame:
    """``(ek, tok)`` (:func:`routing_table`) for every subscription token whose PRF over the event's nonce is
    among the event's tags; the distinct tokens are broadcast once, and each Python worker
    sets up their AES contexts once (:func:`token_set_for`), then runs one cipher call per token
    over all the nonces of an Arrow batch (:meth:`TokenSet.match_batch`, native when built)."""
    spark = routing.sparkSession
    bc = spark.sparkContext.broadcast(([t for _, t in tokens], [k for k, _ in tokens]))

    def fn(batches: Iterable[Any]) -> Iterable[Any]:
        import numpy as np
        import pandas as pd

        toks, t64 = bc.value
        ts = token_set_for(toks)
        t64a = np.asarray(t64, dtype=np.int64)
        for pdf in batches:
            nonces = b"".join(pdf["nonce"].tolist())
            if len(nonces) != NONCE_BYTES * len(pdf):
                raise ValueError("randomized match needs a 16-byte nonce per event")
            hits = ts.match_batch(nonces, pdf["tokens"].tolist())  # one call per batch
            if not hits:
                yield pd.DataFrame(
                    {"ek": np.empty(0, dtype=np.int32), "tok": np.empty(0, dtype=np.int64)}
                )
                continue
            h = np.asarray(hits, dtype=np.int64)
            eks = pdf["ek"].to_numpy()
            yield pd.DataFrame({"ek": eks[h[:, 0]], "tok": t64a[h[:, 1]]})

    return routing.select("ek", "nonce", "tokens").mapInPandas(fn, "ek int, tok long")


def recipients(fids: Iterable[str], subs: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """``subscriber -> filter id`` for the filters ``fids`` an event matched: one delivery per
    subscriber, named by its smallest matching filter id (the keys it opens with)."""
    best: dict[str, str] = {}
    for fid in fids:
        for sub in subs.get(fid, ()):
            if sub not in best or fid < best[sub]:
                best[sub] = fid
    return best


def counted_filters(
    toks: Iterable[int], by_tok: Mapping[int, Sequence[tuple[str, int]]]
) -> list[str]:
    """The filters an event's token hits ``toks`` satisfy: a filter of ``n`` token groups
    matches an event meeting ``n`` of its tokens (the counting matcher, map side)."""
    met: dict[str, int] = {}
    need: dict[str, int] = {}
    for t in toks:
        for fid, n in by_tok.get(t, ()):
            met[fid] = met.get(fid, 0) + 1
            need[fid] = n
    return [fid for fid, c in met.items() if c == need[fid]]


def routing_table(events: DataFrame) -> DataFrame:
    """``(ek, nonce, tokens)``: what routing reads of a publication, and no more,
    keyed and spread for the join of :func:`match`.

    - ``ek`` is a dense 32-bit key per event identifier, numbered in identifier order
      (``dense_rank``: deterministic, so every read of the table agrees however often Spark
      recomputes it, and copies of one identifier share a key as they shared the identifier
      before). The join counts and deduplicates on it: a profile's wire id (32 hex
      characters, keyed by the publisher, profiles.md) would otherwise be hashed, shuffled
      and sorted in every row of the join's two aggregations, where a plaintext application
      id is a few bytes; with the key every profile's join, and the plaintext join, carries
      the same 4 bytes per row.
    - Hash-partitioned by ``ek`` over the session's shuffle partitions, the table already
      clusters both aggregations (per (event, filter) and per (subscriber, event)), so
      when Spark broadcasts the filter tokens the join runs in one stage on every core
      with no shuffle of its hits: only this table, one row per event and no publication
      bytes, is shuffled (broadcasting the events' side instead, Spark shuffles the hits). (Numbering sorts the events'
      identifiers on one partition: one row per event, small beside the join's rows per
      hit and per delivery.) An input in one partition (a small table made on the driver)
      would otherwise run the whole join on one core."""
    parts = int(events.sparkSession.conf.get("spark.sql.shuffle.partitions") or 1)
    return events.select(_event_key(), "nonce", "tokens").repartition(parts, "ek")


def event_keys(events: DataFrame) -> DataFrame:
    """``(ek, event_id)`` once per identifier: the keys of :func:`routing_table`, to name
    each delivery's event at the end of :func:`match`."""
    return events.select(_event_key(), "event_id").distinct()  # one partition: no shuffle


def _event_key() -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    return F.dense_rank().over(Window.orderBy("event_id")).alias("ek")


def match(
    events: DataFrame,
    filters: DataFrame,
    subscriptions: DataFrame,
    *,
    mode: str,
) -> DataFrame:
    """Stage *match*: protected events x protected filters x subscriptions -> deliveries
    ``(subscriber, event_id, filter_id)``, one per (subscriber, event) (the smallest matching
    filter id names the keys to open with). The join carries what it must and no more: the
    routing table (:func:`routing_table`: a dense event key, the nonce and the 64-bit tokens),
    counted and deduplicated per (subscriber, key); the identifiers come back once per
    delivery at the end. Each delivered event's publication is attached once per event
    afterwards (:func:`publications`), not copied into every delivery."""
    from pyspark.sql import functions as F

    check_columns(events, ("event_id", "nonce", "tokens"), "protected events")
    check_columns(filters, FILTER_COLUMNS, "protected filters")
    check_columns(subscriptions, SUBSCRIPTION_COLUMNS, "subscriptions")
    ftab = filters.select("tok", "filter_id", "n")
    routing = routing_table(events)
    keys = event_keys(events)
    if mode == "deterministic":
        hits = routing.select("ek", F.explode("tokens").alias("tok"))
    else:
        distinct = filters.select("tok", "token").distinct().collect()
        hits = _randomized_hits(routing, [(int(r["tok"]), bytes(r["token"])) for r in distinct])
    counted = (
        hits.join(ftab, "tok")
        .groupBy("ek", "filter_id", "n")
        .agg(F.count(F.lit(1)).alias("met"))
        .where(F.col("met") == F.col("n"))
        .select("ek", "filter_id")
    )
    best = (
        counted.join(subscriptions.select(*SUBSCRIPTION_COLUMNS), "filter_id")
        .groupBy("subscriber", "ek")
        .agg(F.min("filter_id").alias("filter_id"))
    )
    return best.join(keys, "ek").select("subscriber", "event_id", "filter_id")


def publications(events: DataFrame, deliveries: DataFrame, body: Sequence[str]) -> DataFrame:
    """``(event_id, *body)`` once per event with at least one delivery: the publication the
    deliveries of that event refer to (``body``: the columns a subscriber opens; psguard's
    record columns, or a wire-layout profile's ``routing``, ``body``, ``meta``). Written once
    to ``OUT/outbox/_publications`` beside the per-subscriber delivery lists: the ciphertext
    is the same bytes for every recipient of an event, so it is stored once, not once per
    delivery."""
    check_columns(events, ("event_id", *body), "protected events")
    delivered = deliveries.select("event_id").distinct()
    return events.select("event_id", *body).join(delivered, "event_id", "left_semi")


# -- deliver ------------------------------------------------------------------------------------


def deliver(
    deliveries: DataFrame, outbox: Path | str, publications: DataFrame | None = None
) -> None:
    """Stage *deliver*: each subscriber's deliveries to ``outbox/subscriber=S/`` and the
    delivered events' publications once to ``outbox/_publications/`` (Spark and pyarrow skip
    ``_``-prefixed directories when they read the outbox), written to a staging directory and
    renamed into place, so re-running replaces the outbox whole and a failure never leaves a
    half-written one."""

    def write(staging: Path) -> None:
        (
            deliveries.repartition("subscriber")
            .sortWithinPartitions("subscriber", "event_id")
            .write.mode("overwrite")
            .partitionBy("subscriber")
            .parquet(str(staging))
        )
        if publications is not None:
            publications.write.mode("overwrite").parquet(str(staging / PUBLICATIONS))

    atomic_replace(Path(outbox), write)
