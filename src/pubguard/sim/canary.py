"""eventguard.txt Fig. 5 measured on real cores: does a malicious broker see what it routes?

Every broker in ``malicious`` is an :class:`~pubguard.sim.malicious.Eavesdrop`: it forwards
everything and keeps the bytes of each publication it routes. The publisher (at the root)
publishes events whose payload carries a random canary; a delivery is *exposed* when an
eavesdropper on its root-to-subscriber path has bytes containing its canary (confidentiality lost; a broker that can read a
publication can also rewrite it undetected under plain, so integrity goes with it, §6.2.1).
Under plain the fraction exposed is ``1 - (1 - p)^h`` along the routed paths; under
eventguard the body is AES-GCM under K(w) the brokers never hold, so the scan finds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from random import Random
from typing import Any

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.keys.ms import MetaService
from pubguard.model.events import Event
from pubguard.overlay.tree import Tree
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.schemes.plain import PlainScheme
from pubguard.sim.internet import internet_topology
from pubguard.sim.malicious import AdversarySimulator, Eavesdrop

__all__ = ["canary_scan"]


def canary_scan(
    tree: Tree, malicious: Iterable[str], *, profile: str, events: int, seed: int = 0
) -> dict[str, Any]:
    """Publish ``events`` canaried events to a subscriber on every leaf; return how many an
    eavesdropping broker could read (see the module docstring)."""
    rng = Random(seed)
    spies = {b: Eavesdrop(keep_bytes=True) for b in malicious}
    if profile == "eventguard":
        ms = MetaService(SecretBytes(rng.randbytes(32)), epoch_length=3600.0)
        schemes: Any = lambda _b: [EventGuardBroker(ms.public_key)]  # noqa: E731
        client: Any = lambda name: EventGuardClient(  # noqa: E731
            name, ms, signing_key=SigningKey.from_seed(rng.randbytes(32))
        )
    else:
        schemes = [PlainScheme()]
        client = lambda _name: PlainScheme()  # noqa: E731
    sim = AdversarySimulator(internet_topology(tree, rng), schemes, seed=seed, behaviours=spies)
    sim.add_client("pub", tree.root, client("pub"))
    sim.advertise("pub", 'topic = "news"', at=0.0)
    for leaf in tree.leaves:
        sim.add_client(f"s-{leaf}", leaf, client(f"s-{leaf}"))
        sim.subscribe(f"s-{leaf}", 'topic = "news"', at=0.0)
    sim.run()
    canary_of: dict[str, bytes] = {}
    for _ in range(events):
        canary = f"CANARY-{rng.getrandbits(64):016x}".encode()
        ev = Event({"topic": "news"}, payload=canary)
        canary_of[sim.publish("pub", ev, at=sim.now + 0.01)] = canary
    sim.run()
    blobs = {b: b"".join(s.seen) for b, s in spies.items()}
    read_by = {c: {b for b, blob in blobs.items() if c in blob} for c in canary_of.values()}
    delivered = exposed = 0
    for leaf in tree.leaves:
        on_path = set(tree.path_from_root(leaf))
        for d in sim.clients[f"s-{leaf}"].deliveries:
            delivered += 1
            exposed += bool(read_by[canary_of[d.event_id]] & on_path)
    return {
        "profile": profile,
        "events": events,
        "delivered": delivered,
        "exposed": exposed,
        "fraction_exposed": exposed / delivered if delivered else 0.0,
        "publications_read": sum(1 for r in read_by.values() if r),
        "eavesdroppers": len(spies),
    }
