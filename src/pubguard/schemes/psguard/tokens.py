"""PSGuard routing tokens: what an event and a filter look like to a broker.

Theory of operation (psguard.txt §4.1 "Tokenization", §3.1 NAKT). Every routable attribute of an
event becomes a small set of *tokens*, keyed PRF outputs a broker can compare but not invert;
every constraint of a filter becomes a set of tokens such that the constraint holds for the
event exactly when the two sets meet:

=====================  ==============================  ======================================
attribute kind         event emits                     constraint emits
=====================  ==============================  ======================================
``topic``              ``T(w)`` (KDC ``topic_token``)   ``topic = w`` -> ``T(w)``
numeric (NAKT)         node token of every prefix of    the minimal NAKT cover of the allowed
                       ``ktid(v)``, root included       interval(s) (``< <= > >= = !=``,
                                                        merged per attribute)
``category``           node token of every ancestor     ``prefix "/a/b/"`` -> node ``(a, b)``
                       of the leaf path, root included
``prefix``/``suffix``  chain token of every prefix      ``prefix p`` / ``suffix s`` -> chain
                       (suffix) of the value            token of ``p`` / ``s``
any routable           equality token, exists token     ``= v`` -> equality token,
                                                        ``exists`` -> exists (or root) token
=====================  ==============================  ======================================

Node tokens are ``KH_{K(w)}(0x00 token 0x00 kind 0x00 attr 0x00 node)`` from
:meth:`pubguard.keys.kdc.TopicKeys.node_token`: scoped under the topic key, so two topics never
share a token, and computable only by holders of ``K(w)`` (publishers, the KDC). Equality and
exists tokens are category-tree node tokens under the reserved names ``\\x01eq`` and
``\\x01exists`` (category names are refused if they contain ``\\x01``).

Within one constraint group the tokens are *disjoint* subtrees (a minimal cover) while an
event's tokens of one attribute form one root-to-leaf chain, so an event meets each group in
at most one token. A filter of ``n`` groups matches when an event meets ``n`` of its tokens:
the counting matcher the pipeline runs as an equi-join then ``count == n``.

Tokens are truncated to 128 bits (:data:`TOKEN_BYTES`). ``deterministic`` mode ships them as
is (the broker sees equal tokens for equal values: linkable, frequency analysable);
``randomized`` mode ships ``<r, F_T(r)>`` with ``F`` = AES-128 keyed by the token
(:func:`~pubguard.crypto.prf_aes_blocks`), fresh ``r`` per event, so two events on the same
topic are unlinkable; a broker evaluates one subscription token over all nonces of a batch in
one cipher call (:func:`match_randomized`; :class:`TokenSet` keeps a broker's tokens ready, and
runs in ``pubguard._native`` when the native backend is active). Joins use :func:`tok64`, the first 64 bits as a
signed integer; a chance collision (~2^-64 per pair) can only cause a spurious delivery, which
the subscriber's AEAD and post-filter reject.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from pubguard import native as nb
from pubguard.crypto import AesPrf, prf_aes_blocks
from pubguard.errors import ValidationError
from pubguard.keys.kdc import TopicKeys
from pubguard.keys.nakt import ktid, nakt_cover, nakt_depth
from pubguard.model import AttributeSpec, Constraint, Op
from pubguard.model.values import type_class

__all__ = [
    "EQ_NODE",
    "EXISTS_NODE",
    "NONCE_BYTES",
    "TOKEN_BYTES",
    "AttrKind",
    "TokenSet",
    "NodeGrant",
    "attr_kind",
    "category_path",
    "constraint_nodes",
    "constraint_tokens",
    "event_attr_nodes",
    "event_attr_tokens",
    "match_randomized",
    "numeric_intervals",
    "randomize",
    "tok64",
    "typed_value",
]

TOKEN_BYTES = 16
NONCE_BYTES = 16
EQ_NODE = "\x01eq"
EXISTS_NODE = "\x01exists"

AttrKind = str  # "topic" | "numeric" | "category" | "prefix" | "suffix" | "plain"


def attr_kind(spec: AttributeSpec) -> AttrKind:
    """How PSGuard tokenises a routable attribute (from its schema entry)."""
    if spec.kind == "topic":
        return "topic"
    if spec.range_size is not None:
        if spec.type != "int":
            raise ValidationError(
                f"psguard: numeric key trees need int attributes; {spec.name!r} is {spec.type}"
            )
        nakt_depth(spec.range_size, spec.least_count or 1)
        return "numeric"
    if spec.kind in ("category", "prefix", "suffix"):
        if spec.type != "str":
            raise ValidationError(f"psguard: {spec.kind} attribute {spec.name!r} must be str")
        return spec.kind
    return "plain"


def tok64(token: bytes) -> int:
    """The join key of a token: its first 64 bits as a signed integer."""
    return int.from_bytes(token[:8], "big", signed=True)


def typed_value(v: object) -> str:
    """Canonical text of a value within its type class (20 and 20.0 are one number)."""
    tc = type_class(v)
    if tc == "bool":
        return "b:1" if v else "b:0"
    if tc == "num":
        f = float(v)  # type: ignore[arg-type]
        if f.is_integer() and abs(f) < 2**63:
            return f"n:{int(f)}"
        return f"n:{f!r}"
    if tc == "str":
        return f"s:{v}"
    raise ValidationError(f"not an attribute value: {v!r}")


def category_path(value: object) -> tuple[str, ...]:
    """``"/a/b/"`` -> ``("a", "b")``; the root ``"/"`` -> ``()``."""
    if not isinstance(value, str) or not value.startswith("/") or not value.endswith("/"):
        raise ValidationError(f"a category is a node path like '/a/b/', got {value!r}")
    parts = tuple(p for p in value[1:-1].split("/")) if value != "/" else ()
    if any(not p or "\x01" in p for p in parts):
        raise ValidationError(f"bad category path {value!r}")
    return parts


def _t(raw: bytes) -> bytes:
    return raw[:TOKEN_BYTES]


@dataclass(frozen=True, slots=True)
class NodeGrant:
    """One node of an authorisation: which tree, which node (for keys and tokens)."""

    kind: str  # numeric | category | prefix | suffix
    attr: str
    node: str | tuple[str, ...]


def event_attr_nodes(spec: AttributeSpec, value: object) -> list[NodeGrant]:
    """The tree nodes one routable non-topic attribute value of an event sits under (its
    tokens are these nodes' tokens; the plaintext baseline joins on the nodes themselves)."""
    kind = attr_kind(spec)
    a = spec.name
    if kind == "numeric":
        leaf = ktid(_int_in_range(spec, value), spec.range_size, spec.least_count)  # type: ignore[arg-type]
        return [NodeGrant("numeric", a, leaf[:i]) for i in range(len(leaf) + 1)]
    out = [NodeGrant("category", a, (EQ_NODE, typed_value(value)))]
    if kind == "category":
        p = category_path(value)
        out += [NodeGrant("category", a, p[:i]) for i in range(len(p) + 1)]
    elif kind == "prefix":
        s = str(value)
        out += [NodeGrant("prefix", a, s[:i]) for i in range(len(s) + 1)]
    elif kind == "suffix":
        s = str(value)
        out += [NodeGrant("suffix", a, s[i:]) for i in range(len(s) + 1)]
    else:
        out.append(NodeGrant("category", a, (EXISTS_NODE,)))
    return out


def event_attr_tokens(tk: TopicKeys, spec: AttributeSpec, value: object) -> list[bytes]:
    """Tokens of one routable non-topic attribute value of an event (scope ``tk``)."""
    return constraint_tokens(tk, event_attr_nodes(spec, value))


def _int_in_range(spec: AttributeSpec, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"psguard: attribute {spec.name!r} must be an int, got {value!r}")
    r = spec.range_size or 0
    if not 0 <= value < r:
        raise ValidationError(
            f"psguard: value {value} of {spec.name!r} is outside its key tree range [0, {r - 1}]"
        )
    return value


def numeric_intervals(cs: Iterable[Constraint], range_size: int) -> list[tuple[int, int]]:
    """The allowed values of a conjunction of numeric constraints on one attribute, as
    disjoint inclusive integer intervals within ``[0, range_size - 1]`` (empty: never)."""
    lo, hi = 0, range_size - 1
    holes: set[int] = set()
    for c in cs:
        if c.op is Op.EXISTS:
            continue
        v = c.value
        if type_class(v) != "num":
            return []  # a number never equals a string (Siena type classes)
        x = float(v)  # type: ignore[arg-type]
        match c.op:
            case Op.EQ:
                if not x.is_integer():
                    return []
                lo, hi = max(lo, int(x)), min(hi, int(x))
            case Op.NE:
                if x.is_integer():
                    holes.add(int(x))
            case Op.LT:
                hi = min(hi, math.ceil(x) - 1)
            case Op.LE:
                hi = min(hi, math.floor(x))
            case Op.GT:
                lo = max(lo, math.floor(x) + 1)
            case Op.GE:
                lo = max(lo, math.ceil(x))
            case _:
                raise ValidationError(
                    f"psguard: operator {c.op.value!r} does not apply to numeric {c.name!r}"
                )
    out: list[tuple[int, int]] = []
    start = lo
    for h in sorted(x for x in holes if lo <= x <= hi):
        if start <= h - 1:
            out.append((start, h - 1))
        start = h + 1
    if start <= hi:
        out.append((start, hi))
    return out


def constraint_nodes(
    spec: AttributeSpec, cs: Sequence[Constraint]
) -> tuple[list[NodeGrant], list[NodeGrant], bool]:
    """What one constraint group (all constraints of a filter on one routable non-topic
    attribute) grants: ``(token nodes, key nodes, exact)``.

    Token nodes are matched by brokers; key nodes are the authorisation keys the KDC issues
    (psguard.txt §3.1: the minimal cover for a range). They differ only for equality on tree
    attributes (matched by the equality token, keyed by the value's own tree node) and
    ``exists`` on plain attributes (keyed by the root). ``exact`` is False when the keys allow
    more values than the constraints (least-count snapping, several string constraints), so
    the subscriber post-filters. Raises ValidationError for an operator the attribute kind
    cannot tokenise (the profile mismatch the pipeline reports)."""
    kind, a = attr_kind(spec), spec.name
    if kind == "numeric":
        r, lc = spec.range_size or 0, spec.least_count or 1
        nodes: list[NodeGrant] = []
        exact = True
        # Snap every interval to whole least-count buckets first, then merge the ones that now
        # touch: covering them separately would grant one bucket twice (``age != 1`` gives
        # [0,0] and [2,R-1], both snapping onto bucket [0,lc-1]) or nested nodes, and an
        # event must meet exactly one token of the group.
        merged: list[tuple[int, int]] = []
        for lo, hi in numeric_intervals(cs, r):
            s_lo, s_hi = lo - lo % lc, hi - hi % lc + lc - 1
            exact = exact and (s_lo, s_hi) == (lo, hi)
            if merged and s_lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], s_hi))
            else:
                merged.append((s_lo, s_hi))
        for lo, hi in merged:
            nodes += [NodeGrant("numeric", a, n) for n in nakt_cover(lo, hi, r, lc)]
        return nodes, nodes, exact
    allowed = {
        "category": {Op.PREFIX, Op.EXISTS, Op.EQ},
        "prefix": {Op.PREFIX, Op.EXISTS, Op.EQ},
        "suffix": {Op.SUFFIX, Op.EXISTS, Op.EQ},
        "plain": {Op.EXISTS, Op.EQ},
    }[kind]
    bad = {c.op for c in cs} - allowed
    if bad:
        op = sorted(o.value for o in bad)[0]
        raise ValidationError(
            f"psguard cannot tokenise {a!r} {op} (a {kind} attribute supports "
            f"{', '.join(sorted(o.value for o in allowed))})"
        )
    eqs = [c for c in cs if c.op is Op.EQ]
    if eqs:  # an equality pins the value: the other constraints only filter
        v = eqs[0].value
        if len({typed_value(c.value) for c in eqs}) > 1 or not all(c.matches_value(v) for c in cs):
            return [], [], True  # unsatisfiable
        tok = [NodeGrant("category", a, (EQ_NODE, typed_value(v)))]
        if kind == "category":
            return tok, [NodeGrant("category", a, category_path(v))], True
        if kind in ("prefix", "suffix"):  # the value's chain node also opens its extensions
            return tok, [NodeGrant(kind, a, str(v))], False
        return tok, tok, True
    real = [c for c in cs if c.op is not Op.EXISTS]
    if not real:
        if kind == "plain":
            return [NodeGrant("category", a, (EXISTS_NODE,))], [NodeGrant("category", a, ())], True
        root = NodeGrant(kind, a, () if kind == "category" else "")
        return [root], [root], True
    # the most specific (longest) string constraint grants; the others post-filter
    best = max(real, key=lambda c: len(str(c.value)))
    exact = all(c.covers(best) for c in real)
    g = NodeGrant(kind, a, category_path(best.value) if kind == "category" else str(best.value))
    return [g], [g], exact


