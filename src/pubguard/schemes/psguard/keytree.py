"""PSGuard key trees: the event key ``K(e)`` and the leaves it is built from (psguard.txt §3.1;
the shared half of :mod:`~pubguard.schemes.psguard.publisher` and
:mod:`~pubguard.schemes.psguard.authority`).

``K(e) = H(S(w) || X)`` with ``X = A XOR_{a present} (absent_a XOR leaf_a)``: every routable
attribute of the event's type takes part, a present one through its key-tree leaf (NAKT
``K_{ktid(v)}``, category node, prefix/suffix chain, equality leaf), an absent one through the
reserved *absent* node below its root. Publishers derive leaves from the roots
(:func:`event_leaf`), subscribers from their authorisation nodes (:func:`derive_leaf`); both
meet at the same ``X`` only when the subscriber's nodes cover the event's values.
"""

from __future__ import annotations

from typing import Any

from pubguard.crypto import KH, H, SecretBytes, aad_for
from pubguard.crypto.secret import raw
from pubguard.keys.kdc import TopicKeys, derive_category, derive_prefix, derive_suffix
from pubguard.keys.nakt import derive_from, derive_path, ktid
from pubguard.model import AttributeSpec, EventType
from pubguard.schemes.psguard import tokens as tk_
from pubguard.schemes.psguard.record import ABSENT_NODE
from pubguard.schemes.psguard.tokens import (
    NodeGrant,
    attr_kind,
    category_path,
    typed_value,
)

# the contract between the publisher and the KDC authority: both must derive the same ``X``
__all__ = [
    "absent_all",
    "absent_key",
    "derive_leaf",
    "event_key",
    "event_leaf",
    "hint_aad",
    "hint_key",
    "kind_tree",
    "node_key",
    "spec_key",
    "spec_tree",
    "xor32",
]


def event_leaf(tk: TopicKeys, spec: AttributeSpec, v: Any) -> bytes:
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


def kind_tree(kind: str) -> str:
    """The key tree of an attribute kind (plain equality values live in category trees)."""
    return "category" if kind == "plain" else kind


def spec_tree(spec: AttributeSpec) -> str:
    """The key tree that holds an attribute's keys (plain equality values live in category
    trees, psguard.txt §3.1)."""
    return kind_tree(attr_kind(spec))


def absent_key(root: bytes) -> bytes:
    """Key of the reserved *absent* node below an attribute's tree root: held by whoever holds
    the root (the attribute is unconstrained), by no cover node below the root."""
    return derive_path(root, [ABSENT_NODE])


def xor32(a: bytes, b: bytes) -> bytes:
    """XOR of two 32-byte keys (how ``X`` accumulates its terms)."""
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(32, "big")


def absent_all(tk: TopicKeys, et: EventType, topic_attr: str | None) -> bytes:
    """``A = XOR of the absent keys of every routable attribute of the type``."""
    x = bytes(32)
    for spec in et.routable:
        if spec.name != topic_attr:
            x = xor32(x, absent_key(tk.root(spec_tree(spec), spec.name)))
    return x


def event_key(scope_key: bytes, x: bytes) -> bytes:
    """``K(e) = H(S(w) || X)``, ``X = A XOR_{a present} (absent_a XOR leaf_a)``: every routable
    attribute of the type takes part, absent ones through their absent node, so a filter on an
    attribute the event lacks cannot open it."""
    return H(b"psguard-K(e)\x00" + scope_key + x)


def hint_key(scope_key: bytes) -> bytes:
    """``KH(S(w), "psguard-hint")``: the key of the routable values' hint, held by the scope's
    subscribers (psguard.txt sends ``ktid`` in the clear; this profile hides it from brokers)."""
    return KH(scope_key, b"psguard-hint")


def hint_aad(epoch: int, event_id: str) -> bytes:
    """The hint's associated data: it binds the hint to its epoch and event."""
    return aad_for(b"psguard-hint", "hint", epoch, event_id.encode())


def spec_key(a: AttributeSpec) -> tuple[object, ...]:
    """What of an attribute's spec its keys and tokens depend on (a cache key)."""
    return (a.type, a.routable, a.range_size, a.least_count, a.kind)


def node_key(tk: TopicKeys, n: NodeGrant) -> SecretBytes:
    """The KDC's key of an authorisation node (psguard.txt §3.1 minimal cover)."""
    if n.kind == "numeric":
        return tk.numeric_key(n.attr, n.node)  # type: ignore[arg-type]
    if n.kind == "category":
        return tk.category_key(n.attr, n.node)  # type: ignore[arg-type]
    if n.kind == "prefix":
        return tk.prefix_key(n.attr, n.node)  # type: ignore[arg-type]
    return tk.suffix_key(n.attr, n.node)  # type: ignore[arg-type]


def derive_leaf(kind: str, spec: AttributeSpec, node: NodeGrant, key: SecretBytes, v: Any) -> bytes:
    """The leaf below an authorisation node ``node`` (key ``key``) that value ``v`` lies at:
    the subscriber's half of :func:`event_leaf`."""
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
