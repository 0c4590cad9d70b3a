"""Dict-of-sets indexes (a key -> the set of members filed under it), kept free of empty sets.

Several indexes above this layer file members under keys and must drop a key once its last
member leaves, so that the index stays bounded by what is live: the broker's covering table
(:mod:`pubguard.broker.covering`: forwarded filters by anchor constraint and by constraint) and
PSGuard's token matcher (:mod:`pubguard.schemes.psguard.match`: clauses by anchor token, tokens
by their 64-bit prefix). They share this one helper.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

__all__ = ["discard_member"]

K = TypeVar("K", bound=Hashable)
M = TypeVar("M", bound=Hashable)


def discard_member(index: dict[K, set[M]], key: K, member: M) -> None:
    """Remove ``member`` from ``index[key]`` if there, and ``key`` itself once its set is empty.
    A missing key or member is no error (a no-op)."""
    members = index.get(key)
    if members is not None:
        members.discard(member)
        if not members:
            del index[key]
