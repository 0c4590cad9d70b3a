"""Broker-side guard building blocks shared by the eventguard, narada and default profiles.

Theory of operation
-------------------
Each class is one rule from one paper, small enough to compose (the ``default`` profile takes
EventGuard's signatures and flood containment with Narada's replay state and revocation):

- :func:`pack_fields`: an unambiguous, length-prefixed encoding of the fields a signature
  covers (no two field lists encode alike).
- :class:`TTLCache`: a bounded LRU whose entries expire (the project's one LRU,
  :class:`~pubguard.keys.cache.BoundedLru`); the verified-root / verified-permit cache. Verifying an Ed25519 signature costs ~110 us; a cache hit costs a dict lookup.
- :class:`SignedRootVerifier`: EventGuard's publication signature (eventguard.txt §4.4) with
  amortised signing: the signature is on a Merkle root (:mod:`pubguard.schemes.common.merkle`);
  verified ``(key, root)`` pairs are cached, so a batch costs one verification per broker.
- :class:`TimestampWindow`: the routing guard's freshness rule, block when
  ``|ct - ts| > max_delay`` (eventguard.txt §4.7).
- :class:`IdWindow`: identifiers seen in the last ``window`` seconds (eventguard.txt §4.7:
  "maintain the identifiers seen in the last max_delay time units"), bounded in memory.
- :class:`IdBindings`: an identifier (sbId, adId) may stand for one subscription only; the same
  permit arriving under another subscription is a duplicate-subscription flood (§4.2).
- :class:`StrikeCounter`: a source that keeps sending bogus messages is refused for a while
  without spending a signature check on it (narada §V-A: "rejecting communications from IP
  addresses that have made multiple bogus attempts"; eventguard Fig. 3 containment).
- Narada's replay state and verified-token cache live beside these, in
  :mod:`~pubguard.schemes.common.replay` (:class:`~pubguard.schemes.common.replay.ReplayState`,
  :class:`~pubguard.schemes.common.replay.TokenCache`).
- :class:`ExactMatcher`: a filter index for profiles that route on opaque equal-only values
  (EventGuard tokens, Narada topics).

Everything takes time as an argument (STYLE.md convention 2); limits are named constants.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from pubguard.crypto import DIGEST_SIZE, H, VerifyKey
from pubguard.crypto import sha256_fast as _sha
from pubguard.errors import DropReason, InvalidToken, ValidationError
from pubguard.keys.cache import BoundedLru
from pubguard.schemes.common.merkle import climb, signed_root
from pubguard.schemes.common.replay import DEFAULT_CACHE_CAPACITY

__all__ = [
    "DEFAULT_MAX_DELAY",
    "DEFAULT_STRIKES",
    "ExactMatcher",
    "IdBindings",
    "IdWindow",
    "SignedRootVerifier",
    "StrikeCounter",
    "TTLCache",
    "TimestampWindow",
    "pack_fields",
]

DEFAULT_MAX_DELAY: Final = (
    60.0  # seconds; eventguard.txt §4.7 max_delay (<= the core's dedup window)
)
DEFAULT_ID_CAPACITY: Final = 262_144  # identifiers remembered by an IdWindow / IdBindings
DEFAULT_STRIKES: Final = 32  # bogus messages from one source before it is refused
DEFAULT_STRIKE_WINDOW: Final = 10.0  # seconds over which strikes are counted
DEFAULT_BAN: Final = 60.0  # seconds a struck-out source is refused

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


_U32 = struct.Struct(">I").pack
_I64 = struct.Struct(">q").pack
_F64 = struct.Struct(">d").pack


def pack_fields(tag: bytes, *fields: bytes | str | int | float | None) -> bytes:
    """``tag`` then each field as ``type byte || length || bytes``: unambiguous and canonical."""
    out = [tag]
    add = out.extend
    for f in fields:
        t = type(f)  # exact types first (the hot path), subclasses below
        if t is bytes:
            add((b"b", _U32(len(f)), f))  # type: ignore[arg-type]
        elif t is str:
            b = f.encode()  # type: ignore[union-attr]
            add((b"s", _U32(len(b)), b))
        elif t is int:
            add((b"i", _I64(f)))
        elif f is None:
            out.append(b"n")
        elif t is float:
            add((b"f", _F64(f)))
        elif isinstance(f, bool):
            raise ValidationError("bool is not a signed field type")
        elif isinstance(f, int):
            add((b"i", _I64(f)))
        elif isinstance(f, float):
            add((b"f", _F64(f)))
        else:
            b = f.encode() if isinstance(f, str) else bytes(f)
            add((b"s" if isinstance(f, str) else b"b", _U32(len(b)), b))
    return b"".join(out)


class TTLCache(BoundedLru[K, V]):
    """A bounded LRU of values that expire at a per-entry time: ``put(key, value, expires)``,
    ``get(key, now)``. The project's one LRU (:class:`~pubguard.keys.cache.BoundedLru`) with a
    positive capacity (a verify cache that keeps nothing is a misconfiguration)."""

    __slots__ = ()

    def __init__(self, capacity: int = DEFAULT_CACHE_CAPACITY) -> None:
        if capacity < 1:
            raise ValidationError("cache capacity must be positive")
        super().__init__(capacity)


_U32X2: Final = struct.Struct(">II").pack  # a leaf's index and batch size (merkle._leaf)
#: authenticated Merkle nodes a :class:`SignedRootVerifier` keeps over all its trees
DEFAULT_MAX_NODES: Final = 1 << 16
_NONE: Final = (None, None)


class _Tree:
    """The authenticated nodes of one batch whose root signature was verified."""

    __slots__ = ("expires", "nodes", "root", "size")

    def __init__(self, size: int, expires: float, root: bytes) -> None:
        self.size, self.expires, self.root = size, expires, root
        self.nodes: dict[int, tuple[bytes, bytes]] = {}


class SignedRootVerifier:
    """Verify ``sig`` by ``key`` over ``tag || size || root`` (:func:`~pubguard.schemes.common.merkle.signed_root`),
        where ``root`` is recomputed from a publication's leaf digest, index, batch size and Merkle
        path (the root commits to index and size); cache verified ``(key, root)`` (with the
    signature that verified it) for ``ttl``.

        Per verified root it also keeps the batch's authenticated nodes, found by ``(key, sig)``
        (Ed25519 signatures are deterministic and not malleable: one signature, one signed root),
        so a later leaf of the batch is hashed only up to the first authenticated node and its
        remaining path compared (:func:`~pubguard.schemes.common.merkle.climb`): one leaf hash and about
        one inner hash per leaf instead of ``log2(n)``, with the full recomputation's outcome. A
        claimed size other than the verified tree's is refused (its signed string differs). The
        trees expire with their root (``ttl``) and hold at most ``max_nodes`` nodes in all: the
        oldest trees are dropped first, and a tree that cannot fit is not kept (its leaves are
        then checked against the root cache, as before)."""

    __slots__ = ("_cache", "_nodes", "_trees", "max_nodes", "tag", "ttl", "verifications")

    def __init__(
        self,
        tag: bytes,
        *,
        ttl: float,
        capacity: int = DEFAULT_CACHE_CAPACITY,
        max_nodes: int = DEFAULT_MAX_NODES,
    ):
        if max_nodes < 0:
            raise ValidationError("max_nodes must be >= 0")
        self.tag = tag
        self.ttl = ttl
        self.max_nodes = max_nodes
        self._cache: TTLCache[tuple[bytes, bytes], bytes] = TTLCache(capacity)
        self._trees: OrderedDict[tuple[bytes, bytes], _Tree] = OrderedDict()
        self._nodes = 0  # nodes held by all trees
        self.verifications = 0  # signature checks actually performed

    def verify(
        self,
        key: VerifyKey,
        leaf: bytes,
        sig: bytes,
        *,
        now: float,
        index: int = 0,
        size: int = 1,
        path: Sequence[bytes] | bytes = (),
    ) -> bytes:
        """Return the verified root; raise :class:`InvalidToken` on any failure. ``path``:
        the sibling hashes, bottom-up, or packed (:func:`~pubguard.schemes.common.merkle.pack_path`)."""
        if type(path) is not bytes:
            if any(type(x) is not bytes or len(x) != DIGEST_SIZE for x in path):
                raise InvalidToken()
            path = b"".join(cast("Sequence[bytes]", path))
        return self.verify_packed(key, leaf, sig, now, index, size, path)

    def verify_packed(
        self,
        key: VerifyKey,
        leaf: bytes,
        sig: bytes,
        now: float,
        index: int,
        size: int,
        path: bytes,
    ) -> bytes:
        """:meth:`verify` with positional arguments and the path packed (a broker's hot
        path)."""
        if type(sig) is not bytes:
            raise InvalidToken()
        tk = (key.to_bytes(), sig)
        tree = self._trees.get(tk)
        if tree is not None:
            if now > tree.expires:
                self._drop(tk)
            else:
                if size != tree.size:
                    raise InvalidToken()  # the signature is on another size
                nodes = tree.nodes
                # climb's first step, inline: the leaf's own node (level 0) is authenticated
                if type(index) is int and type(size) is int and type(leaf) is bytes:
                    node = nodes.get(index)
                    if node is not None and 0 <= index < size:
                        if (
                            node[1] != path
                            or node[0] != _sha(b"\x00" + _U32X2(index, size) + leaf).digest()
                        ):
                            raise InvalidToken()
                        return tree.root
                h, at, new = climb(leaf, index, size, path, nodes)
                if nodes.get(at, _NONE)[0] != h:  # it stopped at an authenticated node
                    raise InvalidToken()
                if new:
                    self._keep(tree, new)
                return tree.root
        root, at, new = climb(leaf, index, size, path, None)
        ck = (tk[0], root)
        if self._cache.get(ck, now) != sig:  # a root verified under this very signature
            self.verifications += 1
            key.verify(sig, signed_root(self.tag, root, size))
            self._cache.put(ck, sig, now + self.ttl)
        trees = self._trees
        while trees:  # trees are kept in the order they expire: drop the expired ones
            first = next(iter(trees))
            if now <= trees[first].expires:
                break
            self._drop(first)
        tree = trees[tk] = _Tree(size, now + self.ttl, root)
        new.append((at, root, b""))  # the root, with an empty path above it
        self._keep(tree, new)
        if not tree.nodes:  # it did not fit: the root cache serves this batch
            del self._trees[tk]
        return root

    def _keep(self, tree: _Tree, new: list[tuple[int, bytes, bytes]]) -> None:
        """Add authenticated nodes to ``tree`` (all or none), within the node budget: the
        oldest other trees go first."""
        nodes = tree.nodes
        add = 0
        for k, _, _ in new:
            if k not in nodes:
                add += 1
        if not add:
            return
        while self._nodes + add > self.max_nodes:
            oldest = next(iter(self._trees))
            if self._trees[oldest] is tree:
                return  # it cannot grow: its later leaves climb further (still correct)
            self._drop(oldest)
        for k, h, tail in new:
            nodes[k] = (h, tail)
        self._nodes += add

    def _drop(self, tk: tuple[bytes, bytes]) -> None:
        tree = self._trees.pop(tk)
        self._nodes -= len(tree.nodes)

    @property
    def cache(self) -> TTLCache[tuple[bytes, bytes], bytes]:
        return self._cache

    @property
    def cached_nodes(self) -> int:
        """Authenticated Merkle nodes held over all trees (bounded by ``max_nodes``)."""
        return self._nodes

    @property
    def cached_trees(self) -> int:
        return len(self._trees)


@dataclass(frozen=True, slots=True)
class TimestampWindow:
    """eventguard.txt §4.7: block any message with ``|ct - ts| > max_delay``."""

    max_delay: float = DEFAULT_MAX_DELAY

    def __post_init__(self) -> None:
        if not self.max_delay > 0:
            raise ValidationError("max_delay must be positive")

    def check(self, ts: float, now: float) -> DropReason | None:
        if isinstance(ts, bool) or not isinstance(ts, int | float) or ts != ts:
            return DropReason.MALFORMED
        return DropReason.STALE if abs(now - ts) > self.max_delay else None


class IdWindow:
    """Identifiers seen in the last ``window`` seconds (at most ``capacity`` of them)."""

    __slots__ = ("_ids", "capacity", "window")

    def __init__(self, window: float, capacity: int = DEFAULT_ID_CAPACITY) -> None:
        if window <= 0 or capacity <= 0:
            raise ValidationError("window and capacity must be positive")
        self.window = window
        self.capacity = capacity
        self._ids: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def seen(self, ident: Hashable, now: float) -> bool:
        self._expire(now)
        return ident in self._ids

    def record(self, ident: Hashable, now: float) -> None:
        self._ids[ident] = now
        self._ids.move_to_end(ident)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)

    def check_and_record(self, ident: Hashable, now: float) -> bool:
        """True (and remember it) if ``ident`` is new; False for a duplicate."""
        if self.seen(ident, now):
            return False
        self.record(ident, now)
        return True

    def _expire(self, now: float) -> None:
        horizon = now - self.window
        ids = self._ids
        while ids:
            if next(iter(ids.values())) >= horizon:
                break
            ids.popitem(last=False)


class IdBindings:
    """``ident -> owner`` for live subscriptions/advertisements (eventguard.txt §4.2: sbId
    detects duplicate-subscription floods). Re-binding to the same owner is idempotent."""

    __slots__ = ("_d", "capacity")

    def __init__(self, capacity: int = DEFAULT_ID_CAPACITY) -> None:
        self.capacity = capacity
        self._d: OrderedDict[Hashable, Hashable] = OrderedDict()

    def __len__(self) -> int:
        return len(self._d)

    def bind(self, ident: Hashable, owner: Hashable) -> bool:
        cur = self._d.get(ident)
        if cur is not None and cur != owner:
            return False
        self._d[ident] = owner
        self._d.move_to_end(ident)
        while len(self._d) > self.capacity:
            self._d.popitem(last=False)
        return True

    def owner(self, ident: Hashable) -> Hashable | None:
        return self._d.get(ident)

    def release(self, ident: Hashable) -> None:
        self._d.pop(ident, None)


class StrikeCounter:
    """Count bogus messages per source; refuse a source with ``threshold`` strikes within
    ``window`` seconds for ``ban`` seconds (its messages then cost no signature check)."""

    __slots__ = ("_banned", "_strikes", "ban", "threshold", "window")

    def __init__(
        self,
        threshold: int = DEFAULT_STRIKES,
        window: float = DEFAULT_STRIKE_WINDOW,
        ban: float = DEFAULT_BAN,
    ) -> None:
        if threshold < 1 or window <= 0 or ban <= 0:
            raise ValidationError("threshold, window and ban must be positive")
        self.threshold = threshold
        self.window = window
        self.ban = ban
        self._strikes: dict[Hashable, list[float]] = {}
        self._banned: dict[Hashable, float] = {}

    def banned(self, source: Hashable, now: float) -> bool:
        until = self._banned.get(source)
        if until is None:
            return False
        if now >= until:
            del self._banned[source]
            return False
        return True

    def strike(self, source: Hashable, now: float) -> bool:
        """Record one bogus message; True if the source is now refused."""
        times = [t for t in self._strikes.get(source, ()) if t > now - self.window]
        times.append(now)
        if len(times) >= self.threshold:
            self._banned[source] = now + self.ban
            self._strikes.pop(source, None)
            return True
        self._strikes[source] = times
        if len(self._strikes) > DEFAULT_ID_CAPACITY:  # bound memory under a spray of sources
            self._strikes.pop(next(iter(self._strikes)))
        return False

    def pardon(self, source: Hashable) -> None:
        self._banned.pop(source, None)
        self._strikes.pop(source, None)


class ExactMatcher:
    """Filter index for equal-only routing values: a decoded filter stands for one hashable
    value, a decoded event is an iterable of values; ``match`` is the union of their
    subscribers. ``value``: the value a decoded filter routes on (by default the filter
    itself, as EventGuard's token; Narada's filter carries its token's expiry beside the
    topic, so its matcher indexes the topic)."""

    __slots__ = ("_by_value", "_keys", "_value")

    def __init__(self, value: Callable[[Any], Hashable] | None = None) -> None:
        self._by_value: dict[Hashable, set[Hashable]] = {}
        self._keys: dict[Hashable, Hashable] = {}
        self._value = value

    def add(self, key: Hashable, pf: Any) -> None:
        v = pf if self._value is None else self._value(pf)
        self.remove(key)
        self._keys[key] = v
        self._by_value.setdefault(v, set()).add(key)

    def remove(self, key: Hashable) -> None:
        v = self._keys.pop(key, None)
        if v is None:
            return
        s = self._by_value[v]
        s.discard(key)
        if not s:
            del self._by_value[v]

    def match(self, pe: Any) -> set[Hashable]:
        out: set[Hashable] = set()
        for v in pe:
            keys = self._by_value.get(v)
            if keys:
                out |= keys
        return out

    def __len__(self) -> int:
        return len(self._keys)


def digest(*parts: bytes) -> bytes:
    """``H`` over length-prefixed parts (a cache key for several byte strings)."""
    return H(pack_fields(b"", *parts))
