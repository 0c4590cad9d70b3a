"""PSGuard's stateless key distribution centre (KDC) and the key trees below a topic key.

Theory of operation (psguard.txt §3.1-3.2). The KDC holds one secret, the master ``rk``; every
key is a deterministic function of ``rk`` and public labels, so KDC replicas need no shared
state (§3.2.1 "KDC Scalability"). All labels are UTF-8 strings that must be non-empty and free
of NUL; NUL is the separator, and labels the KDC uses internally start with NUL, so no two
derivations below can ever be fed the same input (docs/key-derivation.md proves it case by
case and gives vectors).

==============================  ===================================================
topic key                        ``K(w)      = KH_rk(w)``
per-publisher topic key          ``K^P(w)    = KH_rk(P || 0x00 || w)``
routing token (public)           ``T(w)      = KH_rk(0x00 || "token" || 0x00 || w)``
epoch master                     ``rk_e      = KH_rk(0x00 || "epoch" || 0x00 || ascii(e))``
NAKT root (``num`` = attr name)  ``K_root    = KH_{K(w)}(num)``
category / prefix / suffix root  ``K_root    = KH_{K(w)}(kind || 0x00 || attr)``
child (every tree)               ``K_{xi||b} = H(K_xi || utf8(b))``
node token (public)              ``KH_{K(w)}(0x00 || "token" || 0x00 || kind || 0x00 || attr
                                 || 0x00 || node)``
==============================  ===================================================

where ``KH`` = HMAC-SHA256, ``H`` = SHA-256, ``b`` is one NAKT bit (``"0"``/``"1"``), one
character (string prefix chains; suffix chains walk the reversed string) or one category name;
``kind`` is ``"category"``, ``"prefix"`` or ``"suffix"``. With per-publisher keys, ``K^P(w)``
replaces ``K(w)`` as the root of every tree of that publisher's events.

Who uses what:

* **KDC** (holds ``rk``): :class:`KDC` -- ``topic_key``, ``publisher_key``, ``topic_token``,
  ``numeric_auth_keys`` (a subscriber's keys for a range), ``numeric_event_key``,
  ``category_key``, ``prefix_key``, ``suffix_key``, ``node_token``, ``for_epoch``.
* **Publisher** (holds ``K(w)`` or ``K^P(w)``): :class:`TopicKeys` computes every event key and
  node token of the topic locally -- ``TopicKeys(kdc.topic_key(w)).numeric_event_key(...)``.
* **Subscriber** (holds authorisation keys only): :func:`~pubguard.keys.nakt.derive_from`,
  :func:`derive_category`, :func:`derive_prefix`, :func:`derive_suffix`, or a
  :class:`~pubguard.keys.cache.KeyCache`; each refuses (``KeyError_``) unless the
  authorisation node is an ancestor of the event node.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

from pubguard import native as nb
from pubguard.crypto import KeyedHash, SecretBytes
from pubguard.crypto.primitives import sha256_fast
from pubguard.crypto.secret import raw as raw_key
from pubguard.errors import KeyError_, ValidationError
from pubguard.keys.nakt import (
    MAX_DEPTH,
    NATIVE_MAX_DEPTH,
    check_ktid,
    cover_heap,
    cover_keys,
    derive_path,
    ktid,
    nakt_leaf_bounds,
)

__all__ = [
    "KDC",
    "KINDS",
    "CategoryTree",
    "TopicKeys",
    "derive_category",
    "derive_prefix",
    "derive_suffix",
    "keyed_hash",
    "label",
]

#: Tree kinds; numeric trees use the bare attribute name as ``num`` (psguard.txt §3.1).
KINDS = ("numeric", "category", "prefix", "suffix")
#: Bound on the KDC's memo of topic and root keys (a cache, not state: all recomputable).
ROOT_MEMO_SIZE = 4096
#: Bound on the memoised NAKT nodes per attribute tree (32-byte keys: about 2 MB at most).
NODE_MEMO_SIZE = 1 << 15
#: Bound on the memoised covers per topic (native backend: one AuthKeys per range, at most
#: 2 log2(|R|) keys each, so about 2 MB at depth 32).
COVER_MEMO_SIZE = 1 << 10


def keyed_hash(key: SecretBytes | bytes) -> Callable[[bytes], bytes]:
    """``KH_key`` with its HMAC pads precomputed: :class:`~pubguard.crypto.KeyedHash`, or its
    native twin when the native backend is active (:mod:`pubguard.native`)."""
    n = nb.NATIVE
    return KeyedHash(key) if n is None else n.KeyedHash(raw_key(key))  # type: ignore[no-any-return]


def label(what: str, value: object) -> bytes:
    """A public label as UTF-8; ValidationError unless a non-empty str without NUL."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{what} must be a non-empty string, got {value!r}")
    if "\x00" in value:
        raise ValidationError(f"{what} must not contain NUL")
    return value.encode()


