"""Wire forms of the key-group manager's messages (hermes §4, Fig. 4), msgpack data model.

A :class:`~pubguard.keys.oft.Welcome` carries the joiner's leaf key and its path's blinded
keys: it is secret and travels only over the joiner's mutually authenticated TLS connection
to the manager. A :class:`~pubguard.keys.oft.Rekey` is a broadcast whose key material is
sealed under keys only the right subtree holds (§4.1), so any member may receive all of
them. Decoding is strict: a malformed message is a :class:`~pubguard.errors.ValidationError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pubguard.crypto import SecretBytes
from pubguard.errors import ValidationError
from pubguard.keys.oft import (
    Collapse,
    GroupKey,
    PathEntry,
    Refresh,
    Rekey,
    Split,
    Update,
    Welcome,
)

__all__ = ["rekey_from_wire", "rekey_to_wire", "welcome_from_wire", "welcome_to_wire"]


def welcome_to_wire(w: Welcome) -> dict[str, Any]:
    cur = w.current
    return {
        "group": w.group,
        "member": w.member,
        "seq": w.seq,
        "leaf": w.leaf,
        "leaf_key": w.leaf_key.reveal(),
        "path": [[e.node, e.sibling, e.left, e.sibling_blinded.reveal()] for e in w.path],
        "current": None if cur is None else [cur.version, cur.valid_from, cur.key.reveal()],
    }


def welcome_from_wire(d: Mapping[str, Any]) -> Welcome:
    try:
        cur = d["current"]
        return Welcome(
            str(d["group"]),
            str(d["member"]),
            int(d["seq"]),
            int(d["leaf"]),
            SecretBytes(bytes(d["leaf_key"])),
            tuple(
                PathEntry(int(n), int(s), bool(lf), SecretBytes(bytes(g)))
                for n, s, lf, g in d["path"]
            ),
            None
            if cur is None
            else GroupKey(int(cur[0]), float(cur[1]), SecretBytes(bytes(cur[2]))),
        )
    except (KeyError, TypeError, ValueError, IndexError):
        raise ValidationError("malformed key-group welcome") from None


def rekey_to_wire(r: Rekey) -> dict[str, Any]:
    structure = [
        ["s", op.leaf, op.parent, op.new]
        if isinstance(op, Split)
        else ["c", op.removed, op.parent, op.survivor]
        for op in r.structure
    ]
    return {
        "group": r.group,
        "seq": r.seq,
        "time": r.time,
        "structure": structure,
        "updates": [[u.node, u.kind, u.kid, u.blob] for u in r.updates],
        "refresh": None if r.refresh is None else [r.refresh.version, r.refresh.valid_from],
    }


def rekey_from_wire(d: Mapping[str, Any]) -> Rekey:
    try:
        ops: list[Split | Collapse] = []
        for tag, a, b, c in d["structure"]:
            if tag == "s":
                ops.append(Split(int(a), int(b), int(c)))
            elif tag == "c":
                ops.append(Collapse(int(a), int(b), int(c)))
            else:
                raise ValueError(tag)
        ref = d["refresh"]
        return Rekey(
            str(d["group"]),
            int(d["seq"]),
            float(d["time"]),
            tuple(ops),
            tuple(
                Update(int(n), str(k), bytes(kid), bytes(blob)) for n, k, kid, blob in d["updates"]
            ),
            None if ref is None else Refresh(int(ref[0]), float(ref[1])),
        )
    except (KeyError, TypeError, ValueError, IndexError):
        raise ValidationError("malformed key-group rekey") from None
