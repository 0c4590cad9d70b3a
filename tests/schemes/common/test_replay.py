"""``ReplayState.check_and_accept`` (inlined for the guards' hot path) gives the verdicts and
leaves the state of ``check`` followed by ``accept`` of what passed, with and without a
database, deferred or not (narada §V-B)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.schemes.common.replay import ReplayState
from pubguard.store.sqlite import Database

steps = st.lists(
    st.tuples(st.sampled_from(["b0", "b0/withdraw"]), st.sampled_from([b"k1", b"k2"])).flatmap(
        lambda se: st.tuples(st.just(se[0]), st.just(se[1]), st.integers(0, 6), st.integers(0, 3))
    ),
    max_size=30,
)


def _reference(r: ReplayState, scope: str, entity: bytes, ts: int, seq: int) -> object:
    reason = r.check(scope, entity, ts, seq)
    if reason is None:
        r.accept(scope, entity, ts, seq)
    return reason


def _rows(db: Database) -> list[tuple[object, ...]]:
    return [
        (r["scope"], bytes(r["entity"]), r["ts"], r["seq"])
        for r in db.query("SELECT scope, entity, ts, seq FROM replay_state ORDER BY scope, entity")
    ]


@settings(max_examples=12, deadline=None)
@given(steps, st.sampled_from(["memory", "deferred", "direct"]))
def test_check_and_accept_is_check_then_accept(tmp_path_factory, ops, mode) -> None:
    d: Path = tmp_path_factory.mktemp("replay")
    dbs = [Database(d / "a.db"), Database(d / "b.db")] if mode != "memory" else [None, None]
    fast = ReplayState(dbs[0], deferred=mode == "deferred")
    ref = ReplayState(dbs[1], deferred=mode == "deferred")
    try:
        for scope, entity, ts, seq in ops:
            assert fast.check_and_accept(scope, entity, ts, seq) == _reference(
                ref, scope, entity, ts, seq
            )
            for scope2 in ("b0", "b0/withdraw"):
                for e in (b"k1", b"k2"):
                    assert fast.last(scope2, e) == ref.last(scope2, e)
        if dbs[0] is not None and dbs[1] is not None:
            with dbs[0].transaction():
                fast.flush_pending()
            with dbs[1].transaction():
                ref.flush_pending()
            assert _rows(dbs[0]) == _rows(dbs[1])
    finally:
        for db in dbs:
            if db is not None:
                db.close()
