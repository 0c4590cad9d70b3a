"""The PSGuard profile: key-tree authorisation, tokenised routing, sealed secret attributes.

Theory of operation (psguard.txt §3-§4.1). Three parties, three sets of functions, all pure
(time and randomness come in as arguments) so the Spark pipeline and the broker network share
them:

* **Publisher** (:class:`Publisher`, holds the KDC's topic keys): an event of a type whose
  ``topic`` attribute is ``w`` lives in *scope* ``w`` (types without a topic attribute form one
  scope per type). Each routable attribute becomes tokens (:mod:`pubguard.schemes.tokens`);
  the encryption key is ``K(e) = H(S(w) || K^{a1}_{leaf} || K^{a2}_{leaf} ...)`` over the
  key-tree leaves of the event's routable attributes (NAKT ``K_{ktid(v)}``, category node,
  prefix/suffix chain, equality leaf), with ``S(w)`` the scope key every subscriber of ``w``
  holds. Secret attributes and the payload are AEAD-sealed under ``K(e)`` with associated data
  ``aad_for(type_id, attribute, epoch, event_id)``; the routable values travel in a *hint*
  sealed under ``KH(S(w), "psguard-hint")`` (psguard.txt sends ``ktid`` in the clear; we hide
  it from brokers and show it only to the scope's subscribers). The record is signed with the
  publisher's Ed25519 key (eventguard.txt §4.4 publish guard, ARCHITECTURE.md modern choices).
* **KDC / authority** (:class:`Authority`): turns a filter into token groups (what brokers
  match) and into authorisation keys :class:`FilterKeys` (psguard.txt §3.1 minimal covers).
  Roots of attributes a filter leaves unconstrained are issued on demand (stateless KDC,
  §3.2.1); a root of a constrained attribute is refused.
* **Broker** (no keys): :func:`verify_record` (signature), :func:`check_record` (signature,
  timestamp window), and matching: a filter of ``n`` token groups matches an event that meets
  ``n`` of its tokens (:func:`broker_match`).

A subscriber opens a delivery with :meth:`FilterKeys.open`, which derives ``K(e)`` only when
every routable attribute's leaf lies below one of its authorisation nodes, and re-checks its
plaintext filter (exactness under least-count snapping, psguard.txt §3.1).
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pubguard.crypto import KH, H, SecretBytes, SigningKey, VerifyKey, aad_for, open_, seal
from pubguard.crypto.secret import raw
from pubguard.errors import DropReason, InvalidToken, KeyError_, ValidationError
from pubguard.keys.kdc import KDC, TopicKeys, derive_category, derive_prefix, derive_suffix
from pubguard.keys.nakt import derive_from, derive_path, ktid
from pubguard.model import AttributeSpec, Constraint, Event, EventType, Filter, Op
from pubguard.schemes import tokens as tk_
from pubguard.schemes.tokens import (
    NONCE_BYTES,
    NodeGrant,
    attr_kind,
    category_path,
    constraint_nodes,
    constraint_tokens,
    event_attr_tokens,
    randomize,
    tok64,
    typed_value,
)

__all__ = [
    "DEFAULT_MAX_DELAY_MS",
    "MODES",
    "PROFILE",
    "Authority",
    "FilterKeys",
    "ProtectedFilterRows",
    "PSGuardScheme",
    "ProtectedRecord",
    "Publisher",
    "Schema",
    "broker_match",
    "check_record",
    "decode_secrets",
    "encode_secrets",
    "signed_message",
    "verify_record",
    "with_sig",
]

PROFILE = "psguard"
MODES = ("deterministic", "randomized")
#: Accepted clock skew / delay of a publication's signed timestamp (eventguard.txt §4.7).
DEFAULT_MAX_DELAY_MS = 300_000
SCOPE_NODE = "\x01scope"
ABSENT_NODE = "\x01absent"
PAYLOAD_ATTR = ""  # attribute names are non-empty, so "" is the payload's AAD slot


def _check_mode(mode: str) -> str:
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


def _lp(b: bytes) -> bytes:
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
    e, p, m = event_id.encode(), publisher.encode(), mode.encode()
    u32 = _U32
    return b"".join(
        (
            b"psguard-record-v1",
            u32(len(e)), e,
            u32(len(p)), p,
            _TS_EPOCH(ts, epoch),
            u32(len(m)), m,
            u32(len(nonce)), nonce,
            u32(len(toks)), toks,
            u32(len(hint)), hint,
            u32(len(sec)), sec,
            u32(len(payload)), payload,
        )
    )  # fmt: skip


def encode_secrets(secrets: Iterable[tuple[str, bytes]]) -> bytes:
    """Sealed secret attributes as one binary value: length-prefixed (name, ciphertext) pairs."""
    return b"".join(_lp(k.encode()) + _lp(v) for k, v in sorted(secrets))


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


# -- publisher ----------------------------------------------------------------------------------


def _component(tk: TopicKeys, spec: AttributeSpec, v: Any) -> bytes:
    """The event key-tree leaf of one routable non-topic attribute (psguard.txt §3.1)."""
    kind = attr_kind(spec)
    a = spec.name
    if kind == "numeric":
        return raw(tk.numeric_event_key(a, v, spec.range_size, spec.least_count)[1])  # type: ignore[arg-type]
    if kind == "category":
        return raw(tk.category_key(a, category_path(v)))
    if kind == "prefix":
        return raw(tk.prefix_key(a, v))
    if kind == "suffix":
        return raw(tk.suffix_key(a, v))
    return raw(tk.category_key(a, (tk_.EQ_NODE, typed_value(v))))


def _tree(kind: str) -> str:
    return "category" if kind == "plain" else kind


def _absent_key(root: bytes) -> bytes:
    """Key of the reserved *absent* node below an attribute's tree root: held by whoever holds
    the root (the attribute is unconstrained), by no cover node below the root."""
    return derive_path(root, [ABSENT_NODE])


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(32, "big")


def _absent_all(tk: TopicKeys, et: EventType, topic_attr: str | None) -> bytes:
    """``A = XOR of the absent keys of every routable attribute of the type``."""
    x = bytes(32)
    for spec in et.routable:
        if spec.name != topic_attr:
            x = _xor(x, _absent_key(tk.root(_tree(attr_kind(spec)), spec.name)))
    return x


def _event_key(scope_key: bytes, x: bytes) -> bytes:
    """``K(e) = H(S(w) || X)``, ``X = A XOR_{a present} (absent_a XOR leaf_a)``: every routable
    attribute of the type takes part, absent ones through their absent node, so a filter on an
    attribute the event lacks cannot open it."""
    return H(b"psguard-K(e)\x00" + scope_key + x)


def _hint_key(scope_key: bytes) -> bytes:
    return KH(scope_key, b"psguard-hint")


def _hint_aad(epoch: int, event_id: str) -> bytes:
    return aad_for(b"psguard-hint", "hint", epoch, event_id.encode())


class Publisher:
    """Protects events (trusted side: holds the KDC's keys for its topics)."""

    __slots__ = ("_absent", "_kdc", "_sk", "epoch", "mode", "name", "schema")

    def __init__(
        self,
        kdc: KDC,
        schema: Schema,
        *,
        name: str,
        signing_key: SigningKey,
        epoch: int = 0,
        mode: str = "randomized",
    ) -> None:
        self._kdc = kdc.for_epoch(epoch)
        self.schema, self.name, self._sk = schema, name, signing_key
        self.epoch, self.mode = epoch, _check_mode(mode)
        self._absent: dict[tuple[str, str], bytes] = {}

    def __repr__(self) -> str:
        return f"Publisher({self.name!r}, mode={self.mode!r}, epoch={self.epoch})"

    def event_tokens(self, event: Event) -> tuple[str, list[bytes]]:
        """``(scope, routing tokens)`` of an event (before randomisation)."""
        et = self.schema.type_of(event)
        et.validate(event)
        w = self.schema.scope_of(et, event.attrs)
        tk = self._kdc.topic(w)
        toks: list[bytes] = []
        ta = self.schema.topic_attr(et.name)
        if ta is not None:
            toks.append(self._kdc.topic_token(w)[: tk_.TOKEN_BYTES])
        for spec in et.routable:
            if spec.name != ta and spec.name in event.attrs:
                toks += event_attr_tokens(tk, spec, event.attrs[spec.name])
        return w, toks

    def protect(
        self, event: Event, *, now_ms: int, rng: random.Random | None = None, sign: bool = True
    ) -> ProtectedRecord:
        """The protected record of ``event``; ``sign=False`` leaves ``sig`` empty (the caller
        signs a Merkle root over a batch of records instead)."""
        if not event.id:
            raise ValidationError("psguard: events need an id (dedup and AAD bind to it)")
        et = self.schema.type_of(event)
        w, toks = self.event_tokens(event)
        tk = self._kdc.topic(w)
        ta = self.schema.topic_attr(et.name)
        scope_key = raw(tk.root_key("category", SCOPE_NODE))
        memo_key = (w, et.name)
        x = self._absent.get(memo_key)
        if x is None:
            if len(self._absent) > 4096:
                self._absent.clear()
            x = self._absent[memo_key] = _absent_all(tk, et, ta)
        for spec in et.routable:
            if spec.name != ta and spec.name in event.attrs:
                leaf = _component(tk, spec, event.attrs[spec.name])
                absent = _absent_key(tk.root(_tree(attr_kind(spec)), spec.name))
                x = _xor(x, _xor(absent, leaf))
        k_e = _event_key(scope_key, x)
        if self.mode == "randomized":
            nonce = rng.randbytes(NONCE_BYTES) if rng is not None else _urandom(NONCE_BYTES)
            ints = tuple(tok64(x) for x in randomize(toks, nonce))
        else:
            nonce, ints = b"", tuple(tok64(x) for x in toks)
        routable = {s.name: event.attrs[s.name] for s in et.routable if s.name in event.attrs}
        hint_pt = json.dumps({"t": et.name, "a": routable}, sort_keys=True).encode()
        hint = seal(_hint_key(scope_key), hint_pt, aad=_hint_aad(self.epoch, event.id), rng=rng)
        tid = et.type_id
        secrets = tuple(
            (
                s.name,
                seal(
                    k_e,
                    json.dumps(event.attrs[s.name]).encode(),
                    aad=aad_for(tid, s.name, self.epoch, event.id.encode()),
                    rng=rng,
                ),
            )
            for s in et.secret
            if s.name in event.attrs
        )
        payload = seal(
            k_e,
            event.payload,
            aad=aad_for(tid, PAYLOAD_ATTR, self.epoch, event.id.encode()),
            rng=rng,
        )
        rec = ProtectedRecord(
            event.id,
            self.name,
            int(now_ms),
            self.epoch,
            self.mode,
            nonce,
            ints,
            hint,
            secrets,
            payload,
        )
        return _with_sig(rec, self._sk.sign(rec.message())) if sign else rec


def _urandom(n: int) -> bytes:
    from pubguard.crypto import random_bytes

    return random_bytes(n)


def with_sig(rec: ProtectedRecord, sig: bytes) -> ProtectedRecord:
    """``rec`` carrying ``sig``."""
    return _with_sig(rec, sig)


def _with_sig(rec: ProtectedRecord, sig: bytes) -> ProtectedRecord:
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


# -- KDC / authority: filters to tokens and keys -----------------------------------------------


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


@dataclass(frozen=True, slots=True)
class _ScopeGrant:
    scope: str
    type_names: list[str]  # shared with Authority._grants' bookkeeping: grows as found
    token_groups: tuple[tuple[bytes, ...], ...]
    key_nodes: dict[str, list[NodeGrant]]
    exact: bool


class Authority:
    """The KDC's subscription side: tokens for brokers, keys for the subscriber."""

    __slots__ = ("_absent", "_kdc", "epoch", "schema")

    def __init__(self, kdc: KDC, schema: Schema, *, epoch: int = 0) -> None:
        self._kdc = kdc.for_epoch(epoch)
        self.schema, self.epoch = schema, epoch
        self._absent: dict[tuple[str, str], bytes] = {}

    def __repr__(self) -> str:
        return f"Authority(epoch={self.epoch})"

    def _grants(self, f: Filter) -> list[_ScopeGrant]:
        fid = f.id or str(f)
        by_scope: dict[tuple[Any, ...], list[str]] = {}
        out: list[_ScopeGrant] = []
        cands = self.schema.candidates(f)
        # Workload convention (sim/topic_workloads): a topic's events have the type named
        # after it; when that type exists the filter's topic pins it.
        named = {
            str(c.value)
            for c in f.constraints
            if c.op is Op.EQ and any(c.name == self.schema.topic_attr(t.name) for t in cands)
        }
        if len(named) == 1 and (w0 := named.pop()) in {t.name for t in cands}:
            cands = [t for t in cands if t.name == w0 or self.schema.topic_attr(t.name) is None]
        errors: list[ValidationError] = []
        for et in cands:
            try:
                g = self._grant(f, fid, et, by_scope)
            except ValidationError as exc:
                errors.append(exc)
                continue
            if g is not None:
                out.append(g)
        if errors and not out:
            raise errors[0]
        return out

    def _grant(
        self,
        f: Filter,
        fid: str,
        et: EventType,
        by_scope: dict[tuple[Any, ...], list[str]],
    ) -> _ScopeGrant | None:
        ta = self.schema.topic_attr(et.name)
        if ta is not None:
            eqs = [c for c in f.constraints if c.name == ta and c.op is Op.EQ]
            others = [c for c in f.constraints if c.name == ta and c.op is not Op.EQ]
            if not eqs or others:
                raise ValidationError(
                    f"psguard: filter {fid} must constrain {ta!r} with '=' only "
                    f"(type {et.name!r} routes by topic)"
                )
            ws = {c.value for c in eqs}
            if len(ws) > 1 or not isinstance(eqs[0].value, str):
                return None  # unsatisfiable on this type
            w = str(eqs[0].value)
        else:
            w = "\x01type:" + et.name
        names = sorted(f.attribute_names - {ta} if ta else f.attribute_names)
        specs = tuple((a, _spec_key(self.schema.spec(et.name, a))) for a in names)
        key = (w, specs)
        if key in by_scope:
            by_scope[key].append(et.name)
            return None
        by_scope[key] = [et.name]
        tk = self._kdc.topic(w)
        groups: list[tuple[bytes, ...]] = []
        if ta is not None:
            groups.append((self._kdc.topic_token(w)[: tk_.TOKEN_BYTES],))
        key_nodes: dict[str, list[NodeGrant]] = {}
        exact = True
        by_attr: dict[str, list[Constraint]] = {}
        for c in f.constraints:
            if c.name != ta:
                by_attr.setdefault(c.name, []).append(c)
        for a, cs in sorted(by_attr.items()):
            tnodes, knodes, ex = constraint_nodes(self.schema.spec(et.name, a), cs)
            groups.append(tuple(dict.fromkeys(constraint_tokens(tk, tnodes))))
            key_nodes[a] = knodes
            exact = exact and ex
        return _ScopeGrant(w, by_scope[key], tuple(groups), key_nodes, exact)

    def protect_filter(self, f: Filter) -> ProtectedFilterRows:
        """psguard.txt §4.1: the tokenised filter brokers match on (no plaintext)."""
        if f.id is None:
            raise ValidationError("psguard: filters need an id")
        return ProtectedFilterRows(f.id, tuple(g.token_groups for g in self._grants(f)))

    def authorise(self, f: Filter) -> FilterKeys:
        """psguard.txt §3.1: the authorisation keys ``K(f)`` of a filter, per scope: the scope
        key ``S(w)``, the cover keys of every constrained attribute, and per candidate type the
        aggregate ``P = A XOR_{constrained c} absent_c`` (the absent keys of the attributes it
        leaves unconstrained, combined). Roots of unconstrained attributes come on demand."""
        scopes: dict[str, _ScopeKeys] = {}
        for g in self._grants(f):
            tk = self._kdc.topic(g.scope)
            keys: dict[str, list[tuple[NodeGrant, SecretBytes]]] = {}
            for a, nodes in g.key_nodes.items():
                keys[a] = [(n, _node_key(tk, n)) for n in nodes]
            agg: dict[str, SecretBytes] = {}
            for tname in g.type_names:
                et = self.schema.types[tname]
                ta = self.schema.topic_attr(tname)
                x = self._absent.get((g.scope, tname))
                if x is None:
                    if len(self._absent) > 4096:
                        self._absent.clear()
                    x = self._absent[(g.scope, tname)] = _absent_all(tk, et, ta)
                for a in g.key_nodes:
                    x = _xor(
                        x, _absent_key(tk.root(_tree(attr_kind(self.schema.spec(tname, a))), a))
                    )
                agg[tname] = SecretBytes(x)
            scopes[g.scope] = _ScopeKeys(
                SecretBytes(raw(tk.root_key("category", SCOPE_NODE))),
                keys,
                agg,
                _RootIssuer(self._kdc, g.scope, frozenset(g.key_nodes)),
            )
        return FilterKeys(f, scopes, self.schema, self.epoch)


def _spec_key(a: AttributeSpec) -> tuple[object, ...]:
    return (a.type, a.routable, a.range_size, a.least_count, a.kind)


def _node_key(tk: TopicKeys, n: NodeGrant) -> SecretBytes:
    if n.kind == "numeric":
        return tk.numeric_key(n.attr, n.node)  # type: ignore[arg-type]
    if n.kind == "category":
        return tk.category_key(n.attr, n.node)  # type: ignore[arg-type]
    if n.kind == "prefix":
        return tk.prefix_key(n.attr, n.node)  # type: ignore[arg-type]
    return tk.suffix_key(n.attr, n.node)  # type: ignore[arg-type]


class _RootIssuer:
    """The KDC answering a subscriber's request for the root of an attribute its filter leaves
    unconstrained (stateless: psguard.txt §3.2.1). Refuses constrained attributes."""

    __slots__ = ("_kdc", "_refuse", "_scope")

    def __init__(self, kdc: KDC, scope: str, constrained: frozenset[str]) -> None:
        self._kdc, self._scope, self._refuse = kdc, scope, constrained

    def __repr__(self) -> str:
        return "_RootIssuer(<kdc>)"

    def __call__(self, tree: str, attr: str) -> bytes:
        if attr in self._refuse:
            raise KeyError_(f"attribute {attr!r} is constrained by the filter: no root key")
        return self._kdc.topic(self._scope).root(tree, attr)


@dataclass(slots=True)
class _ScopeKeys:
    scope_key: SecretBytes
    keys: dict[str, list[tuple[NodeGrant, SecretBytes]]]
    aggregate: dict[str, SecretBytes]  # type name -> P
    root: Callable[[str, str], bytes]


@dataclass(slots=True)
class FilterKeys:
    """A subscriber's authorisation for one filter: opens matching deliveries only."""

    filter: Filter
    scopes: dict[str, _ScopeKeys]
    schema: Schema
    epoch: int

    def __repr__(self) -> str:
        return f"FilterKeys({self.filter.id!r}, scopes={len(self.scopes)})"

    def _x(self, sk: _ScopeKeys, et: EventType, attrs: Mapping[str, Any]) -> bytes:
        agg = sk.aggregate.get(et.name)
        if agg is None:
            raise InvalidToken()
        x = raw(agg)
        ta = self.schema.topic_attr(et.name)
        for spec in et.routable:
            a = spec.name
            if a == ta:
                continue
            grants = sk.keys.get(a)
            if grants is not None:  # constrained: must be present and below a cover node
                if a not in attrs:
                    raise InvalidToken()
                x = _xor(x, self._below(spec, grants, attrs[a]))
            elif a in attrs:  # unconstrained and present: from the root
                root = sk.root(_tree(attr_kind(spec)), a)
                kind = attr_kind(spec)
                node = NodeGrant(_tree(kind), a, () if kind in ("category", "plain") else "")
                leaf = _derive(kind, spec, node, SecretBytes(root), attrs[a])
                x = _xor(x, _xor(_absent_key(root), leaf))
        return x

    @staticmethod
    def _below(spec: AttributeSpec, grants: list[tuple[NodeGrant, SecretBytes]], v: Any) -> bytes:
        kind = attr_kind(spec)
        for node, key in grants:
            try:
                return _derive(kind, spec, node, key, v)
            except KeyError_:
                continue
        raise InvalidToken()

    def open(self, rec: ProtectedRecord | Mapping[str, Any]) -> Event:
        """Decrypt a delivery; InvalidToken when not authorised or tampered."""
        r = rec if isinstance(rec, Mapping) else _as_mapping(rec)
        eid, epoch = str(r["event_id"]), int(r["epoch"])
        if epoch != self.epoch:
            raise InvalidToken()
        for sk in self.scopes.values():
            try:
                pt = open_(_hint_key(raw(sk.scope_key)), r["hint"], aad=_hint_aad(epoch, eid))
            except InvalidToken:
                continue
            hint = json.loads(pt)
            et = self.schema.types.get(hint.get("t"))
            if et is None:
                raise InvalidToken()
            attrs: dict[str, Any] = dict(hint["a"])
            try:
                k_e = _event_key(raw(sk.scope_key), self._x(sk, et, attrs))
            except (KeyError_, ValidationError):
                raise InvalidToken() from None
            tid = et.type_id
            secrets = r["secrets"]
            if isinstance(secrets, bytes | bytearray):
                secrets = decode_secrets(bytes(secrets))
            for name, ct in secrets:
                attrs[name] = json.loads(
                    open_(k_e, ct, aad=aad_for(tid, name, epoch, eid.encode()))
                )
            aad = aad_for(tid, PAYLOAD_ATTR, epoch, eid.encode())
            return Event(attrs, id=eid, type=et.name, payload=open_(k_e, r["payload"], aad=aad))
        raise InvalidToken()

    def open_matching(self, rec: ProtectedRecord | Mapping[str, Any]) -> Event | None:
        """:meth:`open`, then the subscriber's own plaintext filter check (post-filter):
        None for a delivery the key trees admit but the filter does not (least count)."""
        ev = self.open(rec)
        return ev if self.filter.matches(ev) else None


def _derive(kind: str, spec: AttributeSpec, node: NodeGrant, key: SecretBytes, v: Any) -> bytes:
    if kind == "numeric":
        leaf = ktid(v, spec.range_size, spec.least_count)  # type: ignore[arg-type]
        return raw(derive_from(node.node, key, leaf))  # type: ignore[arg-type]
    if kind == "category":
        return raw(derive_category(node.node, key, category_path(v)))  # type: ignore[arg-type]
    if kind == "prefix":
        return raw(derive_prefix(node.node, key, v))  # type: ignore[arg-type]
    if kind == "suffix":
        return raw(derive_suffix(node.node, key, v))  # type: ignore[arg-type]
    return raw(derive_category(node.node, key, (tk_.EQ_NODE, typed_value(v))))  # type: ignore[arg-type]


def _as_mapping(rec: ProtectedRecord) -> dict[str, Any]:
    return {
        "event_id": rec.event_id,
        "epoch": rec.epoch,
        "hint": rec.hint,
        "secrets": rec.secrets,
        "payload": rec.payload,
    }


# -- broker matching (pure reference; the pipeline runs it as a join) -------------------------


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


# -- the Scheme protocol face (pubguard.schemes.base), for the broker network ------------------


def _unpack_body(body: bytes) -> tuple[bytes, bytes, bytes]:
    parts = []
    i = 0
    try:
        for _ in range(3):
            (n,) = struct.unpack_from(">I", body, i)
            parts.append(body[i + 4 : i + 4 + n])
            i += 4 + n
    except struct.error:
        raise ValidationError("malformed psguard body") from None
    if i != len(body):
        raise ValidationError("malformed psguard body")
    return parts[0], parts[1], parts[2]


class PSGuardScheme:
    """PSGuard through the :class:`~pubguard.schemes.base.Scheme` protocol.

    Client side needs the key holders it plays: ``kdc`` (publishers protect events; the KDC
    tokenises a subscriber's filters and issues its keys, remembered for ``open_event``) and
    ``signing_key`` + ``publisher``. Broker side needs only ``verify_keys`` (public).
    Wire: ``routing = {"mode", "nonce", "tokens"}``; ``body`` = hint, sealed secrets and
    sealed payload (length-prefixed); ``meta = {"publisher", "ts", "epoch", "sig"}``."""

    profile = PROFILE

    def __init__(
        self,
        schema: Schema,
        *,
        verify_keys: Mapping[str, VerifyKey] | None = None,
        kdc: KDC | None = None,
        publisher: str | None = None,
        signing_key: SigningKey | None = None,
        mode: str = "randomized",
        epoch: int = 0,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
    ) -> None:
        self.schema, self.mode, self.epoch = schema, _check_mode(mode), epoch
        self.verify_keys = dict(verify_keys or {})
        self.max_delay_ms = max_delay_ms
        self._pub = (
            Publisher(kdc, schema, name=publisher, signing_key=signing_key, epoch=epoch, mode=mode)
            if kdc is not None and publisher and signing_key is not None
            else None
        )
        self._auth = Authority(kdc, schema, epoch=epoch) if kdc is not None else None
        self._keys: dict[str, FilterKeys] = {}

    def __repr__(self) -> str:
        return f"PSGuardScheme(mode={self.mode!r}, epoch={self.epoch})"

    # -- client side ------------------------------------------------------------------------
    def protect_filter(self, f: Filter, *, now: float, rng: random.Random | None = None) -> Any:
        from pubguard.schemes.base import ProtectedFilter

        if self._auth is None:
            raise ValidationError("psguard: protecting a filter needs the KDC")
        fid = f.id or f"f{len(self._keys) + 1}"
        f = f.with_id(fid)
        pf = self._auth.protect_filter(f)
        self._keys[fid] = self._auth.authorise(f)
        groups = [[list(g) for g in scope] for scope in pf.groups]
        return ProtectedFilter({"id": fid, "groups": groups})

    protect_advertisement = protect_filter

    def protect_event(self, event: Event, *, now: float, rng: random.Random | None = None) -> Any:
        from pubguard.schemes.base import ProtectedEvent

        if self._pub is None:
            raise ValidationError("psguard: publishing needs the KDC and a signing key")
        r = self._pub.protect(event, now_ms=int(now * 1000), rng=rng)
        body = _lp(r.hint) + _lp(encode_secrets(r.secrets)) + _lp(r.payload)
        routing = {"mode": r.mode, "nonce": r.nonce, "tokens": list(r.tokens)}
        meta = {"publisher": r.publisher, "ts": r.ts, "epoch": r.epoch, "sig": r.sig}
        return ProtectedEvent(r.event_id, routing, body, meta)

    def _record(
        self, event_id: str, routing: Mapping[str, Any], body: bytes, meta: Mapping[str, Any]
    ) -> ProtectedRecord:
        try:
            hint, sec, payload = _unpack_body(bytes(body))
            return ProtectedRecord(
                str(event_id),
                str(meta["publisher"]),
                int(meta["ts"]),
                int(meta["epoch"]),
                str(routing["mode"]),
                bytes(routing["nonce"]),
                tuple(int(t) for t in routing["tokens"]),
                hint,
                decode_secrets(sec),
                payload,
                bytes(meta["sig"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"malformed psguard publication: {exc}") from None

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        rec = self._record(event_id, routing, body, meta)
        for fk in self._keys.values():
            try:
                return fk.open(rec)
            except InvalidToken:
                continue
        raise InvalidToken()

    # -- broker side ------------------------------------------------------------------------
    def decode_filter(self, wire: Mapping[str, Any]) -> ProtectedFilterRows:
        try:
            groups = tuple(
                tuple(tuple(bytes(t) for t in g) for g in scope) for scope in wire["groups"]
            )
            return ProtectedFilterRows(str(wire["id"]), groups)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"malformed psguard filter: {exc}") from None

    def decode_event(self, routing: Mapping[str, Any]) -> ProtectedRecord:
        try:
            nonce = bytes(routing["nonce"])
            return ProtectedRecord(
                "", "", 0, self.epoch, str(routing["mode"]), nonce,
                tuple(int(t) for t in routing["tokens"]), b"", (), b"",
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ValidationError(f"malformed psguard routing: {exc}") from None

    def broker_check(self, message: Any, ctx: Any) -> DropReason | None:
        routing = getattr(message, "routing", None)
        if routing is None:
            return None  # subscriptions carry tokens only; nothing to verify
        try:
            rec = self._record(message.event_id, routing, message.body, message.meta)
        except ValidationError:
            return DropReason.MALFORMED
        return check_record(
            rec, self.verify_keys, now_ms=int(ctx.now * 1000), max_delay_ms=self.max_delay_ms
        )

    def covers(self, f1: ProtectedFilterRows, f2: ProtectedFilterRows) -> bool:
        return f1.groups == f2.groups  # sound: tokens reveal no order between filters

    def broker_match(self, pf: ProtectedFilterRows, pe: ProtectedRecord) -> bool:
        return broker_match(pf, pe)

    def new_matcher(self) -> Any:
        from pubguard.schemes.base import LinearMatcher

        return LinearMatcher(self.broker_match)

    def outgoing(self, message: Any, ctx: Any) -> Any:
        return message
