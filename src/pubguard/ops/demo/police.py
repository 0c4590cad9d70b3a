"""The police scenario of hermes-encrypted-access-control.txt Fig. 1 on real broker processes.

Theory of operation
-------------------
Four domains share one broker network (Fig. 1): the **Metropolitan Police** (cameras on
``met-cam``, Detective Smith on ``met-det``, their gateway ``met-gw``), the **Congestion Charge
Service** (``ccs1``), **PITO** (``pito1``; PITO owns the ``Numberplate`` type and runs its key-
group manager) and an **ISP** whose broker ``isp1`` carries traffic for everyone and is
authorised for nothing. The type's rendezvous node is chosen by hashing its type id onto the
broker set (§2.1, Fig. 2); the tree is rooted there, so even the Met's own events cross it.

PITO issues capabilities (§2.3): the Met and PITO brokers may read every attribute, the CCS
broker only ``numberplate``; the ISP broker gets none and is refused at group join (Fig. 4).
The cameras publish sightings; the detective subscribes to one plate (her court order); the
CCS subscribes to every plate. ``hermes-attribute`` seals each attribute under its own key at
the cameras' broker (§3.2), so the CCS broker filters and delivers numberplates without ever
holding the location key, and the ISP broker routes by type id alone (§3.3).

What each broker could read is reported from two sides: the key groups the manager admitted
it to, and a scan of everything in its state directory (its recorded frames, SQLite files and
log) for every published plaintext value.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgpack

from pubguard.matching.reference import ReferenceMatcher
from pubguard.model.events import AttributeSpec, Event, EventType
from pubguard.model.filters import Filter
from pubguard.net.config import parse_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.hermes import ALL, HermesClient, rendezvous_node, type_id

__all__ = [
    "NUMBERPLATE",
    "BrokerView",
    "PoliceResult",
    "police_demo",
    "police_rendezvous",
    "police_toml",
]

NUMBERPLATE: Final = EventType(
    "Numberplate",
    (
        AttributeSpec("numberplate", "str"),
        AttributeSpec("location", "str"),
        AttributeSpec("camera", "int"),
    ),
)
PROFILE: Final = "hermes-attribute"
OWNER: Final = "PITO"
DOMAINS: Final = {
    "met-cam": "met",
    "met-det": "met",
    "met-gw": "met",
    "ccs1": "ccs",
    "pito1": "pito",
    "isp1": "isp",
}
#: what PITO authorises each broker to read (Fig. 1); isp1: nothing
GRANTS: Final = {
    "met-cam": (ALL,),
    "met-det": (ALL,),
    "met-gw": (ALL,),
    "pito1": (ALL,),
    "ccs1": ("numberplate",),
}
PLATES: Final = ("LX07KDE", "AB12CDE", "YK61FMA", "LX07KDF")
TARGET: Final = "AB12CDE"  # the detective's court order
PLACES: Final = ("Oxford St", "Euston Rd", "Aldgate", "Vauxhall Br", "Marylebone Rd")


@dataclass
class BrokerView:
    """What one broker could read: admitted attributes and plaintext found in its files."""

    name: str
    domain: str
    role: str
    readable: list[str]
    plaintext_found: list[str]
    publications_routed: int

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PoliceResult:
    rendezvous: str
    brokers: list[BrokerView]
    got: dict[str, list[dict[str, Any]]]
    want: dict[str, list[dict[str, Any]]]
    unauthorised: list[str] = field(default_factory=list)  # in no key group

    @property
    def correct(self) -> bool:
        return all(
            sorted(map(repr, self.got[c])) == sorted(map(repr, self.want[c])) for c in self.want
        )

    @property
    def clean(self) -> bool:
        """No broker found a value of an attribute it was not admitted to."""
        return all(set(b.plaintext_found) <= set(b.readable) for b in self.brokers)

    def to_json(self) -> dict[str, Any]:
        return {
            "rendezvous": self.rendezvous,
            "brokers": [b.to_json() for b in self.brokers],
            "delivered": self.got,
            "expected": self.want,
            "unauthorised": self.unauthorised,
            "correct": self.correct,
            "clean": self.clean,
        }


def _tree(rv: str) -> list[tuple[str, str]]:
    """(parent, child) edges: the Met's brokers behind their gateway, everyone else under
    the rendezvous node, which is the root."""
    edges = []
    for b in DOMAINS:
        if b == rv:
            continue
        parent = "met-gw" if b in ("met-cam", "met-det") and rv != "met-gw" else rv
        if b == "met-gw" and rv in ("met-cam", "met-det"):
            parent = rv
        edges.append((parent, b))
    return edges


def police_toml(rv: str) -> str:
    """The scenario as a ``cluster.toml``: the tree rooted at the rendezvous node ``rv``, each
    broker's domain, and the ``[hermes]`` table (PITO's type, its manager, the grants)."""
    lines = [
        "[topology]",
        'kind = "edges"',
        f"edges = {[list(e) for e in _tree(rv)]!r}".replace("'", '"'),
    ]
    lines += ["[broker]", f'profiles = ["{PROFILE}"]']
    for b, d in DOMAINS.items():
        lines += [f"[brokers.{b}]", f'domain = "{d}"', "record = true"]
    attrs = ", ".join(f'["{a.name}", "{a.type}"]' for a in NUMBERPLATE.attributes)
    lines += [
        "[hermes]",
        f'owner = "{OWNER}"',
        f'type = "{NUMBERPLATE.name}"',
        f"attributes = [{attrs}]",
        'kgm_domain = "pito"',
        "poll = 0.5",
        "[hermes.grants]",
    ]
    lines += [f"{b} = {list(g)!r}".replace("'", '"') for b, g in GRANTS.items()]
    return "\n".join(lines) + "\n"


def _publications_recorded(path: Path) -> int:
    """Publications in a recording broker's log (their ids are opaque wire ids: counted by
    op, not by the application's ``sighting-`` ids, which no broker link carries)."""
    if not path.exists():
        return 0
    with path.open("rb") as f:
        return sum(
            1
            for rec in msgpack.Unpacker(f, raw=False)
            if isinstance(rec, list)
            and len(rec) == 2
            and isinstance(rec[1], dict)
            and rec[1].get("op") == "publish"
        )


