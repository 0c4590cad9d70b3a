"""The type owner's revocation list in a cluster's state folder, outliving every re-issue
(hermes-encrypted-access-control.txt §4.2: revocation is the issuer's decision, checked back
towards the issuer).

Theory of operation
-------------------
``pubguard hermes revoke`` evicts a broker from the key groups at once, by the serials of the
capabilities it holds. But ``cluster up`` issues capabilities afresh (new serials) every time
it writes the brokers' ``hermes.json``, so a serial alone would readmit the broker at the next
``cluster down`` / ``up``. What users expect is that the owner's decision stands until the
owner takes it back. So the decision is kept as a :class:`RevocationList` (the revoked
*holders* and serials), **signed by the type owner** (Ed25519, the key derived from
``$PUBGUARD_HERMES_OWNER``), in ``<state>/hermes-kgm/revocations.json`` (public: names and
serials, no secret), and honoured on both sides of a re-issue:

- ``cluster up`` (:class:`~pubguard.ops.hermes_cluster.HermesDeployment`) issues no capability
  to a listed holder: its ``hermes.json`` carries no type and no capability, so it routes the
  type's ciphertext by type id only (§3.3), and ``cluster status`` lists it as revoked;
- the key-group manager applies the list at start
  (:meth:`~pubguard.net.keyservice.hermes_kgm.HermesKgmCore.apply_revocations`): a listed
  holder is refused at join whatever capability it presents, also one signed later.

A list that does not verify under the current owner's key (edited, or signed by another
owner's seed) stops ``cluster up`` and the manager with one line before anything starts: a
revocation is never silently dropped. ``pubguard hermes readmit`` is the owner taking it back
(a shorter list, signed again).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from pubguard.crypto import SigningKey, VerifyKey
from pubguard.errors import ConfigError, InvalidToken, ValidationError
from pubguard.schemes.hermes.capability import RevocationList

__all__ = ["REVOCATIONS_FILE", "load_revocations", "revise_revocations", "save_revocations"]

#: in the key-group manager's folder (``<state>/hermes-kgm/``)
REVOCATIONS_FILE: Final = "revocations.json"


def load_revocations(folder: Path, owner_key: VerifyKey, type_id: bytes) -> RevocationList | None:
    """The list in ``folder`` (None: the owner never revoked anything here), its signature
    verified; ConfigError (one line) if it is malformed or not this owner's for this type."""
    path = Path(folder) / REVOCATIONS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}", path=str(path)) from None
    try:
        rl = RevocationList.from_json(json.loads(text))
        rl.verify(owner_key, type_id)
    except (ValueError, ValidationError, InvalidToken):
        raise ConfigError(
            f"{path}: the revocation list is not signed by this type's owner (is "
            "$PUBGUARD_HERMES_OWNER the seed that revoked?); remove the file only to readmit "
            "every broker it names",
            path=str(path),
        ) from None
    return rl


def save_revocations(folder: Path, rl: RevocationList) -> Path:
    """Write ``rl`` to ``folder`` (replaced atomically)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / REVOCATIONS_FILE
    tmp = folder / f".{REVOCATIONS_FILE}.tmp"
    tmp.write_text(json.dumps(rl.to_json(), indent=1))
    os.replace(tmp, path)
    return path


def revise_revocations(
    folder: Path,
    owner: SigningKey,
    type_id: bytes,
    *,
    now: float,
    add_holders: Iterable[str] = (),
    add_serials: Iterable[int] = (),
    remove_holders: Iterable[str] = (),
) -> RevocationList:
    """The owner's list in ``folder`` with holders and serials added (``revoke``) or holders
    taken out (``readmit``), signed again and saved; the old list must verify first."""
    old = load_revocations(folder, owner.public, type_id)
    holders = set(old.holders if old else ()) | set(add_holders)
    holders -= set(remove_holders)
    serials = set(old.serials if old else ()) | {int(s) for s in add_serials}
    rl = RevocationList.issue(owner, type_id=type_id, holders=holders, serials=serials, issued=now)
    save_revocations(folder, rl)
    return rl
