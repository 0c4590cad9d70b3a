"""The topic-based workload shapes: ``eventguard`` (eventguard.txt §6.2.1) and ``psguard``
(psguard.txt §5.2).

Both simulate 128 topics whose popularity is Zipf-like: topic ranks are a seeded permutation
and topic of rank ``r`` has weight ``1 / r**s``. Topics are an equality attribute ``topic``;
each topic is its own event type (name = topic), so key services can derive per-topic keys
(eventguard.txt §4.1 ``K(w)``, psguard.txt §3.1 ``K(w) = KH_{rk(KDC)}(w)``).

psguard kinds (psguard.txt §5.2 "Experimental Setup"):

* ``simple``: the filter is ``topic = w``.
* ``numeric``: attribute ``num`` in [0, 256) with least count 4; a subscription is
  ``num >= l && num <= u`` with both ends drawn from Gaussian(128, 32), clipped and aligned to
  the least count (so a range covers whole NAKT leaves, psguard.txt §3.1).
* ``category``: attribute ``category`` holds a node path of a per-topic tree of height 4 whose
  non-leaf nodes have 2-4 children (uniform). A path is ``/`` for the root and
  ``/i/j/.../`` below, so subscribing to a node is ``category prefix "/i/j/"`` and matches
  exactly its subtree. Events carry a leaf.
* ``string``: attribute ``name``, 8 letters over a 4-letter alphabet; half the string topics
  take ``prefix`` constraints and half ``suffix``, of Zipf-distributed length 1-8.

Events pick their topic by popularity; their values are uniform (``num`` in [0, 256), a
random leaf of the category tree, 8 random letters). Every psguard event also has a secret
(non-routable) attribute ``note`` and a payload; every eventguard event is published by a
random publisher on one of its 16 topics (by popularity) and carries a secret ``publisher``
attribute and a payload.

Note: psguard.txt §5.2 reports 82 elements per category tree on average; a height-4 tree with
2-4 (mean 3) children per node has 121 on average, so the paper's trees were likely shallower
or narrower than stated. We follow the stated parameters.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pubguard.model import AttributeSpec, Constraint, Event, EventType, Filter, Op, Subscription

__all__ = [
    "Built",
    "PSGUARD_KINDS",
    "build_eventguard",
    "build_psguard",
    "category_tree",
    "zipf_weights",
]

Progress = Callable[[str, int, int], None]

PSGUARD_KINDS: tuple[str, ...] = ("simple", "numeric", "category", "string")
NUMERIC_RANGE = 256  # psguard.txt §5.2: "range of size 256 units"
NUMERIC_LEAST_COUNT = 4  # "and a least count of 4 units"
NUMERIC_MEAN, NUMERIC_SD = 128.0, 32.0  # "Gaussian distribution with mean 128 and sd 32"
CATEGORY_HEIGHT = 4  # "Category trees were for height 4"
CATEGORY_CHILDREN = (2, 4)  # "number of children ... uniformly ... between 2 to 4"
STRING_MAX_LEN = 8  # "Zipf distributed between 1 and 8"
STRING_ALPHABET = "abcd"
_PAYLOAD_ALPHABET = np.frombuffer((string.ascii_letters + string.digits).encode(), dtype=np.uint8)


@dataclass(slots=True)
class Built:
    """What a shape builder produces; :func:`pubguard.sim.workloads.generate` writes it."""

    types: list[EventType]
    subscriptions: list[Subscription]
    events: list[Event]
    extras: dict[str, Any] = field(default_factory=dict)


def zipf_weights(n: int, s: float, g: np.random.Generator) -> np.ndarray:
    """Probabilities of ``n`` items, Zipf-like with exponent ``s`` over a seeded rank order."""
    ranks = g.permutation(n) + 1
    w = 1.0 / ranks.astype(float) ** s
    return w / w.sum()


def payloads(g: np.random.Generator, m: int, size: int) -> list[bytes]:
    """``m`` ASCII payloads of ``size`` bytes (alphanumeric, so the JSON stays compact)."""
    if size == 0:
        return [b""] * m
    idx = g.integers(0, len(_PAYLOAD_ALPHABET), (m, size))
    raw = _PAYLOAD_ALPHABET[idx]
    return [row.tobytes() for row in raw]


def _unique_ids(subs: list[tuple[str, Filter]]) -> list[Subscription]:
    """Give equal filters one id (``f1``, ``f2``, ... in order of first appearance)."""
    ids: dict[Filter, str] = {}
    out = []
    for sub, f in subs:
        fid = ids.setdefault(f, f"f{len(ids) + 1}")
        out.append(Subscription(sub, f.with_id(fid)))
    return out


def _topic_type(name: str, *extra: AttributeSpec) -> EventType:
    return EventType(name, (AttributeSpec("topic", "str", True, kind="topic"), *extra))


def build_eventguard(
    g: np.random.Generator,
    *,
    topics: int,
    publishers: int,
    subscribers: int,
    events: int,
    topics_per_publisher: int,
    topics_per_subscriber: int,
    zipf_s: float,
    payload_size: int,
    progress: Progress,
) -> Built:
    """eventguard.txt §6.2.1: Zipf topics, publishers on 16 topics, subscribers on 4."""
    names = [f"topic{i:03d}" for i in range(topics)]
    pop = zipf_weights(topics, zipf_s, g)
    pub_topics = [
        np.sort(g.choice(topics, topics_per_publisher, replace=False)) for _ in range(publishers)
    ]
    raw: list[tuple[str, Filter]] = []
    for s in range(1, subscribers + 1):
        chosen = np.sort(g.choice(topics, topics_per_subscriber, replace=False, p=pop))
        raw.extend((f"s{s}", Filter((Constraint("topic", Op.EQ, names[t]),))) for t in chosen)
    progress("subscriptions", subscribers, subscribers)
    pubs = g.integers(0, publishers, events)
    bodies = payloads(g, events, payload_size)
    evs = []
    for i in range(events):
        ts = pub_topics[pubs[i]]
        w = pop[ts] / pop[ts].sum()
        t = names[int(g.choice(ts, p=w))]
        attrs = {"topic": t, "publisher": f"p{pubs[i] + 1}"}
        evs.append(Event(attrs, id=f"e{i + 1}", type=t, payload=bodies[i]))
    progress("events", events, events)
    secret_pub = AttributeSpec("publisher", "str", False)
    extras = {
        "popularity": {names[i]: round(float(pop[i]), 12) for i in range(topics)},
        "publishers": {
            f"p{p + 1}": [names[t] for t in ts.tolist()] for p, ts in enumerate(pub_topics)
        },
    }
    return Built([_topic_type(n, secret_pub) for n in names], _unique_ids(raw), evs, extras)


def category_tree(g: np.random.Generator, height: int = CATEGORY_HEIGHT) -> list[str]:
    """Node paths of a tree of ``height`` edges, 2-4 children per inner node, in preorder."""
    lo, hi = CATEGORY_CHILDREN

    def walk(path: str, depth: int) -> list[str]:
        out = [path]
        if depth < height:
            for c in range(int(g.integers(lo, hi + 1))):
                out.extend(walk(f"{path}{c}/", depth + 1))
        return out

    return walk("/", 0)


def _zipf_lengths(g: np.random.Generator, m: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, STRING_MAX_LEN + 1, dtype=float) ** s
    return g.choice(np.arange(1, STRING_MAX_LEN + 1), m, p=w / w.sum())


def _letters(g: np.random.Generator, n: int) -> str:
    return "".join(STRING_ALPHABET[i] for i in g.integers(0, len(STRING_ALPHABET), n).tolist())


def _aligned_range(g: np.random.Generator) -> tuple[int, int]:
    a, b = np.clip(g.normal(NUMERIC_MEAN, NUMERIC_SD, 2), 0, NUMERIC_RANGE - 1)
    lo, hi = sorted((int(a), int(b)))
    lc = NUMERIC_LEAST_COUNT
    return lo // lc * lc, hi // lc * lc + lc - 1


def build_psguard(
    g: np.random.Generator,
    *,
    topics_per_kind: int,
    subscribers: int,
    events: int,
    topics_per_subscriber: int,
    zipf_s: float,
    payload_size: int,
    progress: Progress,
) -> Built:
    """psguard.txt §5.2: 4 x 32 topics (simple, numeric, category, string), Zipf popularity."""
    kinds = [k for k in PSGUARD_KINDS for _ in range(topics_per_kind)]
    names = [f"{k}{i % topics_per_kind:02d}" for i, k in enumerate(kinds)]
    n = len(names)
    pop = zipf_weights(n, zipf_s, g)
    half = topics_per_kind // 2
    str_kind = {names[i]: ("prefix" if i % topics_per_kind < half else "suffix") for i in range(n)}
    trees = {names[i]: category_tree(g) for i in range(n) if kinds[i] == "category"}
    note = AttributeSpec("note", "str", False)
    types = []
    for name, kind in zip(names, kinds, strict=True):
        extra: list[AttributeSpec] = []
        if kind == "numeric":
            extra.append(
                AttributeSpec(
                    "num", "int", True, NUMERIC_RANGE, NUMERIC_LEAST_COUNT, kind="numeric"
                )
            )
        elif kind == "category":
            extra.append(AttributeSpec("category", "str", True, kind="category"))
        elif kind == "string":
            extra.append(AttributeSpec("name", "str", True, kind=str_kind[name]))
        types.append(_topic_type(name, *extra, note))

    def subscription_filter(t: int) -> Filter:
        w, kind = names[t], kinds[t]
        cs = [Constraint("topic", Op.EQ, w)]
        if kind == "numeric":
            lo, hi = _aligned_range(g)
            cs += [Constraint("num", Op.GE, lo), Constraint("num", Op.LE, hi)]
        elif kind == "category":
            nodes = trees[w]
            cs.append(Constraint("category", Op.PREFIX, nodes[int(g.integers(0, len(nodes)))]))
        elif kind == "string":
            text = _letters(g, int(_zipf_lengths(g, 1, zipf_s)[0]))
            op = Op.PREFIX if str_kind[w] == "prefix" else Op.SUFFIX
            cs.append(Constraint("name", op, text))
        return Filter(tuple(cs))

    raw: list[tuple[str, Filter]] = []
    k = min(topics_per_subscriber, n)
    for s in range(1, subscribers + 1):
        chosen = np.sort(g.choice(n, k, replace=False, p=pop))
        raw.extend((f"s{s}", subscription_filter(int(t))) for t in chosen)
    progress("subscriptions", subscribers, subscribers)
    leaves = {
        w: [p for p in nodes if p.count("/") == CATEGORY_HEIGHT + 1] for w, nodes in trees.items()
    }
    ts = g.choice(n, events, p=pop)
    bodies = payloads(g, events, payload_size)
    evs = []
    for i in range(events):
        t = int(ts[i])
        w, kind = names[t], kinds[t]
        attrs: dict[str, Any] = {"topic": w}
        if kind == "numeric":
            attrs["num"] = int(g.integers(0, NUMERIC_RANGE))
        elif kind == "category":
            attrs["category"] = leaves[w][int(g.integers(0, len(leaves[w])))]
        elif kind == "string":
            attrs["name"] = _letters(g, STRING_MAX_LEN)
        attrs["note"] = _letters(g, 12)
        evs.append(Event(attrs, id=f"e{i + 1}", type=w, payload=bodies[i]))
    progress("events", events, events)
    extras = {
        "popularity": {names[i]: round(float(pop[i]), 12) for i in range(n)},
        "kinds": dict(zip(names, kinds, strict=True)),
        "category_trees": {
            w: {"height": CATEGORY_HEIGHT, "nodes": nodes} for w, nodes in trees.items()
        },
    }
    return Built(types, _unique_ids(raw), evs, extras)