def _sightings(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        plate = TARGET if i % 3 == 1 else rng.choice(PLATES)
        out.append(
            {"numberplate": plate, "location": f"{rng.choice(PLACES)} #{i}", "camera": 100 + i}
        )
    return out


async def police_demo(
    *,
    events: int = 9,
    seed: int = 7,
    state_dir: Path | None = None,
    say: Callable[[str], None] = lambda s: None,
) -> PoliceResult:
    """Run the scenario on broker processes; every process is stopped before it returns."""
    with contextlib.ExitStack() as stack:
        if state_dir is None:
            state_dir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="pubguard-police-"))
            )
        return await _run(state_dir, events, seed, say)
    raise AssertionError("unreachable")  # pragma: no cover


def police_rendezvous() -> str:
    """The Numberplate type's rendezvous node among the scenario's brokers (§2.1: hashing the
    type id, which depends on the owner's and the type's names only)."""
    return rendezvous_node(type_id(OWNER, NUMBERPLATE.name), list(DOMAINS))


async def _run(state: Path, events: int, seed: int, say: Callable[[str], None]) -> PoliceResult:
    rng = random.Random(seed)
    rv = police_rendezvous()
    say(f"type id {type_id(OWNER, NUMBERPLATE.name).hex()[:16]}… hashes to rendezvous node {rv}")
    # the cluster runs PITO's key-group manager and hands out the grants ([hermes] table)
    cluster = LocalCluster(parse_cluster_config(tomllib.loads(police_toml(rv)), base=state))
    sightings = _sightings(rng, events)
    filters = {
        "smith": Filter.of(("numberplate", "=", TARGET)),
        "ccs": Filter.of(("numberplate", "prefix", "")),
    }
    views = {"smith": ("numberplate", "location", "camera"), "ccs": ("numberplate",)}
    want = {
        c: [
            {k: v for k, v in e.items() if k in views[c]}
            for e in sightings
            if ReferenceMatcher([(0, f)]).match(e)
        ]
        for c, f in filters.items()
    }
    got: dict[str, list[dict[str, Any]]] = {}
    try:
        say("starting 6 broker processes in 4 domains and PITO's key-group manager")
        await cluster.start()
        hermes = cluster.hermes
        assert hermes is not None
        cap = hermes.capability
        members = hermes.members().get(PROFILE, [])  # asked of PITO's manager process
        say(f"key groups admitted: {', '.join(members)}")
        cam = await cluster.connect(
            "met-cam",
            "camera",
            scheme=HermesClient(PROFILE, "Numberplate", publish=cap("camera", "publish", (ALL,))),
        )
        smith = await cluster.connect(
            "met-det",
            "smith",
            scheme=HermesClient(
                PROFILE, "Numberplate", subscribe=cap("smith", "subscribe", (ALL,))
            ),
        )
        ccs = await cluster.connect(
            "ccs1",
            "ccs",
            scheme=HermesClient(
                PROFILE, "Numberplate", subscribe=cap("ccs", "subscribe", ("numberplate",))
            ),
        )
        try:
            subs = {
                "smith": await smith.subscribe(filters["smith"]),
                "ccs": await ccs.subscribe(filters["ccs"]),
            }
            await smith.flush()
            await ccs.flush()
            await cluster.wait_quiescent()
            say(
                f"camera publishes {len(sightings)} sightings; Smith follows {TARGET}, the CCS every plate"
            )
            for i, e in enumerate(sightings):
                await cam.publish(Event(e, id=f"sighting-{i}"))
            await cam.flush()
            await cluster.wait_quiescent()
            for c, s in subs.items():
                got[c] = []
                while s.pending:
                    got[c].append(dict((await s.next(timeout=5)).event.attrs))
            groups_of = hermes.readable_groups(PROFILE)  # before the manager stops
        finally:
            for cl in (cam, smith, ccs):
                await cl.close()
    finally:
        await cluster.stop()
    out = []
    for b, d in DOMAINS.items():
        readable = sorted(groups_of.get(b, []))
        blobs = [p.read_bytes() for p in cluster.broker_dir(b).iterdir() if p.is_file()]
        found = sorted(
            {
                k
                for e in sightings
                for k, v in e.items()
                if k != "camera" and any(str(v).encode() in x for x in blobs)
            }
        )
        routed = _publications_recorded(cluster.record_path(b))
        role = "rendezvous node" if b == rv else ("type owner" if d == "pito" else "")
        out.append(BrokerView(b, d, role, readable, found, routed))
    unauthorised = sorted(b for b in DOMAINS if b not in groups_of)
    return PoliceResult(rv, out, got, want, unauthorised)