def constraint_tokens(tk: TopicKeys, grants: Sequence[NodeGrant]) -> list[bytes]:
    """Routing tokens of granted nodes (scope ``tk``)."""
    return [_t(tk.node_token(g.kind, g.attr, g.node)) for g in grants]


def randomize(
    tokens: Sequence[bytes], nonce: bytes, *, prfs: Sequence[AesPrf] | None = None
) -> list[bytes]:
    """psguard.txt §4.1: ``F_T(r)`` for each token ``T`` (AES-128 keyed by the token).

    ``prfs[i]``, when given, is ``AesPrf(tokens[i])``: a publisher that keeps its tokens' AES
    contexts for the epoch (psguard.txt §5.2.3 "with key caching") pays one block per token
    (~0.3 us) instead of a cipher set-up (~6 us); the outputs are the same."""
    if len(nonce) != NONCE_BYTES:
        raise ValidationError(f"nonce must be {NONCE_BYTES} bytes")
    if prfs is None:
        return [prf_aes_blocks(t, nonce) for t in tokens]
    if len(prfs) != len(tokens):
        raise ValidationError("randomize: one PRF context per token")
    return [f.unchecked(nonce) for f in prfs]  # one whole block: the nonce length is checked


#: token x event x tag comparisons up to which :func:`match_randomized` compares one dense
#: block (every token's PRF outputs against every event's tags) instead of sorting the tags
DENSE_COMPARE_MAX = 1 << 18


