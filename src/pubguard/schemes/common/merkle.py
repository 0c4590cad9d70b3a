"""Merkle trees for amortised signing (the default profile; ARCHITECTURE.md modern choices).

Theory of operation
-------------------
A publisher that signs every publication pays one signature per event and every broker one
verification per event (eventguard.txt §4.4, §4.7). With amortised signing the publisher
hashes a batch of publications into a Merkle tree and signs only the root; each publication
carries its leaf index and the sibling hashes on the path to the root. A broker recomputes the
root from the leaf and the path (``log2(batch)`` hashes), verifies the signature on that root
once, and caches the verified root, so the rest of the batch costs hashes only.

Domain separation (as RFC 6962 §2.1 does): a leaf is hashed as ``H(0x00 || i || n || leaf)``
and an inner node as ``H(0x01 || left || right)``, so a leaf can never be passed off as an
inner node. ``i`` (the leaf's index) and ``n`` (the batch size) are 4-byte big-endian: the root
commits to both, and the publisher signs ``tag || n || root`` (:func:`signed_root`), so a
publication whose ``mi`` or ``mn`` was altered on the way recomputes another root and its
signature fails (a review finding: the size used to travel unsigned). An odd node at the end
of a level is promoted unchanged. A batch of one is the plain case: the root is
``H(0x00 || 0 || 1 || leaf)`` and the path is empty.

Authenticated nodes (a broker's cache, :class:`~pubguard.schemes.common.guards.SignedRootVerifier`):
once a root's signature is verified, every node hashed on the way up and every sibling taken
from the path is authenticated too: it hashes up to that root. :func:`climb` hashes a later
leaf of the same batch only up to the first node already authenticated at the same position
(level, index) and then requires its hash and the rest of the path to equal the
authenticated ones; a leaf of a batch read in order costs one leaf hash and about one inner
hash instead of ``log2(n)``. The outcome is the full recomputation's: equal nodes and equal
remaining path give the verified root; a different node or path gives another root, whose
signature check would fail (``forged``); a leaf hash commits to index and size, so a node
cannot be reached from a leaf that claims another position or batch size.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias

from pubguard.crypto import DIGEST_SIZE, H, sha256_fast
from pubguard.errors import InvalidToken, ValidationError

__all__ = [
    "MAX_BATCH",
    "MAX_PATH",
    "PACKED_PATH_LENGTHS",
    "NodeMap",
    "check_packed_path",
    "climb",
    "merkle_batch",
    "merkle_root",
    "pack_path",
    "root_from_path",
    "signed_root",
    "unpack_path",
]

MAX_BATCH: Final = 1 << 16  # publications under one signed root
MAX_PATH: Final = 16  # sibling hashes on a path (log2 MAX_BATCH)
#: the byte lengths a packed path may have (:func:`check_packed_path` accepts exactly these)
PACKED_PATH_LENGTHS: Final = frozenset(range(0, MAX_PATH * DIGEST_SIZE + 1, DIGEST_SIZE))
_LEAF: Final = b"\x00"
_NODE: Final = b"\x01"


_U32: Final = struct.Struct(">I").pack
_U32X2: Final = struct.Struct(">II").pack


def _leaf(x: bytes, index: int, size: int) -> bytes:
    return H(_LEAF + _U32X2(index, size) + x)


def signed_root(tag: bytes, root: bytes, size: int) -> bytes:
    """What a batch's signature covers: ``tag || n || root`` (``n`` 4 bytes, big-endian)."""
    return tag + _U32(size) + root


#: a node's key in a :data:`NodeMap`: ``level << 17 | position`` (positions < MAX_BATCH)
_LEVEL_SHIFT: Final = 17
assert DIGEST_SIZE == 32  # climb's loop spells it out
#: authenticated nodes of one verified tree: key -> (hash, the packed path above it)
NodeMap: TypeAlias = Mapping[int, tuple[bytes, bytes]]


def _node(left: bytes, right: bytes) -> bytes:
    return H(_NODE + left + right)


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """The root over ``leaves`` (1..MAX_BATCH byte strings)."""
    return merkle_batch(leaves)[0]


def merkle_batch(leaves: Sequence[bytes]) -> tuple[bytes, list[tuple[bytes, ...]]]:
    """``(root, paths)``: ``paths[i]`` is the sibling list for leaf ``i``, bottom-up."""
    n = len(leaves)
    if not 1 <= n <= MAX_BATCH:
        raise ValidationError(f"a Merkle batch holds 1..{MAX_BATCH} leaves, not {n}")
    level = [_leaf(bytes(x), i, n) for i, x in enumerate(leaves)]
    paths: list[list[bytes]] = [[] for _ in range(n)]
    pos = list(range(n))  # position of each leaf's ancestor in the current level
    while len(level) > 1:
        nxt = [_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])  # promoted without a sibling
        for leaf, p in enumerate(pos):
            sib = p ^ 1
            if sib < len(level):
                paths[leaf].append(level[sib])
            pos[leaf] = p // 2
        level = nxt
    return level[0], [tuple(p) for p in paths]


