"""The key service's revocation registry: who is revoked, persisted, and the signed list.

Theory of operation
-------------------
narada-secure-delivery.txt §IV-A has the CA revoke and notify brokers; eventguard.txt §3.2
leaves revocation to the MS. Here the authority (the default profile's permit signer, hosted
by :class:`~pubguard.net.keyservice.kdc.KdcService`) keeps:

- every public key it has seen an identity present (publish and subscribe permits of the
  default profile, eventguard advertisements): public material, so a revocation of the
  identity also revokes the keys it already holds permits for;
- the revoked identities (who revoked them, when) and the revoked keys;
- the list serial, one higher after every change.

All of it lives in one SQLite file (``<state>/keyservice-revocations.db``), nothing secret in
it, so a restarted key service keeps every revocation and never reuses a serial.
:meth:`RevocationRegistry.signed` signs the current list at ``now``
(:class:`~pubguard.schemes.common.revocation_list.SignedRevocations`) for brokers to fetch; the
signature is cheap (one Ed25519 signature) and makes the issue time tell brokers how fresh
their view is. Revoking is idempotent: a second revocation of the same identity changes
nothing and keeps the serial.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from pubguard.errors import ValidationError
from pubguard.schemes.common.revocation_list import MAX_ENTRIES, SignedRevocations
from pubguard.store import Database, Migration

__all__ = ["REVOCATIONS_DB", "RevocationRegistry"]

REVOCATIONS_DB: Final = "keyservice-revocations.db"
_COMPONENT: Final = "keyservice_revocations"
_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE rv_seen (identity TEXT NOT NULL, key BLOB NOT NULL,"
            " PRIMARY KEY (identity, key))",
            "CREATE TABLE rv_identities (identity TEXT PRIMARY KEY, at REAL NOT NULL,"
            " by TEXT NOT NULL)",
            "CREATE TABLE rv_keys (key BLOB PRIMARY KEY, identity TEXT, at REAL NOT NULL)",
            "CREATE TABLE rv_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
        ),
    ),
)
#: keys remembered per identity (a client that keeps minting keys cannot grow the file)
MAX_KEYS_PER_IDENTITY: Final = 64


class RevocationRegistry:
    """See the module docstring. ``db``: the SQLite file (None: in memory); ``sign``: the
    authority's list signer (:meth:`~pubguard.schemes.default.client.DefaultAuthority.
    sign_revocations`: its key is the brokers' ``authority_key``, and stays inside it)."""

    def __init__(
        self, db: Database | Path | str | None, sign: Callable[..., SignedRevocations]
    ) -> None:
        # the key service runs on one event loop, which tests may run in another thread
        if db is None:
            db = Database(":memory:", check_same_thread=False)
        elif not isinstance(db, Database):
            db = Database(Path(db), check_same_thread=False)
        self.db = db
        self.db.migrate(_COMPONENT, _MIGRATIONS)
        self._sign = sign
        self._ids = {r["identity"] for r in db.query("SELECT identity FROM rv_identities")}
        self._keys = {bytes(r["key"]) for r in db.query("SELECT key FROM rv_keys")}
        rows = db.query("SELECT value FROM rv_meta WHERE name = 'serial'")
        self._serial = int(rows[0]["value"]) if rows else 0

    def __repr__(self) -> str:
        return f"RevocationRegistry(serial={self._serial}, identities={sorted(self._ids)})"

    def close(self) -> None:
        self.db.close()

    @property
    def serial(self) -> int:
        return self._serial

    @property
    def identities(self) -> frozenset[str]:
        return frozenset(self._ids)

    @property
    def keys(self) -> frozenset[bytes]:
        return frozenset(self._keys)

    def is_revoked(self, identity: str) -> bool:
        return identity in self._ids

    def _bump(self) -> None:
        self._serial += 1
        self.db.execute(
            "INSERT INTO rv_meta(name, value) VALUES ('serial', ?) "
            "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
            (self._serial,),
        )

    def _add_key(self, key: bytes, identity: str | None, now: float) -> bool:
        if key in self._keys:
            return False
        if len(self._keys) >= MAX_ENTRIES:
            raise ValidationError(f"the revocation list is full ({MAX_ENTRIES} keys)")
        self.db.execute(
            "INSERT INTO rv_keys(key, identity, at) VALUES (?, ?, ?)", (key, identity, now)
        )
        self._keys.add(key)
        return True

    def note_key(self, identity: str, key: bytes, *, now: float) -> None:
        """``identity`` presented public key ``key`` (to get a permit): remembered, so revoking
        the identity revokes the key."""
        if len(key) != 32:
            raise ValidationError("keys are 32-byte Ed25519 public keys")
        n = self.db.query("SELECT COUNT(*) AS n FROM rv_seen WHERE identity = ?", (identity,))
        with self.db.transaction():
            if int(n[0]["n"]) < MAX_KEYS_PER_IDENTITY:
                self.db.execute(
                    "INSERT OR IGNORE INTO rv_seen(identity, key) VALUES (?, ?)", (identity, key)
                )
            if identity in self._ids and self._add_key(key, identity, now):
                self._bump()

    def revoke(self, identity: str, *, by: str, now: float) -> bool:
        """Revoke ``identity`` and every key seen for it; False if nothing changed."""
        if not identity or len(identity) > 256:
            raise ValidationError("an identity is 1 to 256 characters")
        changed = False
        with self.db.transaction():
            if identity not in self._ids:
                if len(self._ids) >= MAX_ENTRIES:
                    raise ValidationError(f"the revocation list is full ({MAX_ENTRIES})")
                self.db.execute(
                    "INSERT INTO rv_identities(identity, at, by) VALUES (?, ?, ?)",
                    (identity, now, by),
                )
                self._ids.add(identity)
                changed = True
            for r in self.db.query("SELECT key FROM rv_seen WHERE identity = ?", (identity,)):
                changed |= self._add_key(bytes(r["key"]), identity, now)
            if changed:
                self._bump()
        return changed

    def revoke_key(self, key: bytes, *, now: float) -> bool:
        """Revoke one public key (whoever holds it); False if it already was."""
        if len(key) != 32:
            raise ValidationError("keys are 32-byte Ed25519 public keys")
        with self.db.transaction():
            changed = self._add_key(key, None, now)
            if changed:
                self._bump()
        return changed

    def signed(self, now: float) -> SignedRevocations:
        """The current list, signed by the authority at ``now``."""
        return self._sign(serial=self._serial, issued=now, identities=self._ids, keys=self._keys)