def match_randomized(
    nonces: bytes,
    tags: Sequence[Sequence[int]],
    tokens: Sequence[bytes],
    *,
    chunk: int = 64,
    prfs: Sequence[Callable[[bytes], bytes]] | None = None,
) -> list[tuple[int, int]]:
    """Broker side of randomized matching over one batch of events.

    ``nonces`` is the batch's nonces concatenated (16 bytes each), ``tags[i]`` event ``i``'s
    ``tok64(F_T(r_i))`` values, ``tokens`` the distinct subscription tokens. For each token,
    one AES call evaluates ``F_tok`` over every nonce of the batch (psguard.txt §4.1; the AES
    PRF makes a token nearly free per event); a hit is an ``(event index, token index)`` pair
    whose value is among that event's tags (first 64 bits compared, see the module notes),
    listed by token, then event. ``prfs[i]``, when given, is ``F_{tokens[i]}`` with its AES
    context kept (:class:`~pubguard.crypto.AesPrf`): a broker's long-lived index passes them
    (``tokens`` is then only counted).

    Small batches (most events carry one tag per routable attribute) compare one dense block,
    every token's outputs against every event's tags padded to the longest tag list, in a
    few numpy calls; larger ones sort the tags and binary-search each token's outputs."""
    n = len(nonces) // NONCE_BYTES
    nt = len(prfs) if prfs is not None else len(tokens)
    if n == 0 or not nt:
        return []
    counts = [len(t) for t in tags[:n]]
    width = max(counts)
    if width == 0:
        return []
    if nt * n * width <= DENSE_COMPARE_MAX:
        return _match_dense(nonces, tags, tokens, prfs, n, counts, width)
    return _match_sorted(nonces, tags, tokens, prfs, n, counts, chunk)


