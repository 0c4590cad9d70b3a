"""The PSGuard KDC authority and the subscriber's keys (psguard.txt §3.1-§3.2).

:class:`Authority` turns a filter into token groups (what brokers match) and into
:class:`FilterKeys` (minimal covers per constrained attribute, roots of unconstrained ones on
demand: stateless KDC, §3.2.1). :meth:`FilterKeys.open` derives
``K(e)`` only when every routable value lies below one of its nodes.

Key cache at the subscriber (psguard.txt §3.2.3 "Performance Enhancement", §5.2.3 "with key
caching"): a :class:`FilterKeys` belongs to one epoch and keeps, in a bounded LRU, the hint
key of each scope and each ``K(e)`` component it has derived, per (scope, type, attribute,
value); a later event with the same value costs a lookup instead of the walk from the cover
node to the leaf. Only components derived from the filter's own keys are cached, so the cache
never opens what the keys alone would not; a renewal at an epoch change builds new
:class:`FilterKeys` (and an empty cache). ``cache_size=0`` turns it off.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pubguard.crypto import SecretBytes, aad_for, open_
from pubguard.crypto.secret import raw
from pubguard.errors import InvalidToken, KeyError_, ValidationError
from pubguard.keys.cache import DEFAULT_LRU_CAPACITY, LruCache
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Constraint, Event, EventType, Filter, Op
from pubguard.schemes.common.wire_id import secret_labels, unpack_inner
from pubguard.schemes.psguard import tokens as tk_
from pubguard.schemes.psguard.keytree import (
    absent_all,
    absent_key,
    derive_leaf,
    event_key,
    hint_aad,
    hint_key,
    kind_tree,
    node_key,
    spec_key,
    spec_tree,
    xor32,
)
from pubguard.schemes.psguard.record import (
    PAYLOAD_ATTR,
    SCOPE_NODE,
    ProtectedFilterRows,
    ProtectedRecord,
    Schema,
    decode_secrets,
)
from pubguard.schemes.psguard.tokens import (
    NodeGrant,
    attr_kind,
    constraint_nodes,
    constraint_tokens,
)

__all__ = [
    "Authority",
    "FilterKeys",
    "ScopeKeys",
]


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
        specs = tuple((a, spec_key(self.schema.spec(et.name, a))) for a in names)
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
        scopes: dict[str, ScopeKeys] = {}
        for g in self._grants(f):
            tk = self._kdc.topic(g.scope)
            keys: dict[str, list[tuple[NodeGrant, SecretBytes]]] = {}
            for a, nodes in g.key_nodes.items():
                keys[a] = [(n, node_key(tk, n)) for n in nodes]
            agg: dict[str, SecretBytes] = {}
            for tname in g.type_names:
                et = self.schema.types[tname]
                ta = self.schema.topic_attr(tname)
                x = self._absent.get((g.scope, tname))
                if x is None:
                    if len(self._absent) > 4096:
                        self._absent.clear()
                    x = self._absent[(g.scope, tname)] = absent_all(tk, et, ta)
                for a in g.key_nodes:
                    x = xor32(x, absent_key(tk.root(spec_tree(self.schema.spec(tname, a)), a)))
                agg[tname] = SecretBytes(x)
            scopes[g.scope] = ScopeKeys(
                SecretBytes(raw(tk.root_key("category", SCOPE_NODE))),
                keys,
                agg,
                _RootIssuer(self._kdc, g.scope, frozenset(g.key_nodes)),
            )
        return FilterKeys(f, scopes, self.schema, self.epoch)


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
class ScopeKeys:
    """A subscriber's keys for one scope ``w`` of a filter: the scope key ``S(w)``, the cover
    nodes' keys per constrained attribute, the aggregate of absent keys per type, and the
    issuer of unconstrained attributes' roots (psguard.txt §3.2.1). The KDC builds it here;
    a remote KDC's client (:mod:`pubguard.net.keyservice.kdc_client`) rebuilds it from the
    wire."""

    scope_key: SecretBytes
    keys: dict[str, list[tuple[NodeGrant, SecretBytes]]]
    aggregate: dict[str, SecretBytes]  # type name -> P
    root: Callable[[str, str], bytes]


@dataclass(slots=True)
class FilterKeys:
    """A subscriber's authorisation for one filter: opens matching deliveries only."""

    filter: Filter
    scopes: dict[str, ScopeKeys]
    schema: Schema
    epoch: int
    cache_size: int = field(default=DEFAULT_LRU_CAPACITY, repr=False, compare=False)
    _cache: LruCache[Hashable, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._cache = LruCache(self.cache_size)

    def __repr__(self) -> str:
        return f"FilterKeys({self.filter.id!r}, scopes={len(self.scopes)})"

    @property
    def cache(self) -> LruCache[Hashable, bytes]:
        """The derived-key cache of this epoch (sizes and hit counts only)."""
        return self._cache

    def _hint_key(self, scope: str, sk: ScopeKeys) -> bytes:
        hk = self._cache.get(("hint", scope))
        if hk is None:
            hk = hint_key(raw(sk.scope_key))
            self._cache.put(("hint", scope), hk)
        return hk

    def _x(self, scope: str, sk: ScopeKeys, et: EventType, attrs: Mapping[str, Any]) -> bytes:
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
            if grants is not None and a not in attrs:  # constrained: must be present
                raise InvalidToken()
            if a not in attrs:
                continue
            v = attrs[a]
            ck = (scope, et.name, a, type(v), v)  # the exact type: True, 1 and 1.0 differ
            d = self._cache.get(ck)
            if d is None:
                if grants is not None:  # constrained: the value must lie below a cover node
                    d = self._below(spec, grants, v)
                else:  # unconstrained and present: from the root
                    root = sk.root(spec_tree(spec), a)
                    kind = attr_kind(spec)
                    node = NodeGrant(
                        kind_tree(kind), a, () if kind in ("category", "plain") else ""
                    )
                    d = xor32(absent_key(root), derive_leaf(kind, spec, node, SecretBytes(root), v))
                self._cache.put(ck, d)
            x = xor32(x, d)
        return x

    @staticmethod
    def _below(spec: AttributeSpec, grants: list[tuple[NodeGrant, SecretBytes]], v: Any) -> bytes:
        kind = attr_kind(spec)
        for node, key in grants:
            try:
                return derive_leaf(kind, spec, node, key, v)
            except KeyError_:
                continue
        raise InvalidToken()

    def open(self, rec: ProtectedRecord | Mapping[str, Any]) -> Event:
        """Decrypt a delivery; InvalidToken when not authorised or tampered."""
        r = rec if isinstance(rec, Mapping) else _as_mapping(rec)
        eid, epoch = str(r["event_id"]), int(r["epoch"])
        if epoch != self.epoch:
            raise InvalidToken()
        for scope, sk in self.scopes.items():
            try:
                pt = open_(self._hint_key(scope, sk), r["hint"], aad=hint_aad(epoch, eid))
            except InvalidToken:
                continue
            hint = json.loads(pt)
            et = self.schema.types.get(hint.get("t"))
            if et is None:
                raise InvalidToken()
            attrs: dict[str, Any] = dict(hint["a"])
            try:
                k_e = event_key(raw(sk.scope_key), self._x(scope, sk, et, attrs))
            except (KeyError_, ValidationError, TypeError):  # TypeError: unhashable value
                raise InvalidToken() from None
            tid = et.type_id
            secrets = r["secrets"]
            if isinstance(secrets, bytes | bytearray):
                secrets = decode_secrets(bytes(secrets))
            # keyed labels back to names (schemes/common/wire_id.py): only K(e) maps them
            names = {
                label: name
                for name, label in secret_labels(k_e, eid, [a.name for a in et.secret]).items()
            }
            for label, ct in secrets:
                name = names.get(label)
                if name is None or name in attrs:
                    raise InvalidToken()
                attrs[name] = json.loads(
                    open_(k_e, ct, aad=aad_for(tid, name, epoch, eid.encode()))
                )
            aad = aad_for(tid, PAYLOAD_ATTR, epoch, eid.encode())
            try:
                app_id, payload = unpack_inner(open_(k_e, r["payload"], aad=aad))
            except ValidationError:
                raise InvalidToken() from None
            return Event(attrs, id=app_id, type=et.name, payload=payload)
        raise InvalidToken()

    def open_matching(self, rec: ProtectedRecord | Mapping[str, Any]) -> Event | None:
        """:meth:`open`, then the subscriber's own plaintext filter check (post-filter):
        None for a delivery the key trees admit but the filter does not (least count)."""
        ev = self.open(rec)
        return ev if self.filter.matches(ev) else None


def _as_mapping(rec: ProtectedRecord) -> dict[str, Any]:
    return {
        "event_id": rec.event_id,
        "epoch": rec.epoch,
        "hint": rec.hint,
        "secrets": rec.secrets,
        "payload": rec.payload,
    }
