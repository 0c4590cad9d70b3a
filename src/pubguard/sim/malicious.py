"""Malicious broker models for the simulator: dropping, eavesdropping, and where they sit.

Theory of operation
-------------------
eventguard.txt §5 and psguard.txt §4.2 study brokers that run the protocol but misbehave on
the publications they route:

- *selective dropping* (eventguard.txt §5: "per topic token helps to alleviate selective
  message dropping"): the node drops every publication whose routing token (topic, or the
  token a secure profile routes on) is in a chosen set, and forwards the rest;
- *random dropping* (§5, what the r-resilient network guard is for): each publication is
  dropped with probability ``prob`` (1 drops all of them);
- *eavesdropping* (psguard.txt §4.2 "honest-but-curious" routing nodes): the node forwards
  everything but records what it sees on its own routed paths: a count per routing token, and
  optionally the bytes, which a canary scan searches for plaintext (eventguard.txt Fig. 5);
- *flooding* is :mod:`pubguard.sim.flood` (eventguard.txt §4.7, Fig. 3 and Fig. 13).

A behaviour only filters the *actions* the real broker core returned (a forwarded or
delivered publication is removed, or recorded); subscriptions and advertisements pass, so a
malicious broker keeps its place in the routing state, as a stealthy one would.
:class:`AdversarySimulator` is the engine with a behaviour per broker.

Placement (eventguard.txt §6.2.1 Fig. 6): *sparse* draws the malicious nodes uniformly;
*clustered* grows ``clusters`` connected groups from random seeds by breadth-first search
over the tree, round robin, until the count is reached.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any, Final

import msgpack

from pubguard.broker.actions import DeliverTo, Forward
from pubguard.errors import ValidationError
from pubguard.overlay.tree import Tree
from pubguard.sim.engine import Simulator
from pubguard.wire.messages import Deliver, Publish

__all__ = [
    "MAX_RECORDED_BYTES",
    "AdversarySimulator",
    "Behaviour",
    "Eavesdrop",
    "RandomDrop",
    "SelectiveDrop",
    "place_malicious",
    "publication_of",
    "routing_token",
]

#: an eavesdropper keeps at most this many raw messages (the counts are unbounded)
MAX_RECORDED_BYTES: Final = 100_000

TokenOf = Callable[[Publish], Hashable]


def routing_token(msg: Publish) -> Hashable:
    """What a routing node can key a publication on: the ``topic`` attribute when the routing
    part shows one (plain), else the whole routing part (a token profile's opaque tokens)."""
    topic = msg.routing.get("topic")
    if topic is not None:
        return topic if isinstance(topic, Hashable) else repr(topic)
    return repr(sorted(msg.routing.items(), key=lambda kv: kv[0]))


def publication_of(action: Any) -> Publish | None:
    """The publication a forward or a delivery carries (None for any other action)."""
    if isinstance(action, Forward) and isinstance(action.message, Publish):
        return action.message
    if isinstance(action, DeliverTo) and isinstance(action.message, Deliver):
        ev = action.message.event
        return ev if isinstance(ev, Publish) else None
    return None


class Behaviour:
    """What a malicious broker does to the publications it routes (default: nothing)."""

    def filter(self, broker: str, actions: list[Any], rng: Random) -> list[Any]:
        return actions


@dataclass(slots=True)
class SelectiveDrop(Behaviour):
    """Drop publications whose routing token is in ``tokens``; forward the rest."""

    tokens: frozenset[Hashable]
    token_of: TokenOf = routing_token
    dropped: int = 0

    def filter(self, broker: str, actions: list[Any], rng: Random) -> list[Any]:
        out, gone = [], set()
        for a in actions:
            pub = publication_of(a)
            if pub is not None and self.token_of(pub) in self.tokens:
                gone.add(pub.event_id)
                continue
            out.append(a)
        self.dropped += len(gone)  # publications, not the copies it would have sent
        return out


@dataclass(slots=True)
class RandomDrop(Behaviour):
    """Drop each publication (every copy it would send on) with probability ``prob``."""

    prob: float = 1.0
    dropped: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.prob <= 1.0:
            raise ValidationError("drop probability must be in [0, 1]")

    def filter(self, broker: str, actions: list[Any], rng: Random) -> list[Any]:
        pubs = {id(p) for a in actions if (p := publication_of(a)) is not None}
        if not pubs or (self.prob < 1.0 and rng.random() >= self.prob):
            return actions
        self.dropped += 1
        return [a for a in actions if publication_of(a) is None]


@dataclass(slots=True)
class Eavesdrop(Behaviour):
    """Forward everything; count each distinct publication's token once (psguard.txt §4.2:
    what a curious routing node observes on its own routed paths) and keep its bytes."""

    token_of: TokenOf = routing_token
    keep_bytes: bool = False
    counts: Counter[Hashable] = field(default_factory=Counter)
    event_ids: set[str] = field(default_factory=set)
    seen: list[bytes] = field(default_factory=list)

    def filter(self, broker: str, actions: list[Any], rng: Random) -> list[Any]:
        for a in actions:
            pub = publication_of(a)
            if pub is None or pub.event_id in self.event_ids:
                continue
            self.event_ids.add(pub.event_id)
            self.counts[self.token_of(pub)] += 1
            if self.keep_bytes and len(self.seen) < MAX_RECORDED_BYTES:
                self.seen.append(msgpack.packb(pub.to_wire()))
        return actions


class AdversarySimulator(Simulator):
    """:class:`~pubguard.sim.engine.Simulator` whose malicious brokers apply a
    :class:`Behaviour` to the actions their (real) core returns."""

    def __init__(
        self, *args: Any, behaviours: Mapping[str, Behaviour] | None = None, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.behaviours: dict[str, Behaviour] = dict(behaviours or {})
        unknown = set(self.behaviours) - set(self.brokers)
        if unknown:
            raise ValidationError(f"behaviour for unknown brokers {sorted(unknown)[:5]}")

    def _at_broker(self, bid: str, src: str, payload: Any, now: float) -> None:
        beh = self.behaviours.get(bid)
        if beh is None:
            super()._at_broker(bid, src, payload, now)
            return
        raw = payload[1] if isinstance(payload, tuple) and payload[:1] == ("raw",) else payload
        actions = beh.filter(bid, self.brokers[bid].handle(raw, src, now), self.rng)
        self._enqueue_actions(bid, actions, now)


def place_malicious(
    tree: Tree,
    count: int,
    rng: Random,
    *,
    clusters: int = 0,
    exclude: Collection[str] = (),
) -> frozenset[str]:
    """``count`` malicious nodes of ``tree`` (never one in ``exclude``): uniformly at random
    (``clusters=0``, sparse) or as ``clusters`` connected groups grown from random seeds."""
    pool = [n for n in tree.nodes if n not in exclude]
    if not 0 <= count <= len(pool):
        raise ValidationError(f"cannot place {count} malicious nodes among {len(pool)}")
    if clusters < 0:
        raise ValidationError("clusters must be >= 0")
    if clusters == 0 or count == 0:
        return frozenset(rng.sample(pool, count))
    allowed = set(pool)
    chosen: set[str] = set()
    fronts = [deque([s]) for s in rng.sample(pool, min(clusters, count))]
    while len(chosen) < count:
        grew = False
        for front in fronts:
            while front and len(chosen) < count:
                n = front.popleft()
                if n in chosen:
                    continue
                chosen.add(n)
                grew = True
                front.extend(m for m in _neighbours(tree, n) if m in allowed and m not in chosen)
                break
        if not grew:  # every cluster is walled in: reseed one
            rest = [n for n in pool if n not in chosen]
            fronts.append(deque([rng.choice(rest)]))
    return frozenset(chosen)


def _neighbours(tree: Tree, n: str) -> Iterable[str]:
    p = tree.parent[n]
    if p is not None:
        yield p
    yield from tree.children[n]
