"""The psguard profile on the broker network: PSGuard (:mod:`pubguard.schemes.psguard`) as a
:class:`~pubguard.schemes.base.ClientScheme` and a :class:`~pubguard.schemes.base.BrokerScheme`.

Theory of operation
-------------------
:mod:`pubguard.schemes.psguard` holds the profile as pure functions (publisher, KDC authority,
record signature check, counting match); this module only maps them onto the broker's wire and
hooks, so the Spark pipeline and the broker network run the same cryptography.

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

Broker check: publications must carry a valid signature of a known publisher and a timestamp
within ``max_delay`` (:func:`~pubguard.schemes.psguard.check_record`): FORGED, then STALE.
PSGuard has no subscription guard: a subscription is only tokens, and a subscriber without the
KDC's keys can neither compute them nor open what they would match.

Key service (:class:`PSGuardKeyService`): the KDC's subscriber and publisher faces for one
deployment. It refuses filters no policy entry of the subscriber covers (DropError
UNAUTHORISED), gives publishers key trees only for their scopes, and changes keys per epoch
(psguard.txt §3.2): a client renews its filters' keys at an epoch change, a withdrawn filter
is not renewed, so its holder cannot read the new epoch's events.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any, Final, cast

from pubguard.crypto import H, SigningKey, VerifyKey, prf_aes_blocks
from pubguard.errors import DropError, DropReason, InvalidToken, KeyError_, ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import Event, Filter
from pubguard.schemes.base import CheckContext, Matcher, ProtectedEvent, ProtectedFilter
from pubguard.schemes.plain import new_event_id
from pubguard.schemes.psguard import (
    DEFAULT_MAX_DELAY_MS,
    MODES,
    PROFILE,
    Authority,
    FilterKeys,
    ProtectedFilterRows,
    ProtectedRecord,
    Publisher,
    Schema,
    broker_match,
    check_record,
    decode_secrets,
    encode_secrets,
    verify_record,
)
from pubguard.schemes.tokens import NONCE_BYTES, TOKEN_BYTES, match_randomized, tok64

__all__ = [
    "DEFAULT_EPOCH_LENGTH",
    "MAX_EVENT_TAGS",
    "MAX_FILTER_TOKENS",
    "PSGUARD",
    "PSGuardBroker",
    "PSGuardClient",
    "PSGuardKeyService",
    "TokenEvent",
    "TokenFilter",
    "TokenMatcher",
    "TokenRouting",
    "filter_to_wire",
    "parse_filter",
    "parse_routing",
    "record_from_wire",
    "record_to_wire",
]

PSGUARD: Final = PROFILE
DEFAULT_EPOCH_LENGTH: Final = 30 * 86400.0  # psguard.txt §3.2 rekeying epochs (as eventguard §4.8)
MAX_FILTER_TOKENS: Final = 4096  # tokens one subscription may carry (bounded broker memory)
MAX_SCOPES: Final = 256
MAX_EVENT_TAGS: Final = 4096  # tags one publication may carry
_MODE_WIRE: Final = {"randomized": "r", "deterministic": "d"}
_MODE_NAME: Final = {v: k for k, v in _MODE_WIRE.items()}
_RECORD_META: Final = frozenset({"p", "ts", "e", "h", "s", "sig"})


# -- wire forms -------------------------------------------------------------------------------


def _bytes(v: Any, what: str) -> bytes:
    if not isinstance(v, bytes | bytearray):
        raise ValidationError(f"psguard {what} must be bytes")
    return bytes(v)


def _int(v: Any, what: str) -> int:
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


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """A publication's routing part as a broker decodes it."""

    mode: str
    nonce: bytes
    tags: tuple[int, ...]
    tagset: frozenset[int]

    def as_record(self) -> ProtectedRecord:
        """Routing fields only (for :func:`~pubguard.schemes.psguard.broker_match`)."""
        return ProtectedRecord("", "", 0, 0, self.mode, self.nonce, self.tags, b"", (), b"")


