"""Rendezvous nodes (hermes-encrypted-access-control.txt §2.1, Fig. 2).

Hermes routes each event type through a *rendezvous node*: the type id (a hash, so uniformly
distributed) is mapped onto the broker set, and advertisements and subscriptions meet there.
As Fig. 2 shows, the rendezvous node of a type is therefore usually outside the type owner's
domain, so even domain-internal events cross a foreign broker; that is why the PHB always
encrypts and the plaintext cache (§3.4) matters.

:func:`rendezvous_node` is the mapping: the broker whose id hash is the closest successor of
the type id on a 256-bit ring (a Pastry-like numerically closest node, Scribe's rule). A real
cluster uses it as its configured mapping: the rendezvous broker of a type is the root of that
type's dissemination tree. The simulator's overlay model (Fig. 8) is in
``pubguard.sim.hermes_overlay``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from pubguard.errors import ValidationError

__all__ = ["node_id", "rendezvous_node"]


def node_id(broker: str) -> int:
    """A broker's position on the 256-bit identifier ring."""
    return int.from_bytes(hashlib.sha256(b"pubguard-hermes-node\x00" + broker.encode()).digest())


def rendezvous_node(type_id: bytes, brokers: Iterable[str]) -> str:
    """The broker responsible for ``type_id``: the first whose ring position is at or after
    the type id's (wrapping around)."""
    ring = sorted((node_id(b), b) for b in brokers)
    if not ring:
        raise ValidationError("no brokers to place a rendezvous node on")
    key = int.from_bytes(type_id)
    for pos, b in ring:
        if pos >= key:
            return b
    return ring[0][1]
