"""The psguard wire forms and token index, shared by the broker faces of the psguard and default
profiles (:mod:`pubguard.schemes.psguard_net`, :mod:`pubguard.schemes.default`).

Theory of operation
-------------------
Wire forms (psguard.txt §4.1; a broker sees tokens and ciphertext only)::

    subscribe  filter {g: [[[T ...] group ...] scope ...]}      16-byte tokens, no plaintext
    publish    routing {m: "r" | "d", n: r, t: tok64(F_T(r)) ... packed as int64}
               body    E_K(e)(payload)
               meta    {p: publisher, ts: ms, e: epoch, h: sealed hint, s: sealed secrets,
                        sig: Ed25519 over the record}
    advertise  filter {g: []}                                   (PSGuard has no advertisements)

A filter is a disjunction over *scopes* (one per candidate topic / type) of a conjunction of
*groups* (one per constrained attribute), each a set of tokens: a minimal NAKT cover for a
numeric range, one node for a category or string chain, ``T(w)`` for the topic. An event's
tokens meet each group in at most one token, so "every group met" is the counting match.

Matching (:class:`TokenMatcher`, the scheme's index): deterministic tags are looked up in a
posting list. Randomized tags ``<r, F_T(r)>`` can only be tested by evaluating ``F_T(r)`` for
subscription tokens ``T``; the matcher does this in two stages: first the *anchor* group of
every clause (its smallest group: the topic token ``T(w)`` when there is one), then only the
remaining groups of clauses whose anchor met. :meth:`TokenMatcher.match_batch` evaluates one
token over every nonce of a micro-batch in a single AES call
(:func:`~pubguard.schemes.tokens.match_randomized`, the AES-PRF hint of issue 5), which makes
randomized tokens nearly free per event when a driver hands the matcher batches.

Covering is sound and deliberately narrow: tokens are opaque, so a filter covers another only
when their token sets are identical (two subscriptions to the same authorised range).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from pubguard.crypto import AesPrf
from pubguard.errors import ValidationError
from pubguard.schemes.base import CheckContext, Matcher, ProtectedEvent
from pubguard.schemes.psguard_record import (
    ProtectedFilterRows,
    ProtectedRecord,
    broker_match,
    decode_secrets,
    encode_secrets,
    signed_message_packed,
)
from pubguard.schemes.tokens import NONCE_BYTES, TOKEN_BYTES, match_randomized, tok64

__all__ = [
    "MAX_EVENT_TAGS",
    "MAX_FILTER_TOKENS",
    "TokenEvent",
    "TokenFilter",
    "TokenMatcher",
    "TokenRouting",
    "filter_to_wire",
    "parse_filter",
    "parse_routing",
    "record_from_wire",
    "record_to_wire",
    "signed_from_wire",
]

MAX_FILTER_TOKENS: Final = 4096  # tokens one subscription may carry (bounded broker memory)
MAX_SCOPES: Final = 256
MAX_EVENT_TAGS: Final = 4096  # tags one publication may carry
_MODE_WIRE: Final = {"randomized": "r", "deterministic": "d"}
_MODE_NAME: Final = {v: k for k, v in _MODE_WIRE.items()}
_RECORD_META: Final = frozenset({"p", "ts", "e", "h", "s", "sig"})


# -- wire forms -------------------------------------------------------------------------------


def _bytes(v: Any, what: str) -> bytes:
    if type(v) is bytes:  # the common case (msgpack bin): no copy
        return v
    if not isinstance(v, bytes | bytearray):
        raise ValidationError(f"psguard {what} must be bytes")
    return bytes(v)


def _int(v: Any, what: str) -> int:
    if type(v) is int and -(2**63) <= v < 2**63:  # the common case; bool is not int here
        return v
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
        raise ValidationError(f"psguard {what} must be a 64-bit integer")
    return v


def pack_tags(tags: Sequence[int]) -> bytes:
    return struct.pack(f">{len(tags)}q", *tags)


def record_to_wire(rec: ProtectedRecord) -> ProtectedEvent:
    """A :class:`ProtectedRecord` as a publication: tokens in ``routing``, the sealed payload in
    ``body``, everything else the signature covers in ``meta``."""
    routing = {"m": _MODE_WIRE[rec.mode], "n": rec.nonce, "t": pack_tags(rec.tokens)}
    meta = {"p": rec.publisher, "ts": rec.ts, "e": rec.epoch, "h": rec.hint,
            "s": encode_secrets(rec.secrets), "sig": rec.sig}  # fmt: skip
    return ProtectedEvent(rec.event_id, routing, rec.payload, meta)


class TokenEvent(NamedTuple):
    """A publication's routing part as a broker decodes it (an immutable named tuple rather
    than a frozen dataclass: it is built for every publication at every broker, and a tuple
    is built in a fraction of the time)."""

    mode: str
    nonce: bytes
    tags: tuple[int, ...]

    @property
    def tagset(self) -> frozenset[int]:
        """The tags as a set (single-event matching looks them up)."""
        return frozenset(self.tags)

    def as_record(self) -> ProtectedRecord:
        """Routing fields only (for :func:`~pubguard.schemes.psguard.broker_match`)."""
        return ProtectedRecord("", "", 0, 0, self.mode, self.nonce, self.tags, b"", (), b"")


_new_token_event = tuple.__new__  # TokenEvent from a (mode, nonce, tags) tuple, no checks


_ROUTING_KEYS: Final = frozenset({"m", "n", "t"})
_FLAT_TYPES: Final = (dict, MappingProxyType)  # the core's wire forms: no ABC check needed
_UNPACK_CACHED: Final = 64  # tag counts whose unpacker is kept


_UNPACK: dict[int, Callable[[bytes], tuple[int, ...]]] = {}  # tag count -> int64 unpacker


def _unpacker(n: int) -> Callable[[bytes], tuple[int, ...]]:
    f = _UNPACK.get(n)
    if f is None:
        f = _UNPACK[n] = struct.Struct(f">{n}q").unpack
    return f


def parse_routing(routing: Mapping[str, Any]) -> TokenEvent:
    if type(routing) not in _FLAT_TYPES and not isinstance(routing, Mapping):
        raise ValidationError("psguard routing is exactly {m, n, t}")
    if routing.keys() != _ROUTING_KEYS:
        raise ValidationError("psguard routing is exactly {m, n, t}")
    m = routing["m"]
    mode = _MODE_NAME.get(m) if type(m) is str else None
    if mode is None:
        raise ValidationError("psguard routing mode must be 'r' or 'd'")
    nonce = routing["n"]
    if type(nonce) is not bytes:
        nonce = _bytes(nonce, "nonce")
    if len(nonce) != (NONCE_BYTES if mode == "randomized" else 0):
        raise ValidationError("psguard nonce has the wrong length for its mode")
    raw = routing["t"]
    if type(raw) is not bytes:
        raw = _bytes(raw, "tags")
    n, odd = divmod(len(raw), 8)
    if odd or n > MAX_EVENT_TAGS:
        raise ValidationError("psguard tags must be whole int64 values, at most 4096")
    tags = _unpacker(n)(raw) if n <= _UNPACK_CACHED else struct.unpack(f">{n}q", raw)
    return _new_token_event(TokenEvent, (mode, nonce, tags))  # type: ignore[no-any-return]


def signed_from_wire(
    event_id: str,
    te: TokenEvent,
    routing: Mapping[str, Any],
    body: bytes,
    meta: Mapping[str, Any],
) -> tuple[str, int, int, bytes, bytes]:
    """``(publisher, ts, epoch, signed message, signature)`` of a publication whose routing part
    decoded to ``te``, with :func:`record_from_wire`'s checks (ValidationError on the same
    deviations) but without building the record: ``record_from_wire(...).message()`` from the
    packed tags as they arrived (a broker's guard path)."""
    if type(meta) in _FLAT_TYPES:  # the common shape, checked inline (a broker's hot path)
        g = meta.get
        pub, ts, epoch, hint, sec, sig = g("p"), g("ts"), g("e"), g("h"), g("s"), g("sig")
        toks = routing.get("t")
        if (
            type(pub) is str
            and pub
            and type(ts) is int
            and type(epoch) is int
            and -(2**63) <= ts < 2**63
            and 0 <= epoch < 2**63
            and type(hint) is bytes
            and type(sec) is bytes
            and not sec
            and type(sig) is bytes
            and type(body) is bytes
            and type(toks) is bytes
        ):
            msg = signed_message_packed(event_id, pub, ts, epoch, te.mode, te.nonce, toks,
                                        hint, sec, body)  # fmt: skip
            return pub, ts, epoch, msg, sig
    pub, epoch = _meta_head(meta)
    ts = _int(meta["ts"], "timestamp")
    sec = _bytes(meta["s"], "secrets")
    if sec:  # canonical form, as the record re-encodes its decoded secrets
        sec = encode_secrets(decode_secrets(sec))
    msg = signed_message_packed(event_id, pub, ts, epoch, te.mode, te.nonce,
                                _bytes(routing["t"], "tags"), _bytes(meta["h"], "hint"), sec,
                                _bytes(body, "body"))  # fmt: skip
    return pub, ts, epoch, msg, _bytes(meta["sig"], "signature")


def _meta_head(meta: Any) -> tuple[str, int]:
    """A record's ``meta`` has every field and names its publisher and epoch (ValidationError
    otherwise)."""
    if (type(meta) not in _FLAT_TYPES and not isinstance(meta, Mapping)) or not (
        meta.keys() >= _RECORD_META
    ):
        raise ValidationError("psguard meta needs p, ts, e, h, s, sig")
    pub = meta["p"]
    if not isinstance(pub, str) or not pub:
        raise ValidationError("psguard publisher must be a non-empty string")
    epoch = _int(meta["e"], "epoch")
    if epoch < 0:
        raise ValidationError("psguard epoch must be >= 0")
    return pub, epoch


def record_from_wire(
    event_id: str,
    routing: Mapping[str, Any],
    body: bytes,
    meta: Mapping[str, Any],
    *,
    te: TokenEvent | None = None,
) -> ProtectedRecord:
    """The signed record back from a publication (strict: ValidationError on any deviation).
    ``te``: ``parse_routing(routing)`` when the caller already has it (a broker decoded the
    routing part just before its guards run)."""
    if te is None:
        te = parse_routing(routing)
    pub, epoch = _meta_head(meta)
    sec = _bytes(meta["s"], "secrets")
    return ProtectedRecord(
        event_id, pub, _int(meta["ts"], "timestamp"), epoch, te.mode, te.nonce, te.tags,
        _bytes(meta["h"], "hint"), decode_secrets(sec) if sec else (),
        _bytes(body, "body"), _bytes(meta["sig"], "signature"),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class TokenFilter:
    """A subscription as a broker holds it: per scope, a conjunction of token groups."""

    scopes: tuple[tuple[frozenset[bytes], ...], ...]

    @property
    def canonical(self) -> frozenset[frozenset[frozenset[bytes]]]:
        return frozenset(frozenset(s) for s in self.scopes)

    def as_rows(self) -> ProtectedFilterRows:
        return ProtectedFilterRows(
            "", tuple(tuple(tuple(sorted(g)) for g in s) for s in self.scopes)
        )


def filter_to_wire(rows: ProtectedFilterRows) -> dict[str, Any]:
    return {"g": [[list(g) for g in scope] for scope in rows.groups]}


def parse_filter(wire: Mapping[str, Any]) -> TokenFilter:
    if not isinstance(wire, Mapping) or set(wire) != {"g"}:
        raise ValidationError("psguard filter is exactly {g}")
    scopes = wire["g"]
    if not isinstance(scopes, list | tuple) or len(scopes) > MAX_SCOPES:
        raise ValidationError("psguard filter scopes must be a list")
    out: list[tuple[frozenset[bytes], ...]] = []
    n = 0
    for s in scopes:
        if not isinstance(s, list | tuple) or not s:
            raise ValidationError("a psguard scope is a non-empty list of token groups")
        groups = []
        for g in s:
            if not isinstance(g, list | tuple) or not g:
                raise ValidationError("a psguard token group is a non-empty list of tokens")
            toks = frozenset(_bytes(t, "token") for t in g)
            if any(len(t) != TOKEN_BYTES for t in toks):
                raise ValidationError(f"psguard tokens are {TOKEN_BYTES} bytes")
            n += len(toks)
            groups.append(toks)
        out.append(tuple(groups))
    if n > MAX_FILTER_TOKENS:
        raise ValidationError(f"psguard filter carries more than {MAX_FILTER_TOKENS} tokens")
    return TokenFilter(tuple(out))


# -- the token index ----------------------------------------------------------------------------

Clause = tuple[Hashable, int]  # (subscription key, scope index)
_first64 = struct.Struct(">q").unpack_from  # tok64 of a PRF output block


class TokenMatcher:
    """Filter index over :class:`TokenFilter` (see the module docstring for the two stages)."""

    __slots__ = ("_afs", "_alist", "_anchor", "_by64", "_clauses", "_filters", "_post", "_prf",
                 "evaluations")  # fmt: skip

    #: randomized events in a batch below which :meth:`match_batch` matches them one by one
    #: (measured: with kept AES contexts, ``match`` costs about 25 us per event against 32
    #: subscriptions, ``match_batch`` about 20 us at 8 events and 8 us at 64). A driver may
    #: hand this matcher batches of any size; it need not wait for BATCH_MATCH_MIN.
    batch_min: Final = 8

    def __init__(self) -> None:
        self._filters: dict[Hashable, TokenFilter] = {}
        self._clauses: dict[Clause, tuple[int, tuple[frozenset[bytes], ...]]] = {}
        self._anchor: dict[bytes, set[Clause]] = {}  # anchor token -> clauses
        self._post: dict[bytes, dict[Clause, set[int]]] = {}  # token -> clause -> groups
        self._by64: dict[int, set[bytes]] = {}
        # token -> F_T over whole blocks, its AES context kept (crypto.AesPrf); fed only
        # parsed nonces (16 bytes each, checked by parse_routing)
        self._prf: dict[bytes, Callable[[bytes], bytes]] = {}
        self.evaluations = 0  # F_T(r) evaluations (AES calls in single-event matching)
        self._alist: list[tuple[Callable[[bytes], bytes], frozenset[Clause], bool]] | None = None
        self._afs: list[Callable[[bytes], bytes]] | None = None  # the anchors' F_T, in order

    def __len__(self) -> int:
        return len(self._filters)

    def add(self, key: Hashable, pf: TokenFilter) -> None:
        self.remove(key)
        self._alist = self._afs = None
        self._filters[key] = pf
        for i, groups in enumerate(pf.scopes):
            c = (key, i)
            a = min(range(len(groups)), key=lambda j: len(groups[j]))
            self._clauses[c] = (a, groups)
            for t in groups[a]:
                self._anchor.setdefault(t, set()).add(c)
            for gi, g in enumerate(groups):
                for t in g:
                    self._post.setdefault(t, {}).setdefault(c, set()).add(gi)
                    self._by64.setdefault(tok64(t), set()).add(t)
                    if t not in self._prf:
                        self._prf[t] = AesPrf(t).unchecked

    def remove(self, key: Hashable) -> None:
        pf = self._filters.pop(key, None)
        if pf is None:
            return
        self._alist = self._afs = None
        for i, groups in enumerate(pf.scopes):
            c = (key, i)
            a, _ = self._clauses.pop(c)
            for t in groups[a]:
                _discard(self._anchor, t, c)
            for g in groups:
                for t in g:
                    post = self._post.get(t)
                    if post is not None:
                        post.pop(c, None)
                        if not post:
                            del self._post[t]
                            _discard(self._by64, tok64(t), t)

    def match(self, pe: TokenEvent) -> set[Hashable]:
        if pe.mode == "deterministic":
            return self._match_det(pe)
        nonce, tags = pe.nonce, pe.tagset
        if len(nonce) != NONCE_BYTES:
            raise ValidationError("psguard nonce has the wrong length for its mode")
        out: set[Hashable] = set()
        rest: list[frozenset[Clause]] = []
        # stage 1: the anchor tokens (psguard.txt §4.1 F_T(r), one kept AES context each), in
        # one tight loop: a token's tag is the first 64 bits of its PRF block
        for prf, clauses, single in self._anchor_list():
            if _first64(prf(nonce))[0] in tags:
                if single:  # every clause of this anchor has one group (a topic filter)
                    out.update(c[0] for c in clauses)
                else:
                    rest.append(clauses)
        self.evaluations += len(self._anchor)
        if not rest:
            return out
        cache: dict[bytes, bool] = {}
        prfs = self._prf

        def met(t: bytes) -> bool:
            hit = cache.get(t)
            if hit is None:
                self.evaluations += 1
                hit = cache[t] = _first64(prfs[t](nonce))[0] in tags
            return hit

        for clauses in rest:  # stage 2: the other groups of clauses whose anchor met
            for c in clauses:
                a, groups = self._clauses[c]
                if len(groups) == 1 or all(
                    any(met(x) for x in g) for j, g in enumerate(groups) if j != a
                ):
                    out.add(c[0])
        return out

    def _anchor_list(self) -> list[tuple[Callable[[bytes], bytes], frozenset[Clause], bool]]:
        """``(F_T, clauses, all single-group)`` per anchor token, rebuilt after a change."""
        al = self._alist
        if al is None:
            al = self._alist = [
                (self._prf[t], frozenset(cs), all(len(self._clauses[c][1]) == 1 for c in cs))
                for t, cs in self._anchor.items()
            ]
        return al

    def _match_det(self, pe: TokenEvent) -> set[Hashable]:
        met: dict[Clause, set[int]] = {}
        for tag in pe.tagset:
            for t in self._by64.get(tag, ()):
                for c, gis in self._post[t].items():
                    met.setdefault(c, set()).update(gis)
        return {c[0] for c, gis in met.items() if len(gis) == len(self._clauses[c][1])}

    def match_batch(self, pes: Sequence[TokenEvent]) -> list[set[Hashable]]:
        """``[match(pe) for pe in pes]``, evaluating each subscription token over every nonce
        of the batch's randomized events in one AES call per token (two stages)."""
        out: list[set[Hashable]] = [set() for _ in pes]
        rnd = [i for i, pe in enumerate(pes) if pe.mode == "randomized"]
        for i, pe in enumerate(pes):
            if pe.mode == "deterministic":
                out[i] = self._match_det(pe)
        if not rnd or not self._anchor:
            return out
        if len(rnd) < self.batch_min:  # numpy's set-up outweighs the AES calls it saves
            for i in rnd:
                out[i] = self.match(pes[i])
            return out
        nonces = b"".join([pes[i].nonce for i in rnd])
        if len(nonces) != NONCE_BYTES * len(rnd):
            raise ValidationError("psguard nonce has the wrong length for its mode")
        tags = [pes[i].tags for i in rnd]
        al = self._anchor_list()
        self.evaluations += len(al)
        # stage 1: every anchor token over every nonce (one AES call per token), compared
        # in one block against the events' tags
        cand: list[list[frozenset[Clause]]] = [[] for _ in rnd]
        for e, t in match_randomized(nonces, tags, (), prfs=self._anchor_prfs):
            _, clauses, single = al[t]
            if single:  # a topic filter: its clauses are met
                out[rnd[e]].update(c[0] for c in clauses)
            else:
                cand[e].append(clauses)
        if not any(cand):
            return out
        # stage 2: the other groups of the clauses whose anchor met
        clauses_of = self._clauses
        rest = sorted({x for cl in cand for cs in cl for c in cs
                       for j, g in enumerate(clauses_of[c][1]) if j != clauses_of[c][0]
                       for x in g})  # fmt: skip
        self.evaluations += len(rest)
        met: list[set[bytes]] = [set() for _ in rnd]
        prf = self._prf
        for e, t in match_randomized(nonces, tags, rest, prfs=[prf[t] for t in rest]):
            met[e].add(rest[t])
        for e, cl in enumerate(cand):
            m = met[e]
            for cs in cl:
                for c in cs:
                    a, groups = clauses_of[c]
                    if all(not m.isdisjoint(g) for j, g in enumerate(groups) if j != a):
                        out[rnd[e]].add(c[0])
        return out

    @property
    def _anchor_prfs(self) -> list[Callable[[bytes], bytes]]:
        """``F_T`` of every anchor token, in :meth:`_anchor_list` order."""
        al = self._anchor_list()
        fs = self._afs
        if fs is None:
            fs = self._afs = [a[0] for a in al]
        return fs


def _discard(d: dict[Any, set[Any]], k: Any, v: Any) -> None:
    s = d.get(k)
    if s is not None:
        s.discard(v)
        if not s:
            del d[k]


# -- broker face ----------------------------------------------------------------------------------


class TokenRouting:
    """The routing half of a broker scheme whose filters and events are PSGuard tokens (the
    psguard and default profiles): decoding, covering, matching, outgoing unchanged."""

    rewrites_outgoing = False
    #: the last frozen routing part decoded and its TokenEvent: the core decodes a
    #: publication's routing just before its guards run, which then need it again
    _last_decoded: tuple[Any, TokenEvent | None] = (None, None)

    def decode_filter(self, wire: Mapping[str, Any]) -> TokenFilter:
        return parse_filter(wire)

    def decode_event(self, routing: Mapping[str, Any]) -> TokenEvent:
        te = parse_routing(routing)
        if type(routing) is MappingProxyType:  # immutable (the core's frozen wire form)
            self._last_decoded = (routing, te)
        return te

    def decoded(self, routing: Mapping[str, Any]) -> TokenEvent | None:
        """``decode_event(routing)``'s result if this very (immutable) routing part was the
        last one decoded, else None."""
        last, te = self._last_decoded
        return te if last is routing else None

    def covers(self, f1: TokenFilter, f2: TokenFilter) -> bool:
        return bool(f2.scopes) and f1.canonical == f2.canonical

    def broker_match(self, pf: TokenFilter, pe: TokenEvent) -> bool:
        return broker_match(pf.as_rows(), pe.as_record())

    def new_matcher(self) -> Matcher:
        return TokenMatcher()

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message
