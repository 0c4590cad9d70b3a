"""Numeric attribute key tree (NAKT) identifiers, minimal range covers and hash-chain derivation.

Theory of operation (psguard.txt §3.1). A numeric attribute ``num`` takes values in
``[0, |R| - 1]``; ``lc`` (least count) is the smallest subscribable range. The NAKT is a complete
binary tree of depth ``m = log2(|R| / lc)``: the node labelled by the bit string ``xi`` covers
the values ``v`` whose ``ktid(v)`` starts with ``xi``, where ``ktid(v)`` is the ``m``-bit binary
form of ``floor(v / lc)``. The root is the empty string ``""`` (the paper's null label).

Keys flow downwards only: ``K_{xi||b} = H(K_xi || b)`` with ``b`` the ASCII byte ``0`` or ``1``
(``H`` = SHA-256), so a key for node ``xi`` yields the key of every descendant and nothing else.
The same step, ``H(K || label)``, builds the string prefix/suffix chains and category trees in
:mod:`pubguard.keys.kdc`; :func:`derive_path` is that one generic step.

A subscription ``[low, high]`` is split into the *minimal cover*: the fewest NAKT nodes whose
value ranges partition ``[low, high]`` exactly (the canonical dyadic decomposition, at most
``2m - 2`` nodes, psguard.txt §3.1 "Number of Authorization Keys"). Bounds must sit on ``lc``
boundaries (``low % lc == 0`` and ``(high + 1) % lc == 0``) unless ``snap=True`` widens the range
outwards to whole ``lc`` buckets (which then authorises the whole buckets).

With the native backend (:mod:`pubguard.native`) :func:`derive_path`, :func:`derive_from` and
:func:`cover_keys` run in ``pubguard._native`` (trees up to :data:`NATIVE_MAX_DEPTH`); this
code stays the reference, and the differential tests hold the two equal.

Everything here is pure; errors are :class:`~pubguard.errors.ValidationError` for malformed
parameters and :class:`~pubguard.errors.KeyError_` for refused derivations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pubguard import native as nb
from pubguard.crypto import SecretBytes
from pubguard.crypto.primitives import sha256_fast
from pubguard.crypto.secret import raw
from pubguard.errors import KeyError_, ValidationError

__all__ = [
    "MAX_DEPTH",
    "check_ktid",
    "cover_heap",
    "cover_keys",
    "derive_from",
    "derive_path",
    "ktid",
    "ktid_range",
    "nakt_cover",
    "nakt_cover_heap",
    "nakt_depth",
    "nakt_leaf_bounds",
]

#: Deepest NAKT accepted (|R| / lc <= 2**64); deeper trees are certainly a mistake.
MAX_DEPTH = 64

#: Deepest tree the native backend derives (heap indices are 64-bit there); deeper trees, up
#: to :data:`MAX_DEPTH`, take the Python path.
NATIVE_MAX_DEPTH = 62

_BIT = {"0": b"0", "1": b"1"}


def _int(name: str, x: object) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValidationError(f"{name} must be an integer, got {type(x).__name__}")
    return x


def nakt_depth(range_size: int, least_count: int) -> int:
    """``m = log2(|R| / lc)``; ValidationError unless ``|R| / lc`` is a power of two."""
    r = _int("range_size", range_size)
    lc = _int("least_count", least_count)
    if r <= 0 or lc <= 0:
        raise ValidationError(f"range size {r} and least count {lc} must be positive")
    if r % lc:
        raise ValidationError(f"range size {r} is not a multiple of the least count {lc}")
    leaves = r // lc
    if leaves & (leaves - 1):
        raise ValidationError(f"|R| / lc = {r} / {lc} = {leaves} is not a power of two")
    m = leaves.bit_length() - 1
    if m > MAX_DEPTH:
        raise ValidationError(f"NAKT depth {m} exceeds the limit {MAX_DEPTH}")
    return m


def _check_value(v: object, r: int, what: str = "value") -> int:
    v = _int(what, v)
    if not 0 <= v < r:
        raise ValidationError(f"{what} {v} is outside the attribute range [0, {r - 1}]")
    return v


def ktid(value: int, range_size: int, least_count: int) -> str:
    """psguard.txt §3.1: ``ktid(v)`` = the m-bit binary string of ``floor(v / lc)``."""
    m = nakt_depth(range_size, least_count)
    v = _check_value(value, range_size)
    return format(v // least_count, f"0{m}b") if m else ""


def ktid_range(node: str, range_size: int, least_count: int) -> tuple[int, int]:
    """The inclusive value range ``(low, high)`` covered by NAKT node ``node``."""
    m = nakt_depth(range_size, least_count)
    check_ktid(node, m)
    span = least_count << (m - len(node))
    low = int(node, 2) * span if node else 0
    return low, low + span - 1


def check_ktid(node: object, depth: int | None = None) -> str:
    """Validate a key tree identifier: a string of ``0``/``1`` (at most ``depth`` bits)."""
    if not isinstance(node, str) or node.strip("01"):
        raise ValidationError(f"a ktid is a string of 0 and 1 bits, got {node!r}")
    if depth is not None and len(node) > depth:
        raise ValidationError(f"ktid {node!r} is deeper than the tree (depth {depth})")
    return node


def nakt_cover(
    low: int, high: int, range_size: int, least_count: int, *, snap: bool = False
) -> list[str]:
    """Minimal exact cover of ``[low, high]`` by NAKT nodes, left to right.

    psguard.txt §3.1: |R| = 32, lc = 4: cover of [8, 19] is ["01", "100"], of [16, 31] is ["1"].
    """
    return [bin(n)[3:] for n in nakt_cover_heap(low, high, range_size, least_count, snap=snap)]


def nakt_cover_heap(
    low: int, high: int, range_size: int, least_count: int, *, snap: bool = False
) -> list[int]:
    """:func:`nakt_cover` as heap indices (see :func:`cover_heap`)."""
    return cover_heap(*nakt_leaf_bounds(low, high, range_size, least_count, snap=snap))


def nakt_leaf_bounds(
    low: int, high: int, range_size: int, least_count: int, *, snap: bool = False
) -> tuple[int, int, int]:
    """Validate a subscription range; return it in leaf units with the depth: ``(lo, hi, m)``."""
    m = nakt_depth(range_size, least_count)
    low = _check_value(low, range_size, "low")
    high = _check_value(high, range_size, "high")
    if low > high:
        raise ValidationError(f"empty range: low {low} > high {high}")
    lc = least_count
    if snap:
        low, high = low - low % lc, high - high % lc + lc - 1
    elif low % lc or (high + 1) % lc:
        raise ValidationError(
            f"range [{low}, {high}] does not sit on least-count ({lc}) boundaries; "
            "pass snap=True to widen it to whole buckets"
        )
    return low // lc, high // lc, m


def cover_heap(lo: int, hi: int, m: int) -> list[int]:
    """The minimal cover of the leaf interval ``[lo, hi]`` as heap indices, left to right.

    Heap numbering: the root is 1 and node ``n`` has children ``2n`` (bit 0) and ``2n + 1``
    (bit 1), so the ktid of ``n`` is ``bin(n)[3:]``. The bottom-up segment-tree walk emits the
    canonical dyadic decomposition, which is the minimum number of nodes (property-tested
    against a brute force in tests/keys/test_kdc_nakt.py).
    """
    left: list[int] = []
    right: list[int] = []
    lo += 1 << m
    hi += (1 << m) + 1  # half-open
    while lo < hi:
        if lo & 1:
            left.append(lo)
            lo += 1
        if hi & 1:
            hi -= 1
            right.append(hi)
        lo >>= 1
        hi >>= 1
    left.extend(reversed(right))
    return left


def cover_keys(root: bytes, lo: int, hi: int, m: int) -> list[tuple[int, bytes]]:
    """Keys of the minimal cover of leaf interval ``[lo, hi]``: ``[(heap index, key)]``, left
    to right, in one top-down walk from the root key (no memo, no recursion).

    psguard.txt §3.1 counts the KDC's cost as at most ``4 log2(|R|/lc) - 2`` hashes: down the
    common prefix of ``lo`` and ``hi``, then down each boundary, hashing every sibling that
    falls wholly inside the range. Same nodes as :func:`cover_heap` (property-tested).
    """
    n = nb.NATIVE
    if n is not None and m <= NATIVE_MAX_DEPTH and len(root) == 32:
        return n.cover_keys(root, lo, hi, m)  # type: ignore[no-any-return]
    h = sha256_fast
    zero, one = b"0", b"1"
    k, node, d = root, 1, 0
    while True:  # common prefix, until the node is covered or the bounds diverge
        rem = m - d
        mask = (1 << rem) - 1
        if lo & mask == 0 and hi & mask == mask:
            return [(node, k)]
        bl = (lo >> (rem - 1)) & 1
        if bl != (hi >> (rem - 1)) & 1:
            break
        k = h(k + (one if bl else zero)).digest()
        node, d = 2 * node + bl, d + 1
    left: list[tuple[int, bytes]] = []
    cur, ck = 2 * node, h(k + zero).digest()
    for depth in range(d + 1, m + 1):  # left boundary: emit right siblings inside the range
        rem = m - depth
        if lo & ((1 << rem) - 1) == 0:
            left.append((cur, ck))
            break
        if (lo >> (rem - 1)) & 1:
            cur, ck = 2 * cur + 1, h(ck + one).digest()
        else:
            left.append((2 * cur + 1, h(ck + one).digest()))
            cur, ck = 2 * cur, h(ck + zero).digest()
    left.reverse()
    cur, ck = 2 * node + 1, h(k + one).digest()
    for depth in range(d + 1, m + 1):  # right boundary: emit left siblings inside the range
        rem = m - depth
        mask = (1 << rem) - 1
        if hi & mask == mask:
            left.append((cur, ck))
            break
        if (hi >> (rem - 1)) & 1:
            left.append((2 * cur, h(ck + zero).digest()))
            cur, ck = 2 * cur + 1, h(ck + one).digest()
        else:
            cur, ck = 2 * cur, h(ck + zero).digest()
    return left


def derive_path(key: bytes | SecretBytes, labels: Sequence[str]) -> bytes:
    """Walk down a key tree: ``K <- H(K || utf8(label))`` for each label (one hash per step).

    For NAKT ids the labels are the characters ``0``/``1`` (psguard.txt §3.1:
    ``K_{xi||b} = H(K_xi || b)``); for string chains they are characters; for category trees
    they are node names.
    """
    k = raw(key)
    n = nb.NATIVE
    if n is not None:
        if isinstance(labels, str):
            return n.derive_chars(k, labels)  # type: ignore[no-any-return]
        if isinstance(labels, list | tuple) and all(isinstance(lab, str) for lab in labels):
            return n.derive_labels(k, labels)  # type: ignore[no-any-return]
    h = sha256_fast
    for lab in labels:
        b = _BIT.get(lab) if isinstance(lab, str) and len(lab) == 1 else None
        k = h(k + (b if b is not None else lab.encode())).digest()
    return k


def _derive_from(auth_ktid: str, auth_key: bytes | SecretBytes, target_ktid: str) -> SecretBytes:
    """Derive the key of ``target_ktid`` from the authorisation key of ``auth_ktid``.

    psguard.txt §3.1 "Matching Publications with Subscriptions": allowed only when
    ``auth_ktid`` is a prefix of ``target_ktid``; otherwise :class:`KeyError_`.
    """
    n = nb.NATIVE
    if n is not None:  # checks, walk and the SecretBytes in one call
        k = n.derive_secret(auth_ktid, auth_key, target_ktid)
        if k is not None:  # None: not bits, not a prefix, odd types; the reference decides
            return k  # type: ignore[no-any-return]
    check_ktid(auth_ktid)
    check_ktid(target_ktid)
    if not target_ktid.startswith(auth_ktid):
        raise KeyError_(
            f"ktid {auth_ktid!r} is not a prefix of {target_ktid!r}: "
            "not derivable from this authorisation key"
        )
    k = raw(auth_key)
    h = sha256_fast
    bit = _BIT
    for c in target_ktid[len(auth_ktid) :]:
        k = h(k + bit[c]).digest()
    return SecretBytes(k)


#: :func:`_derive_from` as users call it. With the extension built it is the native
#: ``derive_from_api``: one native call with no Python frame around it, which runs the native
#: walk while :data:`pubguard.native.NATIVE` is set (read per call, so
#: :func:`pubguard.native.use` still switches it) and calls :func:`_derive_from` for anything
#: else (the Python backend, and every input the fast path declines: the reference raises).
derive_from: Callable[[str, bytes | SecretBytes, str], SecretBytes] = _derive_from
if nb.NATIVE is not None:
    nb.NATIVE.bind_derive_from(_derive_from)
    derive_from = nb.NATIVE.derive_from_api