def _kind(kind: str) -> bytes:
    if kind not in KINDS:
        raise ValidationError(f"unknown key tree kind {kind!r} (valid: {', '.join(KINDS)})")
    return kind.encode()


def _path(path: object) -> tuple[str, ...]:
    if isinstance(path, str) or not isinstance(path, Sequence):
        raise ValidationError(f"a category path is a sequence of names, got {path!r}")
    for p in path:
        label("category name", p)
    return tuple(path)


class TopicKeys:
    """Every key tree below one topic key ``K(w)`` (or ``K^P(w)``): what a publisher holds.

    Computes roots, event keys, authorisation keys and node tokens; it cannot compute other
    topics' keys or anything about ``rk``.
    """

    __slots__ = ("_covers", "_kh", "_roots", "_trees")

    def __init__(self, topic_key: SecretBytes | bytes) -> None:
        n = nb.NATIVE  # keyed_hash(topic_key), inline: a cold KDC request makes one of these
        if n is not None and type(topic_key) is SecretBytes:
            self._kh: Callable[[bytes], bytes] = n.KeyedHash(topic_key)
        else:
            self._kh = keyed_hash(topic_key)
        # the root and NAKT memos are made on first use: a cold KDC request needs only _covers
        self._roots: dict[tuple[str, str], bytes] | None = None
        self._trees: dict[str, tuple[dict[int, bytes], dict[int, SecretBytes]]] | None = None
        self._covers: dict[tuple[str, int, int, int], Mapping[str, SecretBytes]] = {}

    def __repr__(self) -> str:
        return "TopicKeys(<secret>)"

    def root(self, kind: str, attr: str) -> bytes:
        """Raw root key of the ``kind`` tree of attribute ``attr`` (memoised)."""
        roots = self._roots
        if roots is None:
            roots = self._roots = {}
        r = roots.get((kind, attr))
        if r is None:
            name = label("attribute", attr)
            if kind == "numeric":
                r = self._kh(name)  # psguard.txt §3.1: K_root = KH_{K(w)}(num)
            else:
                r = self._kh(_kind(kind) + b"\x00" + name)
            if len(roots) >= ROOT_MEMO_SIZE:
                roots.clear()
            roots[(kind, attr)] = r
        return r

    def root_key(self, kind: str, attr: str) -> SecretBytes:
        return SecretBytes(self.root(kind, attr))

    # -- numeric attributes (NAKT) ---------------------------------------------------------

    def _numeric(self, attr: str) -> tuple[dict[int, bytes], dict[int, SecretBytes]]:
        trees = self._trees
        if trees is None:
            trees = self._trees = {}
        t = trees.get(attr)
        if t is None or len(t[0]) + len(t[1]) > NODE_MEMO_SIZE:
            t = trees[attr] = ({1: self.root("numeric", attr)}, {})
        return t

    @staticmethod
    def _node(raw: dict[int, bytes], n: int) -> bytes:
        """Key of heap node ``n`` from its nearest memoised ancestor (the root is node 1)."""
        k = raw.get(n)
        if k is not None:
            return k
        nat = nb.NATIVE
        if nat is not None and n >> (NATIVE_MAX_DEPTH + 1) == 0:
            return nat.memo_node(raw, n)  # type: ignore[no-any-return]
        path = []
        while k is None:
            path.append(n & 1)
            n >>= 1
            k = raw.get(n)
        h = sha256_fast
        for b in reversed(path):
            n = (n << 1) | b
            k = h(k + (b"1" if b else b"0")).digest()  # psguard.txt §3.1: H(K_xi || b)
            raw[n] = k
        return k

    def numeric_key(self, attr: str, node: str) -> SecretBytes:
        """Key of NAKT node ``node`` (any depth): ``H`` applied bit by bit from the root."""
        check_ktid(node)
        if len(node) > MAX_DEPTH:
            raise ValidationError(f"ktid deeper than {MAX_DEPTH} bits")
        return SecretBytes(self._node(self._numeric(attr)[0], int("1" + node, 2)))

    def numeric_event_key(
        self, attr: str, value: int, range_size: int, least_count: int
    ) -> tuple[str, SecretBytes]:
        """psguard.txt §3.1 "Encryption Key": ``K(e) = K_{ktid(v)}``; returns (ktid, key)."""
        leaf = ktid(value, range_size, least_count)
        raw, _ = self._numeric(attr)
        return leaf, SecretBytes(self._node(raw, int("1" + leaf, 2)))

    def numeric_auth_keys(
        self,
        attr: str,
        low: int,
        high: int,
        range_size: int,
        least_count: int,
        *,
        snap: bool = False,
    ) -> Mapping[str, SecretBytes]:
        """psguard.txt §3.1 "Authorization Key": one key per node of the minimal cover of
        ``[low, high]``, left to right, keyed by ktid. A cold call walks down once from the
        root, at most the paper's ``4 log2(|R|/lc) - 2`` hashes; the cover keys are memoised
        (bounded), so a repeated range costs no hash (§5 "key caching on the ... KDC").

        With the native backend the result is one ``pubguard._native.AuthKeys``, a read-only
        mapping that keeps the raw keys inside it and makes each ``SecretBytes`` when it is
        read (the Python backend returns a dict); the memo is then per range."""
        nat = nb.NATIVE
        if nat is not None:  # root, checks, walk and memo in one call; None: the reference
            got = nat.numeric_cover(
                self._kh,
                self._covers,
                COVER_MEMO_SIZE,
                attr,
                low,
                high,
                range_size,
                least_count,
                snap,
                SecretBytes,
            )
            if got is not None:
                return got  # type: ignore[no-any-return]
        lo, hi, m = nakt_leaf_bounds(low, high, range_size, least_count, snap=snap)
        raw, wrapped = self._numeric(attr)
        if wrapped:
            try:  # warm: every cover node memoised
                return {bin(n)[3:]: wrapped[n] for n in cover_heap(lo, hi, m)}
            except KeyError:
                pass
        out: dict[str, SecretBytes] = {}
        for n, k in cover_keys(raw[1], lo, hi, m):
            out[bin(n)[3:]] = wrapped[n] = SecretBytes(k)
        return out

    # -- category trees, string prefix and suffix chains -----------------------------------

    def category_key(self, attr: str, path: Sequence[str]) -> SecretBytes:
        """Key of the category node at ``path`` (names from the top level down); the key of
        a node derives the keys of all its descendants."""
        return SecretBytes(derive_path(self.root("category", attr), _path(path)))

    def prefix_key(self, attr: str, prefix: str) -> SecretBytes:
        """String prefix chain: authorisation for ``prefix``; the event key of a value ``v`` is
        ``prefix_key(attr, v)``. Empty prefix = the chain's root (all values)."""
        return SecretBytes(derive_path(self.root("prefix", attr), _string(prefix)))

    def suffix_key(self, attr: str, suffix: str) -> SecretBytes:
        """String suffix chain: the prefix chain over the reversed string."""
        return SecretBytes(derive_path(self.root("suffix", attr), _string(suffix)[::-1]))

    # -- public routing tokens -------------------------------------------------------------

    def node_token(self, kind: str, attr: str, node: str | Sequence[str]) -> bytes:
        """Public routing token of a tree node (NAKT ktid, string prefix, or category path
        joined by NUL). Holding tokens reveals nothing about keys (KH is a PRF)."""
        if kind == "numeric":
            ident = check_ktid(node).encode()
        elif kind == "category":
            ident = b"\x00".join(p.encode() for p in _path(node))
        else:
            ident = _string(node).encode()  # type: ignore[arg-type]
        return self._kh(
            b"\x00token\x00" + _kind(kind) + b"\x00" + label("attribute", attr) + b"\x00" + ident
        )


