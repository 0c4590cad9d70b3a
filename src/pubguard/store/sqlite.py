"""SQLite persistence shared by broker state and key services.

Theory of operation
-------------------
One :class:`Database` wraps one ``sqlite3`` connection opened in autocommit mode; every write
goes through :meth:`Database.transaction` (``BEGIN IMMEDIATE`` ... ``COMMIT``/``ROLLBACK``), so
a crash never leaves half an operation on disk. File databases use the write-ahead log
(``journal_mode=WAL``) with ``synchronous=FULL``: a committed transaction survives power loss,
and readers never block the writer. New files are created ``0600`` because key services keep
(encrypted) key material in them.

Several components may share one file. Each names its schema (``component``) and supplies
ordered :class:`Migration` steps; ``schema_versions`` records the highest step applied per
component, and :meth:`Database.migrate` applies the missing ones, each in its own transaction.
A file written by a newer version (a component version above the newest known migration) is
refused rather than silently misread.

Typed rows: :func:`row_to` builds a frozen dataclass from a row, checking every column against
the field's annotation (``int``, ``float``, ``str``, ``bytes``, ``bool`` and ``X | None``);
:meth:`Database.insert` / :meth:`Database.select` map dataclass fields to columns of the same
name. Table and column names are checked against a strict pattern before they are spliced
into SQL; values always travel as parameters.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

from pubguard.errors import ConfigError, StateError, ValidationError

__all__ = [
    "BUSY_TIMEOUT_MS",
    "Database",
    "Migration",
    "open_database",
    "row_to",
]

BUSY_TIMEOUT_MS: Final = 5_000
_IDENT: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_VERSIONS_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS schema_versions ("
    " component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    """Step ``version`` (1, 2, ...) of a component's schema: SQL statements run in one transaction."""

    version: int
    statements: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.version < 1:
            raise ValidationError("migration versions start at 1")
        if not self.statements:
            raise ValidationError(f"migration {self.version} has no statements")


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValidationError(f"invalid SQL identifier {name!r}")
    return name