class TokenSet:
    """A broker's distinct subscription tokens, ready for randomized matching: one
    :meth:`match_batch` call per micro-batch of events (psguard.txt §4.1 ``<r, F_T(r)>``).

    With the native backend active at construction (:mod:`pubguard.native`), the AES key
    schedules live in ``pubguard._native.TokenSet`` and the whole batch (every token over every
    nonce, and the tag comparisons) is one native call; otherwise each token keeps its
    :class:`~pubguard.crypto.AesPrf` context and :func:`match_randomized` is the reference.
    ``prfs``, when given, are those contexts already set up (``F_{tokens[i]}``). Tokens are
    public routing values, but ``repr`` shows only their number."""

    __slots__ = ("_native", "_prfs", "tokens")

    def __init__(
        self, tokens: Sequence[bytes], *, prfs: Sequence[Callable[[bytes], bytes]] | None = None
    ) -> None:
        self.tokens = tuple(tokens)
        n = nb.NATIVE
        self._native = None if n is None else n.TokenSet(list(self.tokens))
        self._prfs: Sequence[Callable[[bytes], bytes]] | None = None
        if n is None:
            self._prfs = prfs if prfs is not None else [AesPrf(t).unchecked for t in self.tokens]

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"TokenSet(tokens={len(self.tokens)})"

    @property
    def is_native(self) -> bool:
        """Whether this set matches in ``pubguard._native``."""
        return self._native is not None

    def match_batch(self, nonces: bytes, tags: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """``match_randomized(nonces, tags, tokens)``: ``[(event index, token index)]`` by
        token, then event. ValidationError unless ``nonces`` is whole 16-byte nonces with a tag
        list for each."""
        if len(nonces) % NONCE_BYTES or len(tags) < len(nonces) // NONCE_BYTES:
            raise ValidationError("randomized match needs a 16-byte nonce and a tag list per event")
        core = self._native
        if core is None:
            return match_randomized(nonces, tags, (), prfs=self._prfs)
        try:
            return core.match_batch(nonces, tags)  # type: ignore[no-any-return]
        except TypeError:  # tag lists that are not lists/tuples of int (numpy arrays)
            return core.match_batch(nonces, [[int(x) for x in t] for t in tags])  # type: ignore[no-any-return]


def _prf_outputs(
    nonces: bytes,
    tokens: Sequence[bytes],
    prfs: Sequence[Callable[[bytes], bytes]] | None,
) -> bytes:
    """``F_T(r)`` for every token ``T`` then every nonce ``r`` (16 bytes each)."""
    if prfs is None:
        return b"".join([prf_aes_blocks(t, nonces) for t in tokens])
    return b"".join([f(nonces) for f in prfs])


def _match_dense(
    nonces: bytes,
    tags: Sequence[Sequence[int]],
    tokens: Sequence[bytes],
    prfs: Sequence[Callable[[bytes], bytes]] | None,
    n: int,
    counts: list[int],
    width: int,
) -> list[tuple[int, int]]:
    # A tag is the first 8 bytes of F_T(r) read as a big-endian int64 (tok64): compare the
    # bytes themselves, as native uint64 on both sides (equality does not care how they read)
    outs = np.frombuffer(_prf_outputs(nonces, tokens, prfs), dtype=np.uint64)
    v = outs.reshape(-1, n, 2)[:, :, 0]  # (tokens, events): each output's first 8 bytes
    if width == 1 and min(counts) == 1:  # one tag per event: one comparison per output
        tb = struct.pack(f">{n}q", *[t[0] for t in tags[:n]])
        hit = v == np.frombuffer(tb, dtype=np.uint64)
    else:  # pad each event's tags with its first (a repeat adds no hit); mask tagless ones
        flat = [
            x
            for t in tags[:n]
            for x in (tuple(t) + (t[0],) * (width - len(t)) if len(t) else (0,) * width)
        ]
        tm = np.frombuffer(struct.pack(f">{len(flat)}q", *flat), dtype=np.uint64)
        hit = (v[:, :, None] == tm.reshape(n, width)[None, :, :]).any(axis=2)
        if min(counts) == 0:
            hit &= np.array(counts, dtype=np.int64) > 0
    return [(x % n, x // n) for x in np.flatnonzero(hit).tolist()]


def _match_sorted(
    nonces: bytes,
    tags: Sequence[Sequence[int]],
    tokens: Sequence[bytes],
    prfs: Sequence[Callable[[bytes], bytes]] | None,
    n: int,
    counts: list[int],
    chunk: int,
) -> list[tuple[int, int]]:
    cnt = np.array(counts, dtype=np.int64)
    vals = np.concatenate([np.asarray(t, dtype=np.int64) for t in tags[:n]])
    owner = np.repeat(np.arange(n, dtype=np.int64), cnt)
    # sort by (value, owner): an event's hit is found even when another event has the
    # same value (a repeated nonce)
    order = np.lexsort((owner, vals))
    svals, sowner = vals[order], owner[order]
    out: list[tuple[int, int]] = []
    nt = len(prfs) if prfs is not None else len(tokens)
    ev = np.arange(n, dtype=np.int64)
    for start in range(0, nt, chunk):
        block_t = tokens[start : start + chunk] if prfs is None else ()
        block_f = prfs[start : start + chunk] if prfs is not None else None
        v = np.frombuffer(_prf_outputs(nonces, block_t, block_f), dtype=">i8")[::2]
        v = v.astype(np.int64)  # first 64 bits per block, as tok64
        k = len(v) // n
        evs = np.tile(ev, k)
        # the first position of (value, event) in the sorted (value, owner) pairs
        lo = np.searchsorted(svals, v, side="left")
        hi = np.searchsorted(svals, v, side="right")
        hit = np.zeros(len(v), dtype=bool)
        span = hi - lo
        one = span == 1
        hit[one] = sowner[lo[one]] == evs[one]
        for j in np.flatnonzero(span > 1).tolist():  # equal values in several events
            hit[j] = bool((sowner[lo[j] : hi[j]] == evs[j]).any())
        for x in np.flatnonzero(hit).tolist():
            t_idx, e_idx = divmod(x, n)
            out.append((e_idx, start + t_idx))
    return out


def pack_tags(tags: Sequence[bytes]) -> bytes:
    """Tags as one binary value (16 bytes each) for columnar storage."""
    return b"".join(tags)


def unpack_tags(blob: bytes) -> list[bytes]:
    if len(blob) % TOKEN_BYTES:
        raise ValidationError("tags blob is not a whole number of 16-byte tags")
    return [blob[i : i + TOKEN_BYTES] for i in range(0, len(blob), TOKEN_BYTES)]


def token_struct(tokens: Sequence[bytes]) -> bytes:
    """Length-prefixed concatenation (signature input)."""
    return struct.pack(">I", len(tokens)) + b"".join(tokens)
