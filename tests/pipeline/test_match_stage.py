"""The match stage's counting join on its routing table (``stages.match``,
``stages.routing_table``): exact against the map-side counting matcher whatever the event
identifiers look like, and reading routing columns only."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.pipeline import stages as S
from pubguard.pipeline.tables import filters_schema, subscriptions_schema

TOKENS = st.integers(min_value=-4, max_value=12)  # few distinct 64-bit tokens: many hits
#: identifiers as a profile's wire ids (32 hex characters) and as application ids (short)
IDS = st.one_of(
    st.text("0123456789abcdef", min_size=32, max_size=32),
    st.from_regex(r"e[0-9]{1,3}", fullmatch=True),
)
EVENTS_SCHEMA = "event_id string, nonce binary, tokens array<bigint>"


@st.composite
def instances(draw: Any) -> tuple[list[Any], list[Any], list[Any]]:
    ids = draw(st.lists(IDS, min_size=1, max_size=12, unique=True))
    # a repeated identifier (a copy that validation would drop) shares its key, as before
    ids += draw(st.lists(st.sampled_from(ids), max_size=2))
    events = [(i, b"", draw(st.lists(TOKENS, max_size=6, unique=True))) for i in ids]
    filters = []
    for k in range(draw(st.integers(min_value=1, max_value=8))):
        groups = draw(
            st.lists(st.lists(TOKENS, min_size=1, max_size=3, unique=True), min_size=1, max_size=3)
        )
        filters += [(f"f{k}", len(groups), t, b"") for g in groups for t in g]
    fids = sorted({f[0] for f in filters})
    subs = sorted(
        set(
            draw(
                st.lists(
                    st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.sampled_from(fids)),
                    min_size=1,
                    max_size=12,
                )
            )
        )
    )
    return events, filters, subs


def reference(events: list[Any], filters: list[Any], subs: list[Any]) -> set[tuple[str, str, str]]:
    """The map-side counting matcher (``counted_filters``, ``recipients``) per identifier."""
    by_tok: dict[int, list[tuple[str, int]]] = {}
    for fid, n, tok, _ in filters:
        by_tok.setdefault(tok, []).append((fid, n))
    by_f: dict[str, list[str]] = {}
    for sub, fid in subs:
        by_f.setdefault(fid, []).append(sub)
    toks: dict[str, list[int]] = {}
    for eid, _, ts in events:
        toks.setdefault(eid, []).extend(ts)
    out = set()
    for eid, ts in toks.items():
        for sub, fid in S.recipients(S.counted_filters(ts, by_tok), by_f).items():
            out.add((sub, eid, fid))
    return out


def merged(insts: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Several instances as one (names prefixed by the instance): one Spark job for all."""
    events, filters, subs = [], [], []
    for k, (ev, fl, sb) in enumerate(insts):
        events += [(f"{k}{i}", nonce, ts) for i, nonce, ts in ev]
        filters += [(f"{k}{fid}", n, tok + 100 * k, t) for fid, n, tok, t in fl]
        subs += [(f"{k}{sub}", f"{k}{fid}") for sub, fid in sb]
    return events, filters, subs


@settings(max_examples=1)
@given(st.lists(instances(), min_size=4, max_size=8))
def test_match_equals_the_counting_matcher(spark: Any, insts: Any) -> None:
    events, filters, subs = merged(insts)
    ev = spark.createDataFrame(events, EVENTS_SCHEMA)
    fl = spark.createDataFrame(filters, filters_schema())
    sb = spark.createDataFrame(subs, subscriptions_schema())
    got = S.match(ev, fl, sb, mode="deterministic").collect()
    assert len(got) == len({(r["subscriber"], r["event_id"]) for r in got})  # one per pair
    assert {tuple(r) for r in got} == reference(events, filters, subs)


def test_routing_table_carries_routing_only_on_every_partition(spark: Any) -> None:
    rows = [(f"{i:032x}", b"n", [i % 3], b"routing", b"body", b"meta") for i in range(20)]
    ev = spark.createDataFrame(rows, EVENTS_SCHEMA + ", routing binary, body binary, meta binary")
    ev = ev.coalesce(1)  # a small table made on the driver arrives in one partition
    routing = S.routing_table(ev)
    assert routing.columns == ["ek", "nonce", "tokens"]
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert routing.rdd.getNumPartitions() == parts
    keys = {r["event_id"]: r["ek"] for r in S.event_keys(ev).collect()}
    assert sorted(keys.values()) == list(range(1, 21))  # dense, in identifier order
    assert [keys[i] for i in sorted(keys)] == list(range(1, 21))
