"""Durable state of one broker: what must survive ``kill -9``.

Theory of operation
-------------------
The sans-IO core writes its routing tables (links, subscriptions, the forwarded set F,
advertisements) through the ``put`` / ``delete`` / ``items`` protocol of
``pubguard.broker.state.BrokerState``; here they live in ``core_tables`` as msgpack values in
insertion order, so a restarted broker rebuilds exactly the routing state it had. The transport
wraps the handling of each batch of frames in one transaction (:meth:`BrokerStore.batch`).
Delivery between hops is a reliable channel per link:

- every reliable message sent on a link gets the next sequence number of that link
  (``links.tx_next``) and stays in ``outbox`` until the peer acknowledges it (cumulative
  ``ack upto``); after a reconnection everything above the peer's acknowledged sequence is
  resent;
- the receiving side records, per link, the highest sequence it has fully processed
  (``links.rx_seq``) *in the same transaction* as the effects of processing it (table changes,
  new outbox rows), and only then acknowledges. A message resent after a crash arrives with a
  sequence ``<= rx_seq`` and is dropped as a duplicate, so each hop delivers each message once
  (narada-secure-delivery.txt §4 uses the same timestamp + sequence idea against replays);
- ``dedup`` is a bounded window of recently seen publication ids, the second line of defence
  when a publisher reconnects with a new session (its sequence numbers restart).

The store uses WAL with ``synchronous = NORMAL``: a committed transaction survives a process
crash (``kill -9``), which is the guarantee the broker promises; an OS crash may lose the last
few transactions. Everything is stored by opaque link id and encoded message bytes, so this
module knows nothing of the broker core (a higher layer).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgpack

from pubguard.errors import StateError
from pubguard.store.sqlite import Database, Migration

__all__ = ["DEDUP_WINDOW", "BrokerStore", "LinkRow"]

DEDUP_WINDOW: Final = 100_000  # publication ids remembered for duplicate suppression

_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE links (link TEXT PRIMARY KEY, kind TEXT NOT NULL,"
            " session TEXT NOT NULL DEFAULT '', durable INTEGER NOT NULL DEFAULT 0,"
            " rx_seq INTEGER NOT NULL DEFAULT 0, tx_next INTEGER NOT NULL DEFAULT 1)",
            "CREATE TABLE core_tables (ord INTEGER PRIMARY KEY AUTOINCREMENT,"
            " tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, UNIQUE (tbl, key))",
            "CREATE TABLE outbox (link TEXT NOT NULL, seq INTEGER NOT NULL,"
            " frame BLOB NOT NULL, PRIMARY KEY (link, seq)) WITHOUT ROWID",
            "CREATE TABLE dedup (n INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT NOT NULL)",
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class LinkRow:
    """Per-link state: peer kind, peer session, highest processed / next sent sequence."""

    link: str
    kind: str
    session: str
    durable: bool
    rx_seq: int
    tx_next: int


class BrokerStore:
    """SQLite-backed broker state; ``path=None`` keeps it in memory (non-durable brokers)."""

    def __init__(self, path: Path | str | None) -> None:
        self.path = None if path is None else Path(path)
        self.db = Database(":memory:" if path is None else str(path))
        try:
            self.db.migrate("broker_state", _MIGRATIONS)
            if path is not None:
                # survives kill -9 (the promise); see the module docstring
                self.db.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def batch(self) -> Iterator[BrokerStore]:
        """One transaction for the effects of a batch of frames (all or nothing)."""
        with self.db.transaction():
            yield self

    # -- meta ------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self.db.query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # -- links -----------------------------------------------------------------------------

    def link(self, link: str) -> LinkRow | None:
        return self.db.select_one(LinkRow, "links", {"link": link})

    def links(self) -> list[LinkRow]:
        return self.db.select(LinkRow, "links", order_by="link")

    def put_link(self, row: LinkRow) -> None:
        self.db.insert("links", row, replace=True)

    def set_rx(self, link: str, rx_seq: int) -> None:
        self.db.execute("UPDATE links SET rx_seq = ? WHERE link = ?", (rx_seq, link))

    def set_tx(self, link: str, tx_next: int) -> None:
        self.db.execute("UPDATE links SET tx_next = ? WHERE link = ?", (tx_next, link))

    def forget_link(self, link: str) -> None:
        """Remove every trace of a link (a non-durable client that left)."""
        with self.db.transaction():
            for table in ("links", "outbox"):
                self.db.execute(f"DELETE FROM {table} WHERE link = ?", (link,))

    # -- the core's routing tables (pubguard.broker.state.BrokerState protocol) -----------

    def put(self, table: str, key: str, value: Mapping[str, Any]) -> None:
        """Insert or replace; a replaced key keeps its original position."""
        blob = msgpack.packb(dict(value), use_bin_type=True)
        n = self.db.execute(
            "UPDATE core_tables SET value = ? WHERE tbl = ? AND key = ?", (blob, table, key)
        )
        if n == 0:
            self.db.execute(
                "INSERT INTO core_tables(tbl, key, value) VALUES (?, ?, ?)", (table, key, blob)
            )

    def delete(self, table: str, key: str) -> None:
        self.db.execute("DELETE FROM core_tables WHERE tbl = ? AND key = ?", (table, key))

    def items(self, table: str) -> list[tuple[str, Mapping[str, Any]]]:
        rows = self.db.query(
            "SELECT key, value FROM core_tables WHERE tbl = ? ORDER BY ord", (table,)
        )
        out: list[tuple[str, Mapping[str, Any]]] = []
        for r in rows:
            try:
                value = msgpack.unpackb(bytes(r[1]), raw=False)
            except Exception as exc:  # a corrupt row is a corrupt store, not a remote error
                raise StateError(f"corrupt core_tables row {table}/{r[0]}: {exc}") from None
            if not isinstance(value, dict):
                raise StateError(f"corrupt core_tables row {table}/{r[0]}")
            out.append((str(r[0]), value))
        return out

    def count(self, table: str) -> int:
        return int(self.db.query("SELECT COUNT(*) FROM core_tables WHERE tbl = ?", (table,))[0][0])

    # -- outboxes (reliable, acknowledged delivery per link) -------------------------------

    def outbox_add(self, rows: Iterable[tuple[str, int, bytes]]) -> None:
        for link, seq, frame in rows:
            self.db.execute(
                "INSERT OR REPLACE INTO outbox(link, seq, frame) VALUES (?, ?, ?)",
                (link, seq, frame),
            )

    def outbox_ack(self, link: str, upto: int) -> int:
        return self.db.execute("DELETE FROM outbox WHERE link = ? AND seq <= ?", (link, upto))

    def outbox(self, link: str, after: int = 0) -> list[tuple[int, bytes]]:
        rows = self.db.query(
            "SELECT seq, frame FROM outbox WHERE link = ? AND seq > ? ORDER BY seq", (link, after)
        )
        return [(int(r[0]), bytes(r[1])) for r in rows]

    def outbox_depths(self) -> dict[str, int]:
        rows = self.db.query("SELECT link, COUNT(*) FROM outbox GROUP BY link")
        return {str(r[0]): int(r[1]) for r in rows}

    # -- de-dup window ---------------------------------------------------------------------

    def dedup_add(self, event_ids: Iterable[str]) -> None:
        for e in event_ids:
            self.db.execute("INSERT INTO dedup(event_id) VALUES (?)", (e,))

    def dedup_recent(self, window: int = DEDUP_WINDOW) -> list[str]:
        """The last ``window`` ids, oldest first; older rows are pruned on the way."""
        top = self.db.query("SELECT COALESCE(MAX(n), 0) FROM dedup")[0][0]
        with self.db.transaction():
            self.db.execute("DELETE FROM dedup WHERE n <= ?", (int(top) - window,))
        rows = self.db.query("SELECT event_id FROM dedup ORDER BY n")
        return [str(r[0]) for r in rows]
