"""Fuzz: ~10,000 random and mutated message dicts through decoding and ``handle``.

No exception may escape, and whenever the broker refuses a message as malformed or of an
unknown type its routing state must be exactly what it was before.
"""

from __future__ import annotations

import copy
import math
import os
import random
from typing import Any

from pubguard.broker import Broker, Drop
from pubguard.errors import DropReason
from pubguard.schemes import PlainScheme
from tests.broker.helpers import GuardScheme, pub, sub

N = int(os.environ.get("PUBGUARD_FUZZ_MESSAGES", "10000"))

ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**63,
    2**64,
    -(2**64),
    1.5,
    math.nan,
    math.inf,
    "",
    "x",
    "é" * 300,
    b"",
    b"\x00\xff",
    [],
    [1, "a"],
    {},
    {"a": 1},
    {1: 2},
    [[[[[]]]]],
    ("t",),
    {"constraints": []},
    {"constraints": [["a", ">", 1]]},
    {"constraints": [["a", "prefix", 3]]},
    {"constraints": [["", "=", 1]]},
    {"constraints": [["a", "exists", 1]]},
    set(),
    object(),
]
KEYS = [
    "op",
    "sub_id",
    "adv_id",
    "event_id",
    "profile",
    "filter",
    "routing",
    "body",
    "meta",
    "sub_ids",
    "event",
    "ref",
    "of",
    "reason",
    "detail",
    "seq",
    "zzz",
]
OPS = [
    "subscribe",
    "unsubscribe",
    "advertise",
    "unadvertise",
    "publish",
    "deliver",
    "ack",
    "error",
    "heartbeat",
    "launch",
    "",
    "SUBSCRIBE",
]


def templates() -> list[dict[str, Any]]:
    p = pub("e0", x=1, sym="IBM")
    return [
        sub("s0", 'x > 1 && sym prefix "I"').to_wire(),
        sub("g0", "x > 1", profile="guarded", owner="a").to_wire(),
        {"op": "unsubscribe", "sub_id": "s1", "profile": "plain"},
        {
            "op": "advertise",
            "adv_id": "a0",
            "profile": "plain",
            "filter": {"constraints": [["x", ">", 0]]},
        },
        {"op": "unadvertise", "adv_id": "a1", "profile": "plain"},
        p.to_wire(),
        pub("g1", profile="guarded", meta={"sig": b"ok"}, x=3).to_wire(),
        {
            "op": "deliver",
            "sub_ids": ["s"],
            "event": {k: v for k, v in p.to_wire().items() if k != "op"},
        },
        {"op": "ack", "ref": "s", "of": "subscribe"},
        {"op": "error", "ref": "s", "reason": "forged", "detail": ""},
        {"op": "heartbeat", "seq": 1},
    ]


def mutate(rng: random.Random, d: Any, depth: int = 0) -> Any:
    if not isinstance(d, dict) or not d:
        return rng.choice(ODD_VALUES)
    d = dict(d)
    for _ in range(rng.randint(1, 3)):
        k = rng.choice(list(d) + KEYS)
        roll = rng.random()
        if roll < 0.25:
            d.pop(k, None)
        elif roll < 0.55:
            d[k] = copy.deepcopy(rng.choice(ODD_VALUES)) if k != "op" else rng.choice(OPS)
        elif roll < 0.8 and isinstance(d.get(k), dict) and depth < 3:
            d[k] = mutate(rng, d[k], depth + 1)
        elif isinstance(d.get(k), list) and d[k]:
            lst = list(d[k])
            lst[rng.randrange(len(lst))] = rng.choice(ODD_VALUES)
            d[k] = lst
        else:
            d[k] = copy.deepcopy(rng.choice(ODD_VALUES))
    return d


def fresh_broker() -> Broker:
    b = Broker("fz", [PlainScheme(), GuardScheme()])
    b.add_link("up", "parent")
    b.add_link("kid", "child")
    b.add_link("c", "client")
    b.handle(sub("s1", "x > 0"), "c", 0.0)
    b.handle(sub("s2", 'sym = "IBM"'), "kid", 0.0)
    b.handle(sub("g2", "x > 1", profile="guarded", owner="a"), "c", 0.0)
    return b


def test_fuzz_messages_never_escape_and_never_corrupt_state() -> None:
    rng = random.Random(20240611)
    tpl = templates()
    links = ["up", "kid", "c"]
    refused = accepted = 0
    b = fresh_broker()
    for i in range(N):
        if i % 500 == 0:
            b = fresh_broker()  # keep the tables small so snapshots stay cheap
        roll = rng.random()
        if roll < 0.1:
            msg: Any = rng.choice(ODD_VALUES)
        elif roll < 0.2:
            msg = {rng.choice(KEYS): rng.choice(ODD_VALUES) for _ in range(rng.randint(0, 5))}
        else:
            msg = mutate(rng, rng.choice(tpl))
        before = b.routing_snapshot()
        actions = b.handle(msg, rng.choice(links), float(i))
        reasons = {a.reason for a in actions if isinstance(a, Drop)}
        if reasons & {DropReason.MALFORMED, DropReason.UNKNOWN_TYPE}:
            refused += 1
            assert b.routing_snapshot() == before, msg
        else:
            accepted += 1
    assert refused > N // 2 and accepted > 0  # the fuzzer explores both sides
