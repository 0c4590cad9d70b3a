"""PSGuard records: the schema's scopes, the protected record, its signed form and the broker's
reference checks (psguard.txt §4.1).

Theory of operation: see :mod:`pubguard.schemes.psguard.scheme`. This module holds what every party
shares: :class:`Schema` (scopes and candidate types), :class:`ProtectedRecord` (tokens and
ciphertext only) with :func:`signed_message` (the canonical bytes the publisher signs),
:func:`verify_record` / :func:`check_record` (the signed profile's broker guards: forged,
then stale), :class:`ProtectedFilterRows` (a tokenised filter) and :func:`broker_match` (the
pure counting match the Spark pipeline runs as a join).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pubguard.crypto import VerifyKey
from pubguard.errors import DropReason, ValidationError
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.psguard.tokens import (
    attr_kind,
    randomize,
    tok64,
)

__all__ = [
    "ABSENT_NODE",
    "DEFAULT_MAX_DELAY_MS",
    "MODES",
    "PAYLOAD_ATTR",
    "PROFILE",
    "PSGUARD_PAPER",
    "ProtectedFilterRows",
    "ProtectedRecord",
    "SCOPE_NODE",
    "Schema",
    "broker_match",
    "check_mode",
    "check_record",
    "decode_secrets",
    "encode_secrets",
    "length_prefixed",
    "signed_message",
    "signed_message_packed",
    "verify_record",
    "with_sig",
]

PROFILE = "psguard"
#: psguard.txt §2's configuration: brokers only match tokens (honest-but-curious routing)
PSGUARD_PAPER = "psguard-paper"
MODES = ("deterministic", "randomized")
#: Accepted clock skew / delay of a publication's signed timestamp (eventguard.txt §4.7).
DEFAULT_MAX_DELAY_MS = 300_000
SCOPE_NODE = "\x01scope"
ABSENT_NODE = "\x01absent"
PAYLOAD_ATTR = ""  # attribute names are non-empty, so "" is the payload's AAD slot


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES` (ValidationError otherwise)."""
    if mode not in MODES:
        raise ValidationError(f"unknown psguard mode {mode!r} (valid: {', '.join(MODES)})")
    return mode


# -- schema: scopes and candidate types -----------------------------------------------------


class Schema:
    """The event types a deployment knows, and how PSGuard scopes them."""

    __slots__ = ("_specs", "_topic_attr", "types")

    def __init__(self, types: Mapping[str, EventType] | Iterable[EventType]) -> None:
        ts = types.values() if isinstance(types, Mapping) else types
        self.types: dict[str, EventType] = {t.name: t for t in ts}
        self._topic_attr: dict[str, str | None] = {}
        self._specs = {t.name: {a.name: a for a in t.attributes} for t in self.types.values()}
        for t in self.types.values():
            tops = [a.name for a in t.routable if a.kind == "topic"]
            if len(tops) > 1:
                raise ValidationError(f"psguard: type {t.name!r} has several topic attributes")
            self._topic_attr[t.name] = tops[0] if tops else None
            for a in t.routable:
                if a.kind != "topic":
                    attr_kind(a)  # validates numeric trees etc.

    def spec(self, type_name: str, attr: str) -> AttributeSpec:
        try:
            return self._specs[type_name][attr]
        except KeyError:
            raise ValidationError(f"event type {type_name!r} has no attribute {attr!r}") from None

    def topic_attr(self, type_name: str) -> str | None:
        return self._topic_attr[type_name]

    def type_of(self, event: Event) -> EventType:
        if event.type is None:
            raise ValidationError(f"psguard: event {event.id!r} has no type (schema needed)")
        et = self.types.get(event.type)
        if et is None:
            raise ValidationError(f"psguard: event {event.id!r} has unknown type {event.type!r}")
        return et

    def scope_of(self, et: EventType, attrs: Mapping[str, Any]) -> str:
        ta = self._topic_attr[et.name]
        if ta is None:
            return "\x01type:" + et.name
        w = attrs.get(ta)
        if not isinstance(w, str) or not w:
            raise ValidationError(f"psguard: event of type {et.name!r} needs its topic {ta!r}")
        return w

    def candidates(self, f: Filter) -> list[EventType]:
        """Types an event matching ``f`` can have (they carry every attribute ``f`` names)."""
        names = f.attribute_names
        out = []
        for t in self.types.values():
            have = self._specs[t.name]
            if names <= have.keys():
                secret = sorted(a for a in names if not have[a].routable)
                if secret:
                    raise ValidationError(
                        f"psguard: filter {f.id or f} constrains secret attribute "
                        f"{secret[0]!r} of type {t.name!r}: brokers cannot match on it"
                    )
                out.append(t)
        return out

    def to_json(self) -> list[dict[str, Any]]:
        return [t.to_json() for t in self.types.values()]


# -- the protected record ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProtectedRecord:
    """What brokers (Spark executors) see of one event: tokens and ciphertext only.

    ``tokens`` are 64-bit join keys: ``tok64(T)`` (deterministic) or ``tok64(F_T(r))``
    (randomized, with ``nonce`` = r)."""

    event_id: str
    publisher: str
    ts: int  # milliseconds, signed
    epoch: int
    mode: str
    nonce: bytes
    tokens: tuple[int, ...]
    hint: bytes
    secrets: tuple[tuple[str, bytes], ...]
    payload: bytes
    sig: bytes = b""

    def message(self) -> bytes:
        return signed_message(
            self.event_id,
            self.publisher,
            self.ts,
            self.epoch,
            self.mode,
            self.nonce,
            self.tokens,
            self.hint,
            self.secrets,
            self.payload,
        )


