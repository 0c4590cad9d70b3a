"""Durable state of one broker: what must survive ``kill -9`` (issue 4, item 4).

Theory of operation
-------------------
A broker's routing state is rebuilt, on restart, by replaying the subscriptions and
advertisements it had accepted, in their original order, into a fresh sans-IO core; the actions
that replay produces are discarded because their effects (messages already forwarded) were
persisted with them. Delivery between hops is a reliable channel per link:

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

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pubguard.store.sqlite import Database, Migration

__all__ = ["DEDUP_WINDOW", "BrokerState", "LinkRow"]

DEDUP_WINDOW: Final = 100_000  # publication ids remembered for duplicate suppression

_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE links (link TEXT PRIMARY KEY, kind TEXT NOT NULL,"
            " session TEXT NOT NULL DEFAULT '', durable INTEGER NOT NULL DEFAULT 0,"
            " rx_seq INTEGER NOT NULL DEFAULT 0, tx_next INTEGER NOT NULL DEFAULT 1)",
            "CREATE TABLE subscriptions (ord INTEGER PRIMARY KEY AUTOINCREMENT,"
            " link TEXT NOT NULL, sub_id TEXT NOT NULL, message BLOB NOT NULL,"
            " UNIQUE (link, sub_id))",
            "CREATE TABLE advertisements (ord INTEGER PRIMARY KEY AUTOINCREMENT,"
            " link TEXT NOT NULL, adv_id TEXT NOT NULL, message BLOB NOT NULL,"
            " UNIQUE (link, adv_id))",
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


class BrokerState:
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
    def batch(self) -> Iterator[BrokerState]:
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
            for table in ("links", "subscriptions", "advertisements", "outbox"):
                self.db.execute(f"DELETE FROM {table} WHERE link = ?", (link,))

    # -- subscription and advertisement tables ---------------------------------------------

    def put_subscription(self, link: str, sub_id: str, message: bytes) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO subscriptions(link, sub_id, message) VALUES (?, ?, ?)",
            (link, sub_id, message),
        )

    def delete_subscription(self, link: str, sub_id: str) -> None:
        self.db.execute("DELETE FROM subscriptions WHERE link = ? AND sub_id = ?", (link, sub_id))

    def subscriptions(self) -> list[tuple[str, str, bytes]]:
        rows = self.db.query("SELECT link, sub_id, message FROM subscriptions ORDER BY ord")
        return [(str(r[0]), str(r[1]), bytes(r[2])) for r in rows]

    def put_advertisement(self, link: str, adv_id: str, message: bytes) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO advertisements(link, adv_id, message) VALUES (?, ?, ?)",
            (link, adv_id, message),
        )

    def delete_advertisement(self, link: str, adv_id: str) -> None:
        self.db.execute("DELETE FROM advertisements WHERE link = ? AND adv_id = ?", (link, adv_id))

    def advertisements(self) -> list[tuple[str, str, bytes]]:
        rows = self.db.query("SELECT link, adv_id, message FROM advertisements ORDER BY ord")
        return [(str(r[0]), str(r[1]), bytes(r[2])) for r in rows]

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
