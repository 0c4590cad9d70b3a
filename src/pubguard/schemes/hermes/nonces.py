"""The publisher hosting broker's strictly monotonic nonce counter (hermes §3.5).

Theory of operation
-------------------
§3.5 makes the broker responsible for its nonce timestamps increasing strictly; here the nonce
is a 64-bit counter under the broker's own subkey (``pubguard.crypto.counter_aead``), and the
counter must never repeat, not even across a restart or a crash, or AES-GCM's key stream and
authentication key would leak. :class:`NonceCounter` therefore *reserves* blocks of values in a
SQLite table before it hands any of them out: the high-water mark written (and committed, WAL
with ``synchronous=FULL``) is always above every value used. After a restart the counter
resumes at the stored mark, skipping at most one block's unused values: gaps are harmless,
repeats are not. Without a database (tests, the simulator, the experiments) the counter lives
in memory only.
"""

from __future__ import annotations

from typing import Final

from pubguard.crypto.counter_aead import COUNTER_MAX
from pubguard.errors import StateError, ValidationError
from pubguard.store import Database
from pubguard.store.sqlite import Migration

__all__ = ["NONCE_BLOCK", "NonceCounter"]

#: values reserved per committed write: one fsync per 4,096 sealed attributes
NONCE_BLOCK: Final = 4096
#: SQLite integers are signed 64-bit: the persisted mark stays below 2**63
_CAP: Final = min(COUNTER_MAX + 1, 2**63 - 1)
_COMPONENT: Final = "hermes_nonces"
_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE hermes_nonces (broker TEXT PRIMARY KEY, "
            "high_water INTEGER NOT NULL CHECK (high_water >= 0))",
        ),
    ),
)


class NonceCounter:
    """Strictly increasing counter values for one broker, persisted in blocks (see module)."""

    __slots__ = ("_block", "_db", "_limit", "_next", "broker")

    def __init__(
        self, broker: str, db: Database | None = None, *, block: int = NONCE_BLOCK
    ) -> None:
        if not broker:
            raise ValidationError("broker id must not be empty")
        if block < 1:
            raise ValidationError("nonce block must be >= 1")
        self.broker = broker
        self._db = db
        self._block = block
        self._next = 0
        self._limit = 0  # values below it are reserved (persisted); _next..._limit-1 are free
        if db is not None:
            db.migrate(_COMPONENT, _MIGRATIONS)
            rows = db.query("SELECT high_water FROM hermes_nonces WHERE broker = ?", (broker,))
            if rows:
                self._next = self._limit = int(rows[0]["high_water"])
        else:
            self._limit = _CAP

    def take(self, n: int = 1) -> int:
        """Reserve ``n`` consecutive values and return the first."""
        if n < 1:
            raise ValidationError("take at least one nonce")
        first = self._next
        end = first + n
        if end > _CAP:
            raise StateError("nonce counter exhausted: rekey the group")
        if end > self._limit:
            self._reserve(max(end, first + self._block))
        self._next = end
        return first

    def _reserve(self, limit: int) -> None:
        limit = min(limit, _CAP)
        db = self._db
        assert db is not None
        with db.transaction():
            db.execute(
                "INSERT INTO hermes_nonces(broker, high_water) VALUES (?, ?) "
                "ON CONFLICT(broker) DO UPDATE SET high_water = excluded.high_water",
                (self.broker, limit),
            )
        self._limit = limit

    @property
    def next_value(self) -> int:
        return self._next
