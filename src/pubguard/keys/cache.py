"""Key cache keyed by the longest cached prefix (psguard.txt §3.2.3 "Performance Enhancement").

A subscriber (or publisher, or KDC) deriving ``K_{alpha}`` from an authorisation key
``K_{phi}`` caches every intermediate key on the way. A later derivation of ``K_{alpha'}`` then
starts from the cached key ``K_{phi'}`` with the longest ``phi'`` that is a prefix of
``alpha'``: the optimal starting point, costing ``H * (|alpha'| - |phi'|)``.

Nodes are paths from a tree root: a NAKT ktid (``"101"``), a string for prefix chains (pass
the *reversed* value for suffix chains), or a tuple of names for category trees. ``tree`` is
any hashable name of the key tree, e.g. ``("cancerTrail", "numeric", "age")``.

Authorisation keys (``add``) are pinned: they are never evicted, because without them nothing
can be derived. Derived keys live in an LRU bounded by ``capacity`` (a named limit).
``derive`` refuses with :class:`~pubguard.errors.KeyError_` when no cached key is an ancestor
of the target: a cache never widens what its owner is authorised for.

:class:`BoundedLru` is the project's one bounded LRU: the derived keys here, the per-epoch
client caches (:class:`LruCache`) and the brokers' verified-root / verified-permit caches
(:class:`~pubguard.schemes.common.guards.TTLCache`, whose entries expire) are all uses of it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from math import inf
from typing import Any, Final, Generic, TypeVar

from pubguard import native as nb
from pubguard.crypto import SecretBytes
from pubguard.errors import KeyError_, ValidationError
from pubguard.keys.nakt import derive_path

__all__ = [
    "DEFAULT_CACHE_CAPACITY",
    "DEFAULT_LRU_CAPACITY",
    "BoundedLru",
    "KeyCache",
    "LruCache",
]

#: Derived keys kept per cache (32-byte keys; 2048 keys ~ the paper's 64 KB cache, §5 Fig. 11).
DEFAULT_CACHE_CAPACITY: Final = 2048

#: Entries kept by an :class:`LruCache` unless told otherwise (a publisher's per-value leaves
#: and token contexts, a subscriber's derived ``K(e)`` components).
DEFAULT_LRU_CAPACITY: Final = 4096

Node = str | tuple[str, ...]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _check_capacity(capacity: object) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValidationError(f"cache capacity must be a non-negative integer: {capacity!r}")
    return capacity


class BoundedLru(Generic[K, V]):
    """At most ``capacity`` entries, the least recently used (read or written) dropped first;
    each entry may carry an expiry time (``put(key, value, expires)``), after which ``get(key,
    now)`` misses and drops it. Without ``expires`` an entry never expires; without ``now``
    nothing is treated as expired. ``capacity`` 0 keeps nothing (every ``get`` misses).
    ``hits`` / ``misses`` count ``get`` outcomes; store no ``None`` (``get``'s miss). ``repr``
    shows sizes only, never a key or a value.

    Entries are ``key -> (expires, value)`` in one ``OrderedDict``: a hit is one dict lookup,
    one float comparison and one ``move_to_end`` (the brokers' verify path runs through it)."""

    __slots__ = ("_d", "capacity", "hits", "misses")

    def __init__(self, capacity: int) -> None:
        self.capacity = _check_capacity(capacity)
        self._d: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={len(self._d)}, capacity={self.capacity})"

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is held (expired or not); neither counted nor reordered."""
        return key in self._d

    def get(self, key: K, now: float = -inf) -> V | None:
        item = self._d.get(key)
        if item is None or now > item[0]:
            if item is not None:
                del self._d[key]
            self.misses += 1
            return None
        self._d.move_to_end(key)
        self.hits += 1
        return item[1]

    def put(self, key: K, value: V, expires: float = inf) -> None:
        d = self._d
        d[key] = (expires, value)
        d.move_to_end(key)
        while len(d) > self.capacity:  # capacity 0: the entry just put goes too
            d.popitem(last=False)

    def discard(self, key: K) -> None:
        self._d.pop(key, None)

    def keys(self) -> list[K]:
        """A snapshot of the keys, least recently used first."""
        return list(self._d)

    def values(self) -> list[V]:
        """A snapshot of the values (expired or not), least recently used first."""
        return [v for _, v in self._d.values()]

    def clear(self) -> None:
        self._d.clear()


class _KeyCacheCore:
    """The reference key cache (psguard.txt §3.2.3): the Python twin of
    ``pubguard._native.KeyCache``, with the same methods, so :class:`KeyCache` fronts either.
    ``add`` takes the value object and its raw bytes (the native core keeps both)."""

    __slots__ = ("_derived", "_pinned", "hits", "misses")

    def __init__(self, capacity: int) -> None:
        self._pinned: dict[tuple[Hashable, Node], SecretBytes] = {}
        self._derived: BoundedLru[tuple[Hashable, Node], SecretBytes] = BoundedLru(capacity)
        self.hits = 0
        self.misses = 0

    @property
    def sizes(self) -> tuple[int, int]:
        return len(self._pinned), len(self._derived)

    def add(self, tree: Hashable, node: Node, key: SecretBytes, _raw: bytes) -> None:
        self._pinned[(tree, node)] = key

    def forget_tree(self, tree: Hashable) -> None:
        for k in [k for k in self._pinned if k[0] == tree]:
            del self._pinned[k]
        for k in self._derived.keys():
            if k[0] == tree:
                self._derived.discard(k)

    def clear(self) -> None:
        self._pinned.clear()
        self._derived.clear()

    def _lookup(self, k: tuple[Hashable, Node]) -> SecretBytes | None:
        v = self._pinned.get(k)
        return self._derived.get(k) if v is None else v

    def derive(self, tree: Hashable, target: Node) -> SecretBytes:
        hit = self._lookup((tree, target))
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        start = None
        for i in range(len(target) - 1, -1, -1):
            start = self._lookup((tree, target[:i]))
            if start is not None:
                break
        else:
            raise KeyError_(f"no cached authorisation key is an ancestor of {target!r}")
        key = start.reveal()
        out = start
        for j in range(i, len(target)):
            key = derive_path(key, (target[j],))
            out = SecretBytes(key)
            self._put((tree, target[: j + 1]), out)
        return out  # the very object cached: a later hit returns it again

    def _put(self, k: tuple[Hashable, Node], v: SecretBytes) -> None:
        if k not in self._pinned:
            self._derived.put(k, v)


class KeyCache:
    """Pinned authorisation keys plus an LRU of derived keys, per key tree.

    ``derive(tree, target)`` is the key of ``target``, from the longest cached ancestor; it
    caches the intermediates and raises :class:`~pubguard.errors.KeyError_` when no cached key
    is an ancestor of ``target``.

    The cache itself is a core chosen at construction: ``pubguard._native.KeyCache`` when the
    native backend is active (:mod:`pubguard.native`), else the reference
    :class:`_KeyCacheCore` (same behaviour, differential-tested). ``derive`` is the core's own
    bound method, an attribute rather than a method of this class, so a native cache hit runs
    no Python frame (psguard.txt §3.2.3 counts a hit as free; the bench's cached-derivation
    figure is this call)."""

    __slots__ = ("_capacity", "_core", "derive")

    derive: Callable[[Hashable, Node], SecretBytes]

    def __init__(self, capacity: int = DEFAULT_CACHE_CAPACITY) -> None:
        self._capacity = _check_capacity(capacity)
        n = nb.NATIVE
        self._core: Any = (
            _KeyCacheCore(capacity) if n is None else n.KeyCache(capacity, SecretBytes, KeyError_)
        )
        self.derive = self._core.derive

    def __repr__(self) -> str:
        pinned, derived = self._core.sizes
        return f"KeyCache(pinned={pinned}, derived={derived}, capacity={self.capacity})"

    def __len__(self) -> int:
        return sum(self._core.sizes)

    @property
    def hits(self) -> int:
        """Derivations answered from the cache."""
        return self._core.hits  # type: ignore[no-any-return]

    @property
    def misses(self) -> int:
        """Derivations that hashed (from the longest cached prefix)."""
        return self._core.misses  # type: ignore[no-any-return]

    @property
    def capacity(self) -> int:
        return self._capacity

    def add(self, tree: Hashable, node: Node, key: SecretBytes | bytes) -> None:
        """Pin an authorisation key for ``node`` of ``tree``."""
        if not isinstance(node, str | tuple):
            raise ValidationError(f"a key tree node is a str or a tuple, got {node!r}")
        sb = key if isinstance(key, SecretBytes) else SecretBytes(key)
        self._core.add(tree, node, sb, sb.reveal())

    def add_all(self, tree: Hashable, keys: Mapping[str, SecretBytes]) -> None:
        """Pin every key of e.g. ``KDC.numeric_auth_keys(...)``."""
        for node, key in keys.items():
            self.add(tree, node, key)

    def forget_tree(self, tree: Hashable) -> None:
        """Drop every key of ``tree`` (on unsubscription or at the end of an epoch)."""
        self._core.forget_tree(tree)

    def clear(self) -> None:
        self._core.clear()


class LruCache(BoundedLru[K, V]):
    """A bounded LRU of derived values (keys, cipher contexts) for one key owner and one
    epoch: the owner drops the whole cache with the epoch's keys. ``capacity`` 0 disables it
    (every ``get`` misses, ``put`` keeps nothing), which is how tests compare cached and
    uncached derivations. Entries never expire. Not picklable (it holds derived keys)."""

    __slots__ = ()

    def __init__(self, capacity: int = DEFAULT_LRU_CAPACITY) -> None:
        super().__init__(capacity)

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("LruCache holds derived keys: it is not picklable")
