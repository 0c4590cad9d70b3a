"""eventguard.txt §6.1 Tables 2-3 and §6.2.1 Fig. 7: the load on the MS, a publisher, a
subscriber and a node, from the per-operation cost model, with the paper's costs and ours.

Theory of operation
-------------------
Table 2 gives each entity's computation per operation (ms, ElGamal-512 / MD5 era); Table 3 the
message size overhead. :func:`measure_costs` times the same operations in this implementation
(Ed25519, AES-GCM, SHA-256): the MS issuing a subscription / advertisement permit, the
publisher protecting a publication, a subscriber opening one, and a broker core routing one
(the eventguard routing guard included). Fig. 7 varies the share of subscription and
unsubscription operations (equal rates, §6.2.1) against publications at a constant aggregate
rate; each entity's load is the rate of the operations it takes part in times their cost:
the MS handles every (un)subscription, a publisher ``1/P`` of the publications, a subscriber
``1/NS`` of the (un)subscriptions and the publications delivered to it (``N(w)/NS`` of them),
a node the messages that cross it (a publication ``cost / N`` on average, a subscription
``h / N``). "Relative" is each entity's load divided by its largest over the sweep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from random import Random
from statistics import median
from typing import Any, Final

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.keys.ms import MetaService
from pubguard.model.events import Event
from pubguard.overlay.tree import ary_tree
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.sim.engine import Simulator
from pubguard.wire.messages import Publish

__all__ = ["PAPER_TABLE2_MS", "PAPER_TABLE3_BYTES", "fig7_load", "measure_costs"]

# eventguard.txt Table 2 at |w| = 16 bytes, |pbl| = 300 bytes, m = 1 topic marked (ms)
PAPER_TABLE2_MS: Final = {
    "ms_subscribe": 1.44 + 0.00117 * 16,
    "ms_unsubscribe": 3.14,
    "ms_advertise": 1.4 + 0.00117 * 16,
    "publisher_publish": 1.4 + (300 + 16) * 0.0001,
    "subscriber_receive": 1.7 + (300 + 16) * 0.0001,
    "subscriber_subscribe": 1.7,
    "node_message": 1.7,
}
# Table 3: bytes EventGuard adds to each message on the network (m = 1)
PAPER_TABLE3_BYTES: Final = {
    "subscription": 128,
    "unsubscription": 128,
    "publication": 128 + 16,
    "advertisement": 128,
    "unadvertisement": 128,
}


def _ms(fn: Callable[[int], object], n: int) -> float:
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    return median(samples) * 1e3


def measure_costs(n: int = 200, seed: int = 1) -> dict[str, Any]:
    """Our Table 2 (ms, median of ``n``) and Table 3 (bytes on the wire, plain vs eventguard)."""
    rng = Random(seed)
    ms = MetaService(SecretBytes(rng.randbytes(32)), epoch_length=3600.0)
    now = 1000.0
    sim = Simulator(ary_tree(1, 1), lambda _b: [EventGuardBroker(ms.public_key)], seed=seed)
    pub = EventGuardClient("pub", ms, signing_key=SigningKey.from_seed(rng.randbytes(32)))
    sub = EventGuardClient("sub", ms, signing_key=SigningKey.from_seed(rng.randbytes(32)))
    sim.add_client("pub", "b0", pub)
    sim.add_client("sub", "b1", sub)
    sim.advertise("pub", 'topic = "w"', at=now)
    sim.subscribe("sub", 'topic = "w"', at=now)
    sim.run()
    body = b"x" * 300
    events = [Event({"topic": "w"}, payload=body) for _ in range(n)]
    prot: list[Any] = []
    grants = [ms.subscribe(f"u{i}", "w", now=now) for i in range(n)]
    out = {
        "ms_subscribe": _ms(lambda i: ms.subscribe(f"s{i}", "w", now=now), n),
        "ms_advertise": _ms(lambda i: ms.advertise(f"p{i}", pub.verify_key, "w", now=now), n),
        "ms_unsubscribe": _ms(
            lambda i: ms.unsubscribe(grants[i].permit, grants[i].ust, now=now), n
        ),
        "publisher_publish": _ms(
            lambda i: prot.append(pub.protect_event(events[i], now=sim.now, rng=rng)), n
        ),
    }
    msgs = [Publish(p.event_id, "eventguard", p.routing, p.body, p.meta) for p in prot]
    broker = sim.brokers["b0"]
    out["node_message"] = _ms(lambda i: broker.handle(msgs[i], "pub", sim.now), n)
    out["subscriber_receive"] = _ms(
        lambda i: sub.open_event(
            prot[i].event_id, prot[i].routing, prot[i].body, prot[i].meta, now=sim.now
        ),
        n,
    )
    import msgpack

    plain_pub = len(msgpack.packb({"routing": {"topic": "w"}, "body": body}))
    eg_pub = len(msgpack.packb(msgs[0].to_wire()))
    return {
        "table2_ms": {k: round(v, 4) for k, v in out.items()},
        "table3_publication_bytes": {
            "plain": plain_pub,
            "eventguard": eg_pub,
            "added": eg_pub - plain_pub,
        },
    }


def fig7_load(
    costs: dict[str, float],
    shares: Sequence[float],
    *,
    rate: float = 1000.0,
    publishers: int = 32,
    subscribers: int = 8192,
    nodes: int = 4095,
    h: int = 11,
    pub_cost: float = 100.0,
    n_w: float = 256.0,
) -> list[dict[str, Any]]:
    """Per share of (un)subscriptions in the aggregate ``rate``: each entity's load (ms per
    unit time) and relative load (module docstring)."""
    rows = []
    for s in shares:
        r_su, r_p = rate * s, rate * (1 - s)
        load = {
            "ms": r_su / 2 * costs["ms_subscribe"]
            + r_su / 2 * costs.get("ms_unsubscribe", costs["ms_subscribe"]),
            "publisher": r_p / publishers * costs["publisher_publish"],
            "subscriber": r_su
            / subscribers
            * costs.get("subscriber_subscribe", costs["node_message"])
            + r_p * n_w / subscribers * costs["subscriber_receive"],
            "node": (r_su * h + r_p * pub_cost) / nodes * costs["node_message"],
        }
        rows.append({"share_subscriptions": s, **{k: round(v, 4) for k, v in load.items()}})
    for k in ("ms", "publisher", "subscriber", "node"):
        top = max(r[k] for r in rows) or 1.0
        for r in rows:
            r[f"{k}_relative"] = round(r[k] / top, 4)
    return rows
