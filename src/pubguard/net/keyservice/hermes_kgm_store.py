"""The key-group manager's durable state: OFT groups, epochs, members' capabilities, rekey
broadcasts and revocations in SQLite, every key sealed at rest (hermes-encrypted-access-
control.txt §4, Fig. 4; the manager restarts with its groups intact).

Theory of operation
-------------------
The manager of :mod:`pubguard.net.keyservice.hermes_kgm` holds secrets no broker may lose
track of: every OFT node key and the traffic keys of the grace window (§4.1-4.2). A manager
that came back empty would strand its members, whose next rekey could not be derived from
what they hold. So after every request that changed a group (a join, a leave, a revocation, a
refresh) :class:`KgmStore` writes, in one transaction and before the answer leaves:

- ``hermes_kgm_state``: one row per profile, the manager's
  :meth:`~pubguard.schemes.hermes.KeyGroupManager.export_state`, msgpack, **sealed** with
  AES-256-GCM under the storage key, the associated data binding the profile and the type id
  (``aad_for("pubguard-hermes-kgm-state", profile, 0, type_id)``);
- ``hermes_kgm_rekeys``: each new broadcast (sealed too, bound to profile, group and
  sequence number), the last :data:`~pubguard.net.keyservice.hermes_kgm.REKEY_LOG_MAX` per
  group, so a member that polls after the restart gets exactly what it missed;
- ``hermes_kgm_revoked``: the revoked capability serials (public).

The storage key is the caller's (the key service seals narada topic keys the same way,
``pubguard.net.keyservice.kmc_service``): the cluster derives it from the type owner's seed
(``pubguard.ops.hermes_kgm_proc``), and it reaches the manager process through its
environment only. A state sealed under another key, or for another type, does not open: the
store refuses to start (:class:`~pubguard.errors.ConfigError`) rather than run empty.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import msgpack

from pubguard.crypto import SecretBytes, aad_for, open_, seal
from pubguard.errors import ConfigError, InvalidToken, ValidationError
from pubguard.keys.oft import Rekey
from pubguard.schemes.hermes import KeyGroupManager, RevocationSet, SecureEventType
from pubguard.schemes.hermes.kgm_wire import rekey_from_wire, rekey_to_wire
from pubguard.store import Database, Migration

__all__ = ["KGM_DB", "KgmStore"]

KGM_DB: Final = "kgm.db"
_COMPONENT: Final = "hermes_kgm"
_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE hermes_kgm_state (profile TEXT PRIMARY KEY, sealed BLOB NOT NULL, "
            "saved REAL NOT NULL)",
            "CREATE TABLE hermes_kgm_rekeys (profile TEXT NOT NULL, grp TEXT NOT NULL, "
            "seq INTEGER NOT NULL, sealed BLOB NOT NULL, PRIMARY KEY (profile, grp, seq))",
            "CREATE TABLE hermes_kgm_revoked (profile TEXT NOT NULL, serial INTEGER NOT NULL, "
            "PRIMARY KEY (profile, serial))",
        ),
    ),
)


def _pack(data: Any) -> bytes:
    return msgpack.packb(data, use_bin_type=True)


def _unpack(blob: bytes) -> Any:
    return msgpack.unpackb(blob, raw=False, strict_map_key=False)


class KgmStore:
    """A manager's sealed state in SQLite (see the module docstring)."""

    def __init__(self, path: Path, storage_key: SecretBytes, stype: SecureEventType) -> None:
        self.db = Database(path)
        self.db.migrate(_COMPONENT, _MIGRATIONS)
        self._key = storage_key
        self.stype = stype

    def __repr__(self) -> str:
        return f"KgmStore({self.db.path!r})"

    def close(self) -> None:
        self.db.close()

    def _state_aad(self, profile: str) -> bytes:
        return aad_for(b"pubguard-hermes-kgm-state", profile, 0, self.stype.type_id)

    @staticmethod
    def _rekey_aad(profile: str, group: str, seq: int) -> bytes:
        return aad_for(b"pubguard-hermes-kgm-rekey", f"{profile}/{group}", seq)

    # -- loading ---------------------------------------------------------------------------

    def revoked(self, profile: str) -> RevocationSet:
        rows = self.db.query("SELECT serial FROM hermes_kgm_revoked WHERE profile = ?", (profile,))
        return RevocationSet(int(r["serial"]) for r in rows)

    def load_manager(self, profile: str) -> KeyGroupManager | None:
        """The manager of ``profile`` as last saved (None: never saved); ConfigError if the
        state does not open under this key and type."""
        rows = self.db.query("SELECT sealed FROM hermes_kgm_state WHERE profile = ?", (profile,))
        if not rows:
            return None
        try:
            state = _unpack(
                open_(self._key, bytes(rows[0]["sealed"]), aad=self._state_aad(profile))
            )
            return KeyGroupManager.restore(self.stype, state, revoked=self.revoked(profile))
        except (InvalidToken, ValidationError, ValueError, msgpack.UnpackException):
            raise ConfigError(
                "the key-group manager's state does not open: sealed under another storage key "
                "(another type owner's seed) or for another type",
                path=self.db.path,
            ) from None

    def load_rekeys(self, profile: str) -> list[Rekey]:
        """Every kept broadcast of ``profile``, by group and sequence number."""
        rows = self.db.query(
            "SELECT grp, seq, sealed FROM hermes_kgm_rekeys WHERE profile = ? ORDER BY grp, seq",
            (profile,),
        )
        out = []
        for r in rows:
            aad = self._rekey_aad(profile, str(r["grp"]), int(r["seq"]))
            try:
                out.append(rekey_from_wire(_unpack(open_(self._key, bytes(r["sealed"]), aad=aad))))
            except (InvalidToken, ValidationError, ValueError, msgpack.UnpackException):
                raise ConfigError(
                    "a stored rekey broadcast does not open", path=self.db.path
                ) from None
        return out

    # -- saving ----------------------------------------------------------------------------

    def save(
        self,
        profile: str,
        mgr: KeyGroupManager,
        rekeys: Iterable[Rekey],
        *,
        keep: int,
        revoked: Iterable[int] = (),
    ) -> None:
        """Write ``mgr``'s state, its new broadcasts (the last ``keep`` per group stay) and
        new revocations of ``profile``, in one transaction."""
        sealed = seal(self._key, _pack(mgr.export_state()), aad=self._state_aad(profile))
        with self.db.transaction():
            self.db.execute(
                "INSERT OR REPLACE INTO hermes_kgm_state (profile, sealed, saved) VALUES (?, ?, ?)",
                (profile, sealed, time.time()),
            )
            for s in revoked:
                self.db.execute(
                    "INSERT OR IGNORE INTO hermes_kgm_revoked (profile, serial) VALUES (?, ?)",
                    (profile, s),
                )
            groups = set()
            for r in rekeys:
                blob = seal(
                    self._key, _pack(rekey_to_wire(r)), aad=self._rekey_aad(profile, r.group, r.seq)
                )
                self.db.execute(
                    "INSERT OR REPLACE INTO hermes_kgm_rekeys (profile, grp, seq, sealed) "
                    "VALUES (?, ?, ?, ?)",
                    (profile, r.group, r.seq, blob),
                )
                groups.add(r.group)
            for g in groups:
                self.db.execute(
                    "DELETE FROM hermes_kgm_rekeys WHERE profile = ? AND grp = ? AND seq <= "
                    "(SELECT MAX(seq) FROM hermes_kgm_rekeys WHERE profile = ? AND grp = ?) - ?",
                    (profile, g, profile, g, keep),
                )
