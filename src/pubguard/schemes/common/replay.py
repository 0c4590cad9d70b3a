"""Narada's broker-side state guards, beside the stateless ones of
:mod:`pubguard.schemes.common.guards`:

- :class:`ReplayState`: per-entity timestamp + sequence number (narada §V-B), optionally
  persisted in SQLite so that a restart does not reopen a replay window;
- :class:`TokenCache`: the optimistic verified-token cache (narada §VI), invalidated after
  ``ttl`` seconds or ``max_uses`` messages since the last full verification.

Time comes in as an argument; limits are the named constants of :mod:`pubguard.schemes.common.guards`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, TypeVar

from pubguard.errors import DropReason, ValidationError
from pubguard.store import Database, Migration

__all__ = [
    "DEFAULT_REPLAY_RESERVE",
    "DEFAULT_TOKEN_MAX_USES",
    "DEFAULT_TOKEN_TTL",
    "ReplayState",
    "TokenCache",
]

DEFAULT_TOKEN_TTL: Final = 300.0  # narada §VI: "invalidated after a certain time (a few minutes)"
DEFAULT_TOKEN_MAX_USES: Final = 100  # narada §VI: "or a certain number of messages (say 100)"
DEFAULT_REPLAY_RESERVE: Final = 1.0  # seconds of timestamp reserved per persisted write
DEFAULT_CACHE_CAPACITY: Final = 65_536  # verified roots / permits / tokens kept (all guards)

V = TypeVar("V")


_REPLAY_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE replay_state (scope TEXT NOT NULL, entity BLOB NOT NULL,"
            " ts INTEGER NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (scope, entity))",
        ),
    ),
)


class ReplayState:
    """narada §V-B: per entity, the (timestamp, sequence) of the last accepted message; a
    message is a replay unless it is strictly later in that order.

    ``scope`` separates brokers sharing one database (or one instance). With ``db`` the state
    survives restarts without a disk write per message: whenever an accepted timestamp passes
    the persisted one, the row is set to ``ts + reserve`` (milliseconds), so on restart every
    message up to that bound is refused (no replay window reopens) at the cost of refusing, for
    at most ``reserve`` seconds after a crash, fresh messages of entities that were active just
    before it. :meth:`flush` (clean shutdown) writes the exact state instead. ``reserve=0``
    writes through on every message.

    ``deferred=True`` is for a ``db`` that is the broker's own state database: accepted
    messages are only marked, and :meth:`flush_pending` writes their exact state inside the
    broker's transaction for the batch that accepted them (``Broker.before_commit``). Then the
    replay state and the broker's processing (routing tables, outboxes, the link's processed
    sequence) commit together: after ``kill -9`` a message is refused as a replay exactly
    when its batch was committed, and one its sender must resend (not acknowledged) is
    accepted, so the restart neither reopens a replay window nor loses fresh messages.
    """

    COMPONENT: Final = "pubguard_replay"

    def __init__(
        self,
        db: Database | None = None,
        *,
        reserve: float = DEFAULT_REPLAY_RESERVE,
        deferred: bool = False,
    ) -> None:
        if reserve < 0:
            raise ValidationError("reserve must be >= 0")
        self._db = db
        self._reserve_ms = int(reserve * 1000)
        self._deferred = deferred
        self._dirty: set[tuple[str, bytes]] = set()
        self._mem: dict[tuple[str, bytes], tuple[int, int]] = {}
        self._floor: dict[tuple[str, bytes], tuple[int, int]] = {}  # persisted bound
        self._loaded: set[str] = set()
        if db is not None:
            db.migrate(self.COMPONENT, _REPLAY_MIGRATIONS)

    @classmethod
    def import_file(cls, path: Path, into: Database) -> int:
        """Carry a separate replay database (``replay.db``, where brokers kept this state
        before it moved into their own database) into ``into``, keeping the later bound per
        entity, then rename it ``*.imported``, so an upgrade reopens no replay window.
        Returns the rows carried; 0 if there is no such file."""
        if not path.exists():
            return 0
        cls(into)  # the table
        with Database(path) as old:
            old.migrate(cls.COMPONENT, _REPLAY_MIGRATIONS)
            rows = old.query("SELECT scope, entity, ts, seq FROM replay_state")
        with into.transaction():
            for r in rows:
                into.execute(
                    "INSERT INTO replay_state(scope, entity, ts, seq) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(scope, entity) DO UPDATE SET ts = excluded.ts, seq = excluded.seq"
                    " WHERE (excluded.ts, excluded.seq) > (replay_state.ts, replay_state.seq)",
                    (r["scope"], r["entity"], r["ts"], r["seq"]),
                )
        path.rename(path.with_name(path.name + ".imported"))
        return len(rows)

    def _load(self, scope: str) -> None:
        self._loaded.add(scope)
        if self._db is None:
            return
        rows = self._db.query("SELECT entity, ts, seq FROM replay_state WHERE scope = ?", (scope,))
        for r in rows:
            k = (scope, bytes(r["entity"]))
            self._mem[k] = self._floor[k] = (int(r["ts"]), int(r["seq"]))

    def last(self, scope: str, entity: bytes) -> tuple[int, int] | None:
        if scope not in self._loaded:
            self._load(scope)
        return self._mem.get((scope, entity))

    def check(self, scope: str, entity: bytes, ts_ms: int, seq: int) -> DropReason | None:
        """REPLAYED unless ``(ts_ms, seq)`` is after the entity's last accepted message."""
        prev = self.last(scope, entity)
        if prev is not None and (ts_ms, seq) <= prev:
            return DropReason.REPLAYED
        return None

    def accept(self, scope: str, entity: bytes, ts_ms: int, seq: int) -> None:
        k = (scope, entity)
        self._mem[k] = (ts_ms, seq)
        if self._db is None:
            return
        if self._deferred:
            self._dirty.add(k)
            return
        floor = self._floor.get(k)
        if floor is None or (ts_ms, seq) > floor:
            bound = (ts_ms + self._reserve_ms, seq if self._reserve_ms == 0 else 2**62)
            self._write(scope, entity, bound)

    def check_and_accept(
        self, scope: str, entity: bytes, ts_ms: int, seq: int
    ) -> DropReason | None:
        """:meth:`check`, then :meth:`accept` what passes: a broker's guard calls this for
        every publication, so the common case (a loaded scope, a deferred database) is
        inlined here; the rest goes through the two methods."""
        if scope not in self._loaded:
            self._load(scope)
        k = (scope, entity)
        prev = self._mem.get(k)
        if prev is not None and (ts_ms, seq) <= prev:
            return DropReason.REPLAYED
        if self._deferred or self._db is None:
            self._mem[k] = (ts_ms, seq)
            if self._db is not None:
                self._dirty.add(k)
            return None
        self.accept(scope, entity, ts_ms, seq)
        return None

    def run_state(
        self, scope: str
    ) -> tuple[dict[tuple[str, bytes], tuple[int, int]], set[tuple[str, bytes]] | None] | None:
        """For a native guard about to check a run of messages of ``scope``: the containers
        :meth:`check_and_accept`'s common case reads and updates, ``(last accepted (ts, seq)
        by (scope, entity), the entities to flush, or None when nothing is persisted)``, so
        the guard does exactly that per message without calling back; None when the state is
        written at once (a database that is not deferred: call :meth:`check_and_accept`).
        Valid until the next :meth:`flush_pending` (the broker's commit, after the run)."""
        if scope not in self._loaded:
            self._load(scope)
        if self._db is None:
            return self._mem, None
        if self._deferred:
            return self._mem, self._dirty
        return None

    def flush_pending(self) -> None:
        """``deferred``: write the exact state of the entities accepted since the last call,
        inside the caller's open transaction (the broker's batch)."""
        if not self._dirty or self._db is None:
            return
        dirty, self._dirty = self._dirty, set()
        for k in dirty:
            self._write(k[0], k[1], self._mem[k])

    def flush(self) -> None:
        """Persist the exact state (a clean shutdown gives up no reserved window)."""
        if self._db is None:
            return
        with self._db.transaction():
            for (scope, entity), v in self._mem.items():
                self._write(scope, entity, v)

    def _write(self, scope: str, entity: bytes, v: tuple[int, int]) -> None:
        assert self._db is not None
        self._db.execute(
            "INSERT INTO replay_state(scope, entity, ts, seq) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(scope, entity) DO UPDATE SET ts = excluded.ts, seq = excluded.seq",
            (scope, entity, v[0], v[1]),
        )
        self._floor[(scope, entity)] = v