def parse_routing(routing: Mapping[str, Any]) -> TokenEvent:
    if not isinstance(routing, Mapping) or set(routing) != {"m", "n", "t"}:
        raise ValidationError("psguard routing is exactly {m, n, t}")
    mode = _MODE_NAME.get(routing["m"]) if isinstance(routing["m"], str) else None
    if mode is None:
        raise ValidationError("psguard routing mode must be 'r' or 'd'")
    nonce = _bytes(routing["n"], "nonce")
    if len(nonce) != (NONCE_BYTES if mode == "randomized" else 0):
        raise ValidationError("psguard nonce has the wrong length for its mode")
    raw = _bytes(routing["t"], "tags")
    if len(raw) % 8 or len(raw) // 8 > MAX_EVENT_TAGS:
        raise ValidationError("psguard tags must be whole int64 values, at most 4096")
    tags = struct.unpack(f">{len(raw) // 8}q", raw)
    return TokenEvent(mode, nonce, tags, frozenset(tags))


def record_from_wire(
    event_id: str, routing: Mapping[str, Any], body: bytes, meta: Mapping[str, Any]
) -> ProtectedRecord:
    """The signed record back from a publication (strict: ValidationError on any deviation)."""
    te = parse_routing(routing)
    if not isinstance(meta, Mapping) or not _RECORD_META <= set(meta):
        raise ValidationError("psguard meta needs p, ts, e, h, s, sig")
    pub = meta["p"]
    if not isinstance(pub, str) or not pub:
        raise ValidationError("psguard publisher must be a non-empty string")
    epoch = _int(meta["e"], "epoch")
    if epoch < 0:
        raise ValidationError("psguard epoch must be >= 0")
    return ProtectedRecord(
        event_id, pub, _int(meta["ts"], "timestamp"), epoch, te.mode, te.nonce, te.tags,
        _bytes(meta["h"], "hint"), decode_secrets(_bytes(meta["s"], "secrets")),
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


class TokenMatcher:
    """Filter index over :class:`TokenFilter` (see the module docstring for the two stages)."""

    __slots__ = ("_anchor", "_by64", "_clauses", "_filters", "_post", "evaluations")

    def __init__(self) -> None:
        self._filters: dict[Hashable, TokenFilter] = {}
        self._clauses: dict[Clause, tuple[int, tuple[frozenset[bytes], ...]]] = {}
        self._anchor: dict[bytes, set[Clause]] = {}  # anchor token -> clauses
        self._post: dict[bytes, dict[Clause, set[int]]] = {}  # token -> clause -> groups
        self._by64: dict[int, set[bytes]] = {}
        self.evaluations = 0  # F_T(r) evaluations (AES calls in single-event matching)

    def __len__(self) -> int:
        return len(self._filters)

    def add(self, key: Hashable, pf: TokenFilter) -> None:
        self.remove(key)
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

    def remove(self, key: Hashable) -> None:
        pf = self._filters.pop(key, None)
        if pf is None:
            return
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
        cache: dict[bytes, bool] = {}
        nonce, tags = pe.nonce, pe.tagset

        def met(t: bytes) -> bool:
            hit = cache.get(t)
            if hit is None:
                self.evaluations += 1
                hit = cache[t] = tok64(prf_aes_blocks(t, nonce)) in tags
            return hit

        out: set[Hashable] = set()
        for t, clauses in self._anchor.items():
            if met(t):
                for c in clauses:
                    a, groups = self._clauses[c]
                    if all(any(met(x) for x in g) for j, g in enumerate(groups) if j != a):
                        out.add(c[0])
        return out

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
        nonces = b"".join(pes[i].nonce for i in rnd)
        tags = [pes[i].tags for i in rnd]
        anchors = list(self._anchor)
        self.evaluations += len(anchors)
        cand: list[set[Clause]] = [set() for _ in rnd]
        for e, t in match_randomized(nonces, tags, anchors):
            cand[e] |= self._anchor[anchors[t]]
        rest = sorted({x for cs in cand for c in cs for j, g in enumerate(self._clauses[c][1])
                       if j != self._clauses[c][0] for x in g})  # fmt: skip
        self.evaluations += len(rest)
        met: list[set[bytes]] = [set() for _ in rnd]
        for e, t in match_randomized(nonces, tags, rest) if rest else ():
            met[e].add(rest[t])
        for e, cs in enumerate(cand):
            m = met[e]
            for c in cs:
                a, groups = self._clauses[c]
                if all(not m.isdisjoint(g) for j, g in enumerate(groups) if j != a):
                    out[rnd[e]].add(c[0])
        return out


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

    def decode_filter(self, wire: Mapping[str, Any]) -> TokenFilter:
        return parse_filter(wire)

    def decode_event(self, routing: Mapping[str, Any]) -> TokenEvent:
        return parse_routing(routing)

    def covers(self, f1: TokenFilter, f2: TokenFilter) -> bool:
        return bool(f2.scopes) and f1.canonical == f2.canonical

    def broker_match(self, pf: TokenFilter, pe: TokenEvent) -> bool:
        return broker_match(pf.as_rows(), pe.as_record())

    def new_matcher(self) -> Matcher:
        return TokenMatcher()

    def outgoing(self, message: Any, ctx: CheckContext) -> Any | None:
        return message


class PSGuardBroker(TokenRouting):
    """Broker face of the psguard profile. ``publishers``: name -> Ed25519 key of every
    publisher whose records are routed; ``max_delay_ms``: the timestamp window."""

    profile = PSGUARD

    def __init__(
        self,
        publishers: Mapping[str, VerifyKey] = (),  # type: ignore[assignment]
        *,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
    ) -> None:
        if max_delay_ms <= 0:
            raise ValidationError("max_delay_ms must be positive")
        self.publishers: dict[str, VerifyKey] = dict(publishers)
        self.max_delay_ms = max_delay_ms

    def add_publisher(self, name: str, key: VerifyKey) -> None:
        self.publishers[name] = key

    def broker_check(self, message: Any, ctx: CheckContext) -> DropReason | None:
        if message.op != "publish":
            return None  # psguard.txt: keys, not brokers, enforce who may subscribe
        rec = record_from_wire(message.event_id, message.routing, message.body, message.meta)
        return check_record(rec, self.publishers, now_ms=int(ctx.now * 1000),
                            max_delay_ms=self.max_delay_ms)  # fmt: skip


# -- key service and client face ----------------------------------------------------------------


class _ScopedKDC:
    """The KDC as a publisher sees it: key trees of its own scopes only."""

    __slots__ = ("_kdc", "_scopes")

    def __init__(self, kdc: KDC, scopes: frozenset[str] | None) -> None:
        self._kdc, self._scopes = kdc, scopes

    def __repr__(self) -> str:
        return "_ScopedKDC(<secret>)"

    def _allow(self, w: str) -> None:
        if self._scopes is not None and w not in self._scopes:
            raise DropError(DropReason.UNAUTHORISED, "no publish right for this scope")

    def for_epoch(self, epoch: int) -> _ScopedKDC:
        return _ScopedKDC(self._kdc.for_epoch(epoch), self._scopes)

    def topic(self, w: str, publisher: str | None = None) -> Any:
        self._allow(w)
        return self._kdc.topic(w, publisher)

    def topic_token(self, w: str) -> bytes:
        self._allow(w)
        return self._kdc.topic_token(w)


class PSGuardKeyService:
    """The KDC of one deployment (psguard.txt §3): tokens and keys for authorised filters,
    scoped key trees for publishers, one key generation per epoch.

    ``subscribers``: name -> filters it may subscribe to (a request must be covered by one of
    them); None allows every filter. ``publishers``: name -> scopes (topics, or
    ``"\\x01type:<name>"`` for types without a topic) it may publish on; None allows all."""

    def __init__(
        self,
        kdc: KDC,
        schema: Schema,
        *,
        subscribers: Mapping[str, Iterable[Filter | str]] | None = None,
        publishers: Mapping[str, Iterable[str]] | None = None,
        epoch_length: float = DEFAULT_EPOCH_LENGTH,
        origin: float = 0.0,
    ) -> None:
        if not epoch_length > 0:
            raise ValidationError("epoch_length must be positive")
        self._kdc, self.schema = kdc, schema
        self.epoch_length, self.origin = float(epoch_length), float(origin)
        self._subs: dict[str, list[Filter]] | None = None
        if subscribers is not None:
            self._subs = {n: [_as_filter(f) for f in fs] for n, fs in subscribers.items()}
        self._pubs = (
            None if publishers is None else {n: frozenset(s) for n, s in publishers.items()}
        )
        self._authorities: dict[int, Authority] = {}

    def __repr__(self) -> str:
        return f"PSGuardKeyService(types={sorted(self.schema.types)})"

    def epoch_at(self, now: float) -> int:
        return max(0, int((now - self.origin) // self.epoch_length))

    def authority(self, epoch: int) -> Authority:
        a = self._authorities.get(epoch)
        if a is None:
            if len(self._authorities) > 8:
                self._authorities.clear()
            a = self._authorities[epoch] = Authority(self._kdc, self.schema, epoch=epoch)
        return a

    def allowed(self, subscriber: str, f: Filter) -> bool:
        if self._subs is None:
            return True
        return any(g.covers(f) for g in self._subs.get(subscriber, ()))

    def authorise(
        self, subscriber: str, f: Filter, *, epoch: int
    ) -> tuple[ProtectedFilterRows, FilterKeys]:
        """psguard.txt §3.1/§4.1: the filter's routing tokens and its authorisation keys."""
        if not self.allowed(subscriber, f):
            raise DropError(DropReason.UNAUTHORISED, f"{subscriber} may not subscribe to {f}")
        a = self.authority(epoch)
        return a.protect_filter(f), a.authorise(f)

    def set_subscriber(self, subscriber: str, filters: Iterable[Filter | str]) -> None:
        """Replace a subscriber's rights (an empty list revokes it from the next epoch on)."""
        if self._subs is None:
            self._subs = {}
        self._subs[subscriber] = [_as_filter(f) for f in filters]

    def publisher(
        self, name: str, signing_key: Any, *, epoch: int, mode: str = "randomized"
    ) -> Publisher:
        if self._pubs is not None and name not in self._pubs:
            raise DropError(DropReason.UNAUTHORISED, f"{name} may not publish")
        scoped = _ScopedKDC(self._kdc, None if self._pubs is None else self._pubs[name])
        return Publisher(cast(KDC, scoped), self.schema, name=name, signing_key=signing_key,
                         epoch=epoch, mode=mode)  # fmt: skip


def _as_filter(f: Filter | str) -> Filter:
    return Filter.parse(f) if isinstance(f, str) else f


def filter_id(f: Filter) -> str:
    """A stable id for a filter without one (the KDC needs ids; brokers never see them)."""
    return f.id or "f-" + H(str(f).encode())[:8].hex()


class _Held:
    __slots__ = ("filter", "keys")

    def __init__(self, f: Filter, keys: FilterKeys) -> None:
        self.filter, self.keys = f, keys


class PSGuardClient:
    """A publisher and/or subscriber on the psguard profile. ``keys`` is the KDC (a
    :class:`PSGuardKeyService` or a proxy to one); ``signing_key`` the publisher's record key;
    ``publisher_keys`` lets a subscriber also check publishers' signatures on receipt (the
    AEAD under ``K(e)`` already authenticates the content to holders of ``K(e)``)."""

    profile = PSGUARD

    def __init__(
        self,
        name: str,
        keys: PSGuardKeyService,
        *,
        signing_key: SigningKey | None = None,
        mode: str = "randomized",
        publisher_keys: Mapping[str, VerifyKey] | None = None,
        sign_records: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError("client name must be a non-empty string")
        if mode not in MODES:
            raise ValidationError(f"unknown psguard mode {mode!r} (valid: {', '.join(MODES)})")
        self.name, self.service, self.mode = name, keys, mode
        self._sk = signing_key
        self._signer: Any = signing_key if sign_records else _NullSigner()
        self.publisher_keys = dict(publisher_keys or {})
        self._held: dict[tuple[str, int], _Held] = {}  # (str(filter), epoch) -> authorisation
        self._pub: tuple[int, Publisher] | None = None

    def __repr__(self) -> str:
        return f"PSGuardClient({self.name!r}, filters={len(self._held)})"

    @property
    def verify_key(self) -> VerifyKey | None:
        return None if self._sk is None else self._sk.public

    # -- subscriber -----------------------------------------------------------------------------
    def authorise(self, f: Filter, *, now: float) -> ProtectedFilterRows:
        f = f if f.id else f.with_id(filter_id(f))
        rows, keys = self.service.authorise(self.name, f, epoch=self.service.epoch_at(now))
        self._hold(f, keys)
        return rows

    def _hold(self, f: Filter, keys: FilterKeys) -> None:
        """Keep ``f``'s keys of this epoch and of the one before (events still in flight at an
        epoch change open with the old keys; older ones are dropped)."""
        self._held[(str(f), keys.epoch)] = _Held(f, keys)
        for k in [k for k in self._held if k[0] == str(f) and k[1] < keys.epoch - 1]:
            del self._held[k]

    def protect_filter(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter(filter_to_wire(self.authorise(f, now=now)))

    def protect_advertisement(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> ProtectedFilter:
        return ProtectedFilter({"g": []})

    def unsubscribe_meta(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> dict[str, Any]:
        """Forget ``f``'s keys: it is not renewed at the next epoch."""
        for k in [k for k in self._held if k[0] == str(f)]:
            del self._held[k]
        return {}

    def unadvertise_meta(
        self, f: Filter, *, now: float, rng: Random | None = None
    ) -> dict[str, Any]:
        return {}  # PSGuard has no advertisements

    def renew(self, *, now: float) -> list[Filter]:
        """Fetch the current epoch's keys for every held filter; returns the filters the KDC
        refused (they are dropped)."""
        epoch = self.service.epoch_at(now)
        latest: dict[str, _Held] = {}
        for (fk, _), h in self._held.items():
            if fk not in latest or h.keys.epoch > latest[fk].keys.epoch:
                latest[fk] = h
        lost = []
        for h in latest.values():
            if h.keys.epoch < epoch:
                try:
                    self._hold(h.filter, self.service.authorise(self.name, h.filter,
                                                                epoch=epoch)[1])  # fmt: skip
                except DropError:
                    lost.append(h.filter)
        return lost

    def open_record(self, rec: ProtectedRecord, *, now: float) -> Event:
        """Verify (when the publisher is known) and decrypt; InvalidToken if no held filter's
        keys open it or the subscriber's own filter rejects it."""
        vk = self.publisher_keys.get(rec.publisher)
        if vk is not None and not verify_record(rec, {rec.publisher: vk}):
            raise InvalidToken()
        newest = max((k[1] for k in self._held), default=rec.epoch)
        if newest < rec.epoch <= self.service.epoch_at(now):
            self.renew(now=now)  # a new epoch began: fetch its keys (refused if withdrawn)
        for h in list(self._held.values()):
            if h.keys.epoch != rec.epoch:
                continue
            try:
                ev = h.keys.open_matching(rec)
            except InvalidToken:
                continue
            if ev is not None:
                return ev
        raise InvalidToken()

    def open_event(
        self,
        event_id: str,
        routing: Mapping[str, Any],
        body: bytes,
        meta: Mapping[str, Any],
        *,
        now: float,
    ) -> Event:
        try:
            rec = record_from_wire(event_id, routing, body, meta)
        except ValidationError:
            raise InvalidToken() from None
        return self.open_record(rec, now=now)

    # -- publisher ------------------------------------------------------------------------------
    def publisher(self, *, now: float) -> Publisher:
        """The :class:`~pubguard.schemes.psguard.Publisher` of the current epoch."""
        epoch = self.service.epoch_at(now)
        if self._pub is None or self._pub[0] != epoch:
            if self._signer is None:
                raise KeyError_("this client has no signing key: it cannot publish")
            pub = self.service.publisher(self.name, self._signer, epoch=epoch, mode=self.mode)
            self._pub = (epoch, pub)
        return self._pub[1]

    def record(self, event: Event, *, now: float, rng: Random | None = None) -> ProtectedRecord:
        """psguard.txt §4.1: the protected record of ``event`` (an id is drawn if missing)."""
        if event.id is None:
            event = Event(event.attrs, id=new_event_id(rng), type=event.type, payload=event.payload)
        return self.publisher(now=now).protect(event, now_ms=int(now * 1000), rng=rng)

    def protect_event(
        self, event: Event, *, now: float, rng: Random | None = None
    ) -> ProtectedEvent:
        return record_to_wire(self.record(event, now=now, rng=rng))


class _NullSigner:
    """For profiles that sign something else than the record (the default profile signs a
    Merkle root over a batch of records): ``sig`` stays empty and costs nothing."""

    __slots__ = ()

    def sign(self, message: bytes) -> bytes:
        return b""


def make_scheme(publishers: Mapping[str, VerifyKey], **options: Any) -> PSGuardBroker:
    """The broker scheme for a :class:`~pubguard.schemes.SchemeRegistry` (see the class)."""
    return PSGuardBroker(publishers, **options)