_U32 = struct.Struct(">I").pack
_TS_EPOCH = struct.Struct(">qq").pack


#: each mode's name as signed (length-prefixed), built once
_MODE_LP = {m: _U32(len(m)) + m.encode() for m in MODES}


def length_prefixed(b: bytes) -> bytes:
    """``u32(len(b)) || b``: how the signed message and the secrets encode a field."""
    return _U32(len(b)) + b


def signed_message(
    event_id: str,
    publisher: str,
    ts: int,
    epoch: int,
    mode: str,
    nonce: bytes,
    tokens: Sequence[int],
    hint: bytes,
    secrets: Iterable[tuple[str, bytes]],
    payload: bytes,
) -> bytes:
    """Canonical bytes the publisher signs (length-prefixed fields, tokens as int64)."""
    toks = struct.pack(f">{len(tokens)}q", *tokens)
    sec = encode_secrets(secrets) if secrets else b""
    return signed_message_packed(
        event_id, publisher, ts, epoch, mode, nonce, toks, hint, sec, payload
    )


def signed_message_packed(
    event_id: str,
    publisher: str,
    ts: int,
    epoch: int,
    mode: str,
    nonce: bytes,
    toks: bytes,
    hint: bytes,
    sec: bytes,
    payload: bytes,
) -> bytes:
    """:func:`signed_message` from the packed forms a broker receives: ``toks`` the tokens as
    big-endian int64s, ``sec`` the canonical secrets blob (:func:`encode_secrets`, or empty)."""
    e, p = event_id.encode(), publisher.encode()
    u32 = _U32
    mode_lp = _MODE_LP.get(mode)
    if mode_lp is None:
        m = mode.encode()
        mode_lp = u32(len(m)) + m
    return b"".join(
        (
            b"psguard-record-v1",
            u32(len(e)),
            e,
            u32(len(p)),
            p,
            _TS_EPOCH(ts, epoch),
            mode_lp,
            u32(len(nonce)),
            nonce,
            u32(len(toks)),
            toks,
            u32(len(hint)),
            hint,
            u32(len(sec)),
            sec,
            u32(len(payload)),
            payload,
        )
    )


def encode_secrets(secrets: Iterable[tuple[str, bytes]]) -> bytes:
    """Sealed secret attributes as one binary value: length-prefixed (name, ciphertext) pairs."""
    return b"".join(length_prefixed(k.encode()) + length_prefixed(v) for k, v in sorted(secrets))


def decode_secrets(blob: bytes) -> tuple[tuple[str, bytes], ...]:
    out = []
    i = 0
    try:
        while i < len(blob):
            (n,) = struct.unpack_from(">I", blob, i)
            k = blob[i + 4 : i + 4 + n].decode()
            i += 4 + n
            (m,) = struct.unpack_from(">I", blob, i)
            v = blob[i + 4 : i + 4 + m]
            i += 4 + m
            if len(v) != m:
                raise ValueError
            out.append((k, v))
    except (struct.error, UnicodeDecodeError, ValueError):
        raise ValidationError("malformed secrets blob") from None
    return tuple(out)


def verify_record(rec: ProtectedRecord, keys: Mapping[str, VerifyKey]) -> bool:
    """Broker-side signature check; unknown publisher or bad signature -> False."""
    vk = keys.get(rec.publisher)
    return vk is not None and vk.is_valid(rec.sig, rec.message())


def check_record(
    rec: ProtectedRecord,
    keys: Mapping[str, VerifyKey],
    *,
    now_ms: int,
    max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
) -> DropReason | None:
    """The guards a broker applies before matching: forged, then stale."""
    if not verify_record(rec, keys):
        return DropReason.FORGED
    if abs(now_ms - rec.ts) > max_delay_ms:
        return DropReason.STALE
    return None


def with_sig(rec: ProtectedRecord, sig: bytes) -> ProtectedRecord:
    """``rec`` carrying ``sig``."""
    return ProtectedRecord(
        rec.event_id,
        rec.publisher,
        rec.ts,
        rec.epoch,
        rec.mode,
        rec.nonce,
        rec.tokens,
        rec.hint,
        rec.secrets,
        rec.payload,
        sig,
    )


# -- tokenised filters and the reference match -------------------------------------------


@dataclass(frozen=True, slots=True)
class ProtectedFilterRows:
    """A filter as brokers hold it: token groups per scope, no plaintext.

    ``groups[scope_index]`` is a tuple of groups, each a tuple of 16-byte tokens; a filter
    matches an event of that scope that meets one token of every group."""

    filter_id: str
    groups: tuple[tuple[tuple[bytes, ...], ...], ...]

    def rows(self) -> list[tuple[str, int, int, bytes]]:
        """``(filter_id, n_groups, tok64, token)`` rows; a token is listed once per group."""
        out = []
        for scope_groups in self.groups:
            n = len(scope_groups)
            for g in scope_groups:
                out += [(self.filter_id, n, tok64(t), t) for t in g]
        return out


def broker_match(pf: ProtectedFilterRows, rec: ProtectedRecord) -> bool:
    """Does the protected filter match the protected record? Deterministic: token equality;
    randomized: ``F_tok(r)`` among the record's tags. Counting: every group met once."""
    have = set(rec.tokens)
    for scope_groups in pf.groups:
        ok = True
        for g in scope_groups:
            if rec.mode == "randomized":
                met = any(tok64(randomize([t], rec.nonce)[0]) in have for t in g)
            else:
                met = any(tok64(t) in have for t in g)
            if not met:
                ok = False
                break
        if ok and scope_groups:
            return True
    return False
