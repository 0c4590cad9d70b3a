"""The PHB's wire-id secret ``S``, kept sealed beside its nonce counter so a restarted broker
gives the same event the same wire id (hermes-encrypted-access-control.txt §3.5; the wire id
of :meth:`pubguard.schemes.hermes.Crypter.wire_id`).

Theory of operation
-------------------
Between brokers a Hermes publication carries ``KH(HKDF(S, ...), type_id || app id)`` instead
of the application's id. Everything downstream keys on it: the duplicate windows (kept in
SQLite across restarts, eventguard.txt §4.7), the hop acks, catch-up and the durable queues.
A PHB that drew a new ``S`` at every start would, after a crash, give a client's re-sent event
(one whose first copy left before the PHB's commit) a *new* wire id, and every broker
downstream would deliver it twice. So ``S`` is durable:

- it lives in the broker's ``hermes.db`` (table ``hermes_wire_secret``), **sealed** with
  AES-256-GCM (:func:`pubguard.crypto.seal`) under a *storage key* the caller derives, the
  associated data binding it to the broker's name; it is never on disk in clear;
- the broker process derives the storage key from its TLS identity key
  (:func:`pubguard.net.server.hermes_node.wire_secret_storage_key`: HKDF over the PKCS#8 key
  that is itself encrypted at rest with ``PUBGUARD_TLS_PASSPHRASE``), so ``hermes.db`` alone
  opens nothing, and ``S`` is exactly as protected as the broker's identity;
- :func:`load_wire_secret` restores it, or draws and commits a fresh one *before* returning
  (no wire id is ever computed from a secret that a crash could lose). A sealed ``S`` that does
  not open (the broker's identity was re-issued) is replaced by a fresh one and reported as
  ``replaced``: wire ids then change once, as they did before ``S`` was kept.
"""

from __future__ import annotations

import random as _random
from typing import Final, Literal

from pubguard.crypto import SecretBytes, aad_for, open_, random_bytes, seal
from pubguard.errors import InvalidToken, ValidationError
from pubguard.store import Database
from pubguard.store.sqlite import Migration

__all__ = ["WIRE_SECRET_BYTES", "load_wire_secret"]

#: bytes of ``S`` (HKDF input keying material for the wire-id key)
WIRE_SECRET_BYTES: Final = 32
_COMPONENT: Final = "hermes_wire_secret"
_AAD_TAG: Final = b"pubguard-hermes-wire-id-secret"
_MIGRATIONS: Final = (
    Migration(
        1,
        (
            "CREATE TABLE hermes_wire_secret (broker TEXT PRIMARY KEY, "
            "sealed BLOB NOT NULL, created REAL NOT NULL)",
        ),
    ),
)

How = Literal["restored", "created", "replaced"]


def _aad(broker: str) -> bytes:
    return aad_for(_AAD_TAG, broker)


def load_wire_secret(
    db: Database,
    broker: str,
    storage_key: SecretBytes,
    *,
    now: float,
    rng: _random.Random | None = None,
) -> tuple[SecretBytes, How]:
    """``(S, how)`` for ``broker``: the sealed one in ``db`` (``restored``), else a fresh one
    sealed and committed first (``created``; ``replaced`` when the stored one does not open
    under ``storage_key``)."""
    if not broker:
        raise ValidationError("broker id must not be empty")
    db.migrate(_COMPONENT, _MIGRATIONS)
    rows = db.query("SELECT sealed FROM hermes_wire_secret WHERE broker = ?", (broker,))
    how: How = "created"
    if rows:
        try:
            s = open_(storage_key, bytes(rows[0]["sealed"]), aad=_aad(broker))
        except InvalidToken:
            how = "replaced"
        else:
            if len(s) == WIRE_SECRET_BYTES:
                return SecretBytes(s), "restored"
            how = "replaced"
    fresh = random_bytes(WIRE_SECRET_BYTES, rng)
    sealed = seal(storage_key, fresh, aad=_aad(broker), rng=rng)
    with db.transaction():
        db.execute(
            "INSERT INTO hermes_wire_secret(broker, sealed, created) VALUES (?, ?, ?) "
            "ON CONFLICT(broker) DO UPDATE SET sealed = excluded.sealed, "
            "created = excluded.created",
            (broker, sealed, now),
        )
    return SecretBytes(fresh), how