def _create_private_file(path: Path) -> None:
    """Create ``path`` with mode 0600 if it does not exist (SQLite reuses the mode for -wal/-shm)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot create database: {exc.strerror}", path=str(path)) from None
    os.close(fd)


class Database:
    """One SQLite connection with WAL, ``synchronous=FULL``, migrations and typed row helpers."""

    __slots__ = ("_conn", "_depth", "path")

    def __init__(self, path: str | os.PathLike[str], *, check_same_thread: bool = True) -> None:
        self.path = str(path)
        memory = self.path == ":memory:"
        if not memory:
            p = Path(self.path)
            if not p.parent.is_dir():
                raise ConfigError("database directory does not exist", path=self.path)
            _create_private_file(p)
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=check_same_thread
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if not memory:
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise ConfigError(f"cannot enable WAL (got {mode})", path=self.path)
            self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute(_VERSIONS_DDL)
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"cannot open database: {exc}", path=self.path) from None
        self._depth = 0

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pragma(self, name: str) -> Any:
        return self._conn.execute(f"PRAGMA {_ident(name)}").fetchone()[0]

    # -- transactions and raw SQL ----------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Database]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolls back on any exception. Nests (inner is a no-op)."""
        if self._depth:
            self._depth += 1
            try:
                yield self
            finally:
                self._depth -= 1
            return
        self._conn.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self
        except BaseException:
            self._depth = 0
            if self._conn.in_transaction:  # SQLite already rolled back after SQLITE_FULL, IOERR
                self._conn.execute("ROLLBACK")
            raise
        self._depth = 0
        self._conn.execute("COMMIT")

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> int:
        """Run one statement; returns the number of rows changed. Constraint failures -> StateError."""
        try:
            return self._conn.execute(sql, params).rowcount
        except sqlite3.IntegrityError as exc:
            raise StateError(f"constraint violated: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StateError(f"database error: {exc}") from None

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[sqlite3.Row]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StateError(f"database error: {exc}") from None

    # -- migrations ------------------------------------------------------------------------

    def version(self, component: str) -> int:
        rows = self.query("SELECT version FROM schema_versions WHERE component = ?", (component,))
        return int(rows[0]["version"]) if rows else 0

    def migrate(self, component: str, migrations: Sequence[Migration]) -> int:
        """Apply every migration of ``component`` above its recorded version; return the version."""
        steps = sorted(migrations, key=lambda m: m.version)
        if [m.version for m in steps] != list(range(1, len(steps) + 1)):
            raise ValidationError(f"{component}: migration versions must be 1..n without gaps")
        current = self.version(component)
        if current > len(steps):
            raise StateError(
                f"{component}: database schema version {current} is newer than this code "
                f"({len(steps)})"
            )
        for m in steps[current:]:
            with self.transaction():
                for stmt in m.statements:
                    self.execute(stmt)
                self.execute(
                    "INSERT INTO schema_versions(component, version) VALUES (?, ?) "
                    "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                    (component, m.version),
                )
        return len(steps)

    # -- typed rows ------------------------------------------------------------------------

    def insert(self, table: str, row: Any, *, replace: bool = False) -> None:
        """Insert the dataclass ``row`` into ``table`` (columns named like its fields)."""
        if not dataclasses.is_dataclass(row) or isinstance(row, type):
            raise ValidationError("insert needs a dataclass instance")
        names = [_ident(f.name) for f in dataclasses.fields(row)]
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        sql = (
            f"{verb} INTO {_ident(table)} ({', '.join(names)}) "
            f"VALUES ({', '.join('?' * len(names))})"
        )
        self.execute(sql, [getattr(row, n) for n in names])

    def select(
        self, cls: type[T], table: str, where: Mapping[str, Any] | None = None, order_by: str = ""
    ) -> list[T]:
        """Rows of ``table`` matching ``where`` (column = value, ANDed) as ``cls`` instances."""
        names = [_ident(name) for name, _ in _schema(cls)]
        sql = f"SELECT {', '.join(names)} FROM {_ident(table)}"
        params: list[Any] = []
        if where:
            sql += " WHERE " + " AND ".join(f"{_ident(k)} = ?" for k in where)
            params = list(where.values())
        if order_by:
            sql += f" ORDER BY {_ident(order_by)}"
        return [row_to(cls, r) for r in self.query(sql, params)]

    def select_one(self, cls: type[T], table: str, where: Mapping[str, Any]) -> T | None:
        rows = self.select(cls, table, where)
        if len(rows) > 1:
            raise StateError(f"{table}: expected at most one row, found {len(rows)}")
        return rows[0] if rows else None


_SCALARS: Final[dict[type, tuple[type, ...]]] = {
    int: (int,),
    float: (float, int),
    str: (str,),
    bytes: (bytes,),
    bool: (int,),
}


def _check(name: str, options: tuple[Any, ...], value: Any) -> Any:
    if value is None:
        if type(None) in options:
            return None
        raise StateError(f"corrupt row: column {name!r} is NULL")
    for opt in options:
        accepted = _SCALARS.get(opt)
        if accepted is None or isinstance(value, bool):
            continue
        if isinstance(value, accepted):
            return opt(value) if opt in (bool, float) else value
    raise StateError(f"corrupt row: column {name!r} has type {type(value).__name__}")


_Schema = tuple[tuple[str, tuple[Any, ...]], ...]
_SCHEMAS: dict[type, _Schema] = {}


def _schema(cls: type) -> _Schema:
    """Field names and accepted annotation options of dataclass ``cls`` (resolved once)."""
    cached = _SCHEMAS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        options: tuple[Any, ...] = (hint,)
        if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
            options = typing.get_args(hint)
        out.append((f.name, options))
    _SCHEMAS[cls] = tuple(out)
    return _SCHEMAS[cls]


def row_to(cls: type[T], row: sqlite3.Row | Mapping[str, Any]) -> T:
    """Build dataclass ``cls`` from a row, checking each value against the field annotation."""
    keys = row.keys()
    values = {}
    for name, options in _schema(cls):
        if name not in keys:
            raise StateError(f"corrupt row: missing column {name!r}")
        values[name] = _check(name, options, row[name])
    return cls(**values)


def open_database(
    path: str | os.PathLike[str], migrations: Mapping[str, Sequence[Migration]] | None = None
) -> Database:
    """Open ``path`` and bring each ``component``'s schema up to date."""
    db = Database(path)
    try:
        for component, steps in (migrations or {}).items():
            db.migrate(component, steps)
    except BaseException:
        db.close()
        raise
    return db
