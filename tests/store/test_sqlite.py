from __future__ import annotations

import dataclasses
import os
import stat

import pytest

from pubguard.errors import ConfigError, StateError, ValidationError
from pubguard.store import Database, Migration, open_database, row_to


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    name: str
    count: int
    blob: bytes
    ratio: float
    active: bool
    note: str | None


V1 = [
    Migration(
        1,
        (
            "CREATE TABLE items (name TEXT PRIMARY KEY, count INTEGER NOT NULL, blob BLOB NOT NULL,"
            " ratio REAL NOT NULL, active INTEGER NOT NULL, note TEXT)",
        ),
    )
]
V2 = [*V1, Migration(2, ("CREATE INDEX items_count ON items(count)",))]


def test_pragmas_and_private_file(tmp_path):
    path = tmp_path / "state.db"
    with open_database(path, {"demo": V1}) as db:
        assert db.pragma("journal_mode") == "wal"
        assert db.pragma("synchronous") == 2  # FULL
        assert db.pragma("foreign_keys") == 1
        assert db.version("demo") == 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_rows_round_trip_and_survive_reopen(tmp_path):
    path = tmp_path / "state.db"
    item = Item("a", 3, b"\x00\x01", 0.5, True, None)
    with open_database(path, {"demo": V1}) as db, db.transaction():
        db.insert("items", item)
        db.insert("items", Item("b", 4, b"", 2.0, False, "x"))
    with open_database(path, {"demo": V2}) as db:
        assert db.version("demo") == 2
        assert db.select_one(Item, "items", {"name": "a"}) == item
        assert [i.name for i in db.select(Item, "items", order_by="count")] == ["a", "b"]
        assert db.select_one(Item, "items", {"name": "zzz"}) is None


def test_transaction_rolls_back_on_error(tmp_path):
    with open_database(tmp_path / "s.db", {"demo": V1}) as db:
        with pytest.raises(RuntimeError), db.transaction():
            db.insert("items", Item("a", 1, b"", 0.0, True, None))
            raise RuntimeError("boom")
        assert db.select(Item, "items") == []


def test_duplicate_key_is_state_error(tmp_path):
    with open_database(tmp_path / "s.db", {"demo": V1}) as db:
        db.insert("items", Item("a", 1, b"", 0.0, True, None))
        with pytest.raises(StateError, match="constraint"):
            db.insert("items", Item("a", 2, b"", 0.0, True, None))
        db.insert("items", Item("a", 2, b"", 0.0, True, None), replace=True)
        assert db.select_one(Item, "items", {"name": "a"}).count == 2


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "s.db"
    open_database(path, {"demo": V2}).close()
    with pytest.raises(StateError, match="newer"):
        open_database(path, {"demo": V1})


def test_components_share_a_file(tmp_path):
    other = [Migration(1, ("CREATE TABLE other (k TEXT PRIMARY KEY)",))]
    with open_database(tmp_path / "s.db", {"demo": V2, "other": other}) as db:
        assert (db.version("demo"), db.version("other")) == (2, 1)


def test_bad_input_is_typed():
    with pytest.raises(ValidationError):
        Migration(0, ("SELECT 1",))
    with Database(":memory:") as db:
        with pytest.raises(ValidationError, match="identifier"):
            db.select(Item, "items; DROP TABLE x")
        with pytest.raises(ValidationError, match="gaps"):
            db.migrate("demo", [Migration(2, ("SELECT 1",))])
    with pytest.raises(ConfigError):
        Database("/nonexistent-dir/x.db")


def test_corrupt_row_is_detected():
    row = {"name": "a", "count": "three", "blob": b"", "ratio": 1, "active": 1, "note": None}
    with pytest.raises(StateError, match="count"):
        row_to(Item, row)
    ok = row_to(Item, {**row, "count": 3})
    assert ok.ratio == 1.0 and ok.active is True
    with pytest.raises(StateError, match="NULL"):
        row_to(Item, {**row, "count": 3, "name": None})