def _string(s: object) -> str:
    if not isinstance(s, str):
        raise ValidationError(f"a string attribute value must be str, got {type(s).__name__}")
    if "\x00" in s:
        raise ValidationError("string attribute values must not contain NUL")
    return s


class KDC:
    """PSGuard key distribution centre: every key from the master ``rk`` alone (stateless).

    ``KDC(master)`` with ``master`` a :class:`SecretBytes` (raw bytes accepted). Methods take
    the topic ``w`` and, for per-publisher keys (psguard.txt §3.1 "Multiple Publishers"), an
    optional ``publisher``.
    """

    __slots__ = ("_kh", "_native", "_topics")

    def __init__(self, master: SecretBytes | bytes) -> None:
        m = master.reveal() if isinstance(master, SecretBytes) else master
        if not isinstance(m, bytes) or len(m) < 16:
            raise ValidationError("the KDC master secret must be at least 16 bytes")
        self._kh = keyed_hash(m)
        self._native = nb.NATIVE is not None  # _kh is then pubguard._native.KeyedHash
        self._topics: OrderedDict[tuple[str, str | None], TopicKeys] = OrderedDict()

    def __repr__(self) -> str:
        return "KDC(<secret>)"

    def for_epoch(self, epoch: int) -> KDC:
        """The KDC of epoch ``e``: master ``rk_e = KH_rk(0x00 "epoch" 0x00 ascii(e))``
        (psguard.txt §3.2 rekeying by epochs, as eventguard.txt §4.8)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValidationError(f"epoch must be a non-negative integer, got {epoch!r}")
        return KDC(self._kh(b"\x00epoch\x00" + str(epoch).encode()))

    def topic_key(self, w: str) -> SecretBytes:
        """psguard.txt §3.1: ``K(w) = KH_rk(w)``."""
        if self._native:  # label()'s checks, the HMAC and the SecretBytes in one call
            k = self._kh.secret(w)  # type: ignore[attr-defined]
            if k is not None:
                return k  # type: ignore[no-any-return]
        elif type(w) is str and w and "\x00" not in w:  # label()'s checks, inline (hot)
            return SecretBytes(self._kh(w.encode()))
        return SecretBytes(self._kh(label("topic", w)))

    def publisher_key(self, p: str, w: str) -> SecretBytes:
        """psguard.txt §3.1: ``K^P(w) = KH_rk(P || w)`` with a NUL separator."""
        return SecretBytes(self._kh(label("publisher", p) + b"\x00" + label("topic", w)))

    def topic_token(self, w: str) -> bytes:
        """psguard.txt §4.1: routing token ``T(w) = F_rk(w)`` (domain-separated from K(w))."""
        return self._kh(b"\x00token\x00" + label("topic", w))

    def topic(self, w: str, publisher: str | None = None) -> TopicKeys:
        """The key trees below ``K(w)`` (or ``K^P(w)``), memoised."""
        key = (w, publisher)
        tk = self._topics.get(key)
        if tk is None:
            tk = TopicKeys(
                self.topic_key(w) if publisher is None else self.publisher_key(publisher, w)
            )
            if len(self._topics) >= ROOT_MEMO_SIZE:
                self._topics.popitem(last=False)
            self._topics[key] = tk
        return tk

    def numeric_auth_keys(
        self,
        w: str,
        attr: str,
        low: int,
        high: int,
        range_size: int,
        least_count: int,
        *,
        publisher: str | None = None,
        snap: bool = False,
    ) -> Mapping[str, SecretBytes]:
        return self.topic(w, publisher).numeric_auth_keys(
            attr, low, high, range_size, least_count, snap=snap
        )

    def numeric_event_key(
        self,
        w: str,
        attr: str,
        value: int,
        range_size: int,
        least_count: int,
        *,
        publisher: str | None = None,
    ) -> tuple[str, SecretBytes]:
        return self.topic(w, publisher).numeric_event_key(attr, value, range_size, least_count)

    def numeric_key(
        self, w: str, attr: str, node: str, *, publisher: str | None = None
    ) -> SecretBytes:
        return self.topic(w, publisher).numeric_key(attr, node)

    def category_key(
        self, w: str, attr: str, path: Sequence[str], *, publisher: str | None = None
    ) -> SecretBytes:
        return self.topic(w, publisher).category_key(attr, path)

    def prefix_key(
        self, w: str, attr: str, prefix: str, *, publisher: str | None = None
    ) -> SecretBytes:
        return self.topic(w, publisher).prefix_key(attr, prefix)

    def suffix_key(
        self, w: str, attr: str, suffix: str, *, publisher: str | None = None
    ) -> SecretBytes:
        return self.topic(w, publisher).suffix_key(attr, suffix)

    def node_token(
        self,
        w: str,
        kind: str,
        attr: str,
        node: str | Sequence[str],
        *,
        publisher: str | None = None,
    ) -> bytes:
        return self.topic(w, publisher).node_token(kind, attr, node)


# -- subscriber-side derivations ------------------------------------------------------------


def derive_category(
    auth_path: Sequence[str], auth_key: SecretBytes | bytes, target_path: Sequence[str]
) -> SecretBytes:
    """Key of category node ``target_path`` from the key of its ancestor ``auth_path``."""
    a, t = _path(auth_path), _path(target_path)
    if t[: len(a)] != a:
        raise KeyError_(f"category {'/'.join(a)!r} is not an ancestor of {'/'.join(t)!r}")
    return SecretBytes(derive_path(auth_key, t[len(a) :]))


def derive_prefix(auth_prefix: str, auth_key: SecretBytes | bytes, value: str) -> SecretBytes:
    """Event key of string ``value`` from the authorisation key of ``auth_prefix``."""
    if not _string(value).startswith(_string(auth_prefix)):
        raise KeyError_("value does not start with the authorised prefix")
    return SecretBytes(derive_path(auth_key, value[len(auth_prefix) :]))


def derive_suffix(auth_suffix: str, auth_key: SecretBytes | bytes, value: str) -> SecretBytes:
    """Event key of string ``value`` (suffix chain) from the key of ``auth_suffix``."""
    if not _string(value).endswith(_string(auth_suffix)):
        raise KeyError_("value does not end with the authorised suffix")
    rest = value[: len(value) - len(auth_suffix)]
    return SecretBytes(derive_path(auth_key, rest[::-1]))


class CategoryTree:
    """An ontology (psguard.txt §3 category matching): named nodes, each with one parent.

    ``CategoryTree({"car": "vehicle", "sedan": "car", "vehicle": None})`` or
    ``CategoryTree.from_paths([("vehicle", "car", "sedan")])``. Node names are unique; a node's
    key path is its chain of names from the top level down.
    """

    __slots__ = ("_parent",)

    def __init__(self, parents: Mapping[str, str | None]) -> None:
        self._parent: dict[str, str | None] = {}
        for child, parent in parents.items():
            label("category name", child)
            if parent is not None:
                label("category name", parent)
            self._parent[child] = parent
        for parent in list(self._parent.values()):
            if parent is not None and parent not in self._parent:
                self._parent[parent] = None
        for node in self._parent:  # reject cycles
            self.path(node)

    @classmethod
    def from_paths(cls, paths: Iterable[Sequence[str]]) -> CategoryTree:
        parents: dict[str, str | None] = {}
        for p in paths:
            for i, name in enumerate(_path(p)):
                parent = p[i - 1] if i else None
                if parents.get(name, parent) != parent:
                    raise ValidationError(f"category {name!r} has two parents")
                parents[name] = parent
        return cls(parents)

    def __contains__(self, node: object) -> bool:
        return node in self._parent

    def path(self, node: str) -> tuple[str, ...]:
        if node not in self._parent:
            raise ValidationError(f"unknown category {node!r}")
        out = [node]
        seen = {node}
        while (p := self._parent[out[-1]]) is not None:
            if p in seen:
                raise ValidationError(f"category tree has a cycle through {p!r}")
            seen.add(p)
            out.append(p)
        return tuple(reversed(out))

    def is_descendant(self, node: str, ancestor: str) -> bool:
        """True when ``node`` is ``ancestor`` or lies below it."""
        return ancestor in self.path(node)

    def descendants(self, node: str) -> list[str]:
        """``node`` and every node below it."""
        return [n for n in self._parent if self.is_descendant(n, node)]