@dataclass(slots=True)
class _TokenEntry(Generic[V]):
    value: V
    verified_at: float
    uses: int


class TokenCache(Generic[V]):
    """narada §VI: "a copy of a verified token is stored in memory, and subsequently compared
    with those contained in the message"; an entry is invalidated ``ttl`` seconds or
    ``max_uses`` messages after its last full verification."""

    __slots__ = ("_d", "capacity", "hits", "max_uses", "misses", "ttl")

    def __init__(
        self,
        ttl: float = DEFAULT_TOKEN_TTL,
        max_uses: int = DEFAULT_TOKEN_MAX_USES,
        capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        if ttl < 0 or max_uses < 0 or capacity < 1:
            raise ValidationError("ttl and max_uses must be >= 0, capacity positive")
        self.ttl = ttl
        self.max_uses = max_uses
        self.capacity = capacity
        self._d: OrderedDict[bytes, _TokenEntry[V]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._d)

    def lookup(self, token: bytes, now: float) -> V | None:
        """The cached value if the exact bytes were verified recently enough, else None."""
        e = self._d.get(token)
        if e is None or now - e.verified_at > self.ttl or e.uses >= self.max_uses:
            if e is not None:
                del self._d[token]
            self.misses += 1
            return None
        e.uses += 1
        self.hits += 1
        return e.value

    def store(self, token: bytes, value: V, now: float) -> None:
        self._d[token] = _TokenEntry(value, now, 0)
        self._d.move_to_end(token)
        while len(self._d) > self.capacity:
            self._d.popitem(last=False)

    def invalidate(self, token: bytes | None = None) -> None:
        if token is None:
            self._d.clear()
        else:
            self._d.pop(token, None)