def pack_path(path: Sequence[bytes]) -> bytes:
    """A path as one wire value (its hashes concatenated): a publication's ``meta`` stays a
    flat map of scalars, which the broker core freezes without walking a nested list."""
    return b"".join(path)


def unpack_path(blob: object) -> tuple[bytes, ...]:
    """Inverse of :func:`pack_path`; ValidationError unless whole hashes, at most MAX_PATH."""
    if type(blob) is not bytes:
        raise ValidationError("a Merkle path is one bytes value")
    n, odd = divmod(len(blob), DIGEST_SIZE)
    if odd or n > MAX_PATH:
        raise ValidationError(
            f"a Merkle path is at most {MAX_PATH} whole {DIGEST_SIZE}-byte hashes"
        )
    return tuple(blob[i : i + DIGEST_SIZE] for i in range(0, len(blob), DIGEST_SIZE))


def check_packed_path(blob: object) -> bytes:
    """``blob`` if it is a packed path (:func:`pack_path`: whole hashes, at most MAX_PATH),
    without splitting it; ValidationError otherwise (as :func:`unpack_path`)."""
    if type(blob) is not bytes:
        raise ValidationError("a Merkle path is one bytes value")
    n = len(blob)
    if n % DIGEST_SIZE or n > MAX_PATH * DIGEST_SIZE:
        raise ValidationError(
            f"a Merkle path is at most {MAX_PATH} whole {DIGEST_SIZE}-byte hashes"
        )
    return blob


def root_from_path(leaf: bytes, index: int, path: Sequence[bytes], size: int) -> bytes:
    """Recompute the root of a batch of ``size`` leaves from leaf ``index`` and its path.

    Raises :class:`InvalidToken` if the path does not fit the batch shape (wrong length or
    hash sizes), so a tampered path is indistinguishable from a bad signature.
    """
    if (
        isinstance(index, bool)
        or not isinstance(index, int)
        or isinstance(size, bool)
        or not isinstance(size, int)
        or not 0 <= index < size <= MAX_BATCH
        or len(path) > MAX_PATH
    ):
        raise InvalidToken()
    sha = sha256_fast
    h = sha(_LEAF + _U32X2(index, size) + leaf).digest()
    p, width, k, n = index, size, 0, len(path)
    while width > 1:
        if p ^ 1 < width:
            if k >= n:
                raise InvalidToken()
            s = path[k]
            if type(s) is not bytes or len(s) != DIGEST_SIZE:
                raise InvalidToken()
            h = sha(_NODE + h + s if p & 1 == 0 else _NODE + s + h).digest()
            k += 1
        p >>= 1
        width = (width + 1) >> 1
    if k != len(path):
        raise InvalidToken()
    return h


def climb(
    leaf: bytes, index: int, size: int, blob: bytes, known: NodeMap | None
) -> tuple[bytes, int, list[tuple[int, bytes, bytes]]]:
    """Hash leaf ``index`` of a batch of ``size`` up its packed path ``blob``, until a node of
    ``known`` (the authenticated nodes of the batch's verified tree) or, without one, to the
    root (see the module docstring). Returns ``(hash reached, its node key, new nodes)``,
    each new node as ``(key, hash, packed path above it)``; the caller authenticates them
    (by the known node reached, or by verifying the root's signature) before keeping them.

    Raises :class:`InvalidToken` if ``index``/``size``/``blob`` do not fit a batch shape, or
    if the node reached or the rest of the path differs from the authenticated one."""
    if (
        type(index) is not int
        or type(size) is not int
        or not 0 <= index < size <= MAX_BATCH
        or type(blob) is not bytes
    ):
        raise InvalidToken()
    end = len(blob)
    if end % DIGEST_SIZE or end > MAX_PATH * DIGEST_SIZE:
        raise InvalidToken()
    sha = sha256_fast
    h = sha(_LEAF + _U32X2(index, size) + leaf).digest()
    get = known.get if known is not None else None
    p, width, k, key = index, size, 0, index
    new: list[tuple[int, bytes, bytes]] = []
    # key: this level's node, (level << 17) | p; 32 is DIGEST_SIZE (a constant: hot loop)
    while True:
        if get is not None:
            node = get(key)
            if node is not None:
                if node[0] != h or node[1] != (blob[k:] if k else blob):
                    raise InvalidToken()
                return h, key, new
        if width == 1:
            if k != end:
                raise InvalidToken()
            return h, key, new
        lvl = key - p  # the level's bits
        if p ^ 1 < width:
            s = blob[k : k + 32]
            if len(s) != 32:
                raise InvalidToken()
            k += 32
            rest = blob[k:]
            new.append((key, h, s + rest))
            new.append((key ^ 1, s, h + rest))
            h = sha(_NODE + h + s if p & 1 == 0 else _NODE + s + h).digest()
        else:  # promoted without a sibling: the same hash one level up
            new.append((key, h, blob[k:]))
        p >>= 1
        width = (width + 1) >> 1
        key = lvl + (1 << _LEVEL_SHIFT) + p
