"""The secure scenario behind ``make demo``: a hospital on a multi-domain
broker network with a curious cloud broker.

Theory of operation
-------------------
The embedded configuration (:data:`HOSPITAL_CLUSTER`, no files needed) is a five-broker tree in
three administrative domains::

    h0 (hospital) -- cloud (cloud provider: routes, and records everything it sees)
                        |-- h1 (hospital: paediatric unit)
                        |-- h2 (hospital: geriatric ward)
                        `-- u1 (university: oncology researcher)

Every broker serves the ``default`` and ``psguard`` profiles from public key material only
(``<state>/pki/broker-keys.json``). The key services (PSGuard KDC / default authority, and
EventGuard's MS) run as their own process (``pubguard keyservice serve``, started by
:class:`~pubguard.ops.cluster.LocalCluster` with ``keyservice=True``): every client fetches its
tokens, keys and permits over mutual TLS in its certificate's name, and the policy is enforced
there. The policy (:class:`~pubguard.net.keyservice.kdc.KdcConfig`) authorises each
unit for one age range (psguard.txt §1: ``<topic, age, patientRecord>`` events, ``age`` a
numeric attribute routed on NAKT tokens, ``patientRecord`` secret). The hospital publishes at
``h0``; every event crosses the cloud broker, which routes on tokens and holds what
:class:`CuriousView` shows: the messages it recorded (``record = true``), its SQLite tables
and its log. :func:`scan_for_plaintext` then searches those bytes for every published
``patientRecord``, payload, topic name and ``age`` value in the encodings a plaintext
message would use (msgpack and JSON); the same scan over the plain profile's wire form of the
same events finds every one of them (the control), so an empty result means something.

A last act (default profile; :mod:`pubguard.ops.demo.hospital_revocation`): a ward laptop's
identity is stolen, the hospital's administrator revokes it at the key service while the
network runs, and the thief's publications are dropped as ``revoked`` at the first broker.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgpack

from pubguard.crypto import SecretBytes, random_bytes
from pubguard.errors import DropError
from pubguard.matching.reference import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.net.client.client import Client, Subscription
from pubguard.net.config import ClusterConfig, parse_cluster_config
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.net.tls import tls_passphrase_for_run
from pubguard.ops.cluster import LocalCluster, run_local_cluster
from pubguard.ops.demo.glossary import gloss
from pubguard.ops.demo.hospital_revocation import (
    ADMIN,
    LAPTOP,
    RevocationAct,
    laptop_events,
    revocation_act,
)
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.registry import HOSPITAL, KeyBundle
from pubguard.wire.messages import Publish

__all__ = [
    "CURIOUS",
    "HOSPITAL_CLUSTER",
    "PUBLISHER",
    "UNITS",
    "CuriousView",
    "HospitalDemoResult",
    "hospital_config",
    "hospital_demo",
    "hospital_events",
    "plaintext_needles",
    "scan_for_plaintext",
]

HOSPITAL_CLUSTER: Final = """\
# embedded configuration of `pubguard demo`: three domains, one curious cloud broker
host = "127.0.0.1"
publishers = ["hospital"]
[topology]
kind = "edges"
edges = [["h0", "cloud"], ["cloud", "h1"], ["cloud", "h2"], ["cloud", "u1"]]
[broker]
profiles = ["default", "psguard"]
durable = true
[brokers.h0]
domain = "hospital"
[brokers.cloud]
domain = "cloud"
record = true
[brokers.h1]
domain = "hospital"
[brokers.h2]
domain = "hospital"
[brokers.u1]
domain = "university"
"""
CURIOUS: Final = "cloud"
PUBLISHER: Final = ("hospital", "h0")
TOPICS: Final = ("cancerTrail", "cardiology")
#: (unit, broker, filters it is authorised for and subscribes with)
UNITS: Final = (
    ("paediatric-unit", "h1", tuple(f'topic = "{t}" && age >= 0 && age <= 17' for t in TOPICS)),
    ("oncology-researcher", "u1", ('topic = "cancerTrail" && age >= 20 && age <= 30',)),
    ("geriatric-ward", "h2", tuple(f'topic = "{t}" && age >= 65 && age <= 100' for t in TOPICS)),
)
#: what the researcher also asks for, and the key service refuses (not in its policy)
OVERREACH: Final = ("oncology-researcher", 'topic = "cancerTrail" && age >= 0 && age <= 100')
_DIAGNOSES: Final = (
    ("cancerTrail", "acute lymphoblastic leukaemia", "chemotherapy cycle"),
    ("cancerTrail", "stage II melanoma", "immunotherapy dose"),
    ("cancerTrail", "glioblastoma", "radiotherapy fraction"),
    ("cardiology", "atrial fibrillation", "anticoagulation review"),
    ("cardiology", "congenital septal defect", "echocardiogram"),
    ("cardiology", "heart failure NYHA III", "diuretic titration"),
)
_SURNAMES: Final = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Ferreira", "Novak", "Haddad")
_AGES: Final = (4, 9, 15, 17, 22, 25, 28, 30, 35, 47, 58, 66, 71, 80, 93, 12, 26, 69)
#: seconds between the brokers' fetches of the revocation list in the demo
REVOCATION_POLL: Final = 0.5


def hospital_config(state_dir: Path) -> ClusterConfig:
    """The embedded five-broker, three-domain configuration, with its state in ``state_dir``."""
    return parse_cluster_config(tomllib.loads(HOSPITAL_CLUSTER), base=Path(state_dir))


def hospital_events(n: int, seed: int) -> list[Event]:
    """``n`` seeded ``<topic, age, patientRecord>`` events (psguard.txt §1), ages spread over
    every unit's range and the gaps between them."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic, diagnosis, step = rng.choice(_DIAGNOSES)
        age = _AGES[i % len(_AGES)] if i < len(_AGES) else rng.randrange(0, 101)
        record = (
            f"MRN-{rng.randrange(10**6, 10**7)} {rng.choice(_SURNAMES)}: {diagnosis}, "
            f"{step} {rng.randrange(1, 9)}"
        )
        out.append(
            Event(
                {"topic": topic, "age": age, "patientRecord": record},
                id=f"rec{i:03d}",
                type=HOSPITAL.name,
                payload=f"scan-{i:03d}-{rng.getrandbits(32):08x}.dcm".encode(),
            )
        )
    return out


# -- what a curious broker holds ------------------------------------------------------------------


def plaintext_needles(events: Iterable[Event]) -> dict[str, bytes]:
    """Label -> bytes a broker holding plaintext of ``events`` would have: every record,
    payload, topic and event id as UTF-8, every age as the msgpack / JSON ``age`` entry, and
    the secret attribute's name (the wire carries opaque ids and keyed labels instead:
    ``pubguard.schemes.common.wire_id``)."""
    needles: dict[str, bytes] = {"secret-attribute name patientRecord": b"patientRecord"}
    for e in events:
        needles[f"event id {e.id}"] = str(e.id).encode()
        needles[f"patientRecord of {e.id}"] = str(e["patientRecord"]).encode()
        needles[f"payload of {e.id}"] = e.payload
        needles[f"topic {e['topic']}"] = str(e["topic"]).encode()
        age = e["age"]
        needles[f"age {age} (msgpack)"] = msgpack.packb("age") + msgpack.packb(age)
        needles[f"age {age} (JSON)"] = f'"age": {age}'.encode()
    return needles


def scan_for_plaintext(blobs: Iterable[bytes], needles: dict[str, bytes]) -> list[str]:
    """The labels of ``needles`` found in any of ``blobs``."""
    data = list(blobs)
    return [label for label, n in needles.items() if any(n in b for b in data)]


def read_record(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """A recording broker's log: ``(link, message)`` in arrival order."""
    if not path.exists():
        return []
    up = msgpack.Unpacker(raw=False, strict_map_key=False)
    up.feed(path.read_bytes())
    return [(str(link), m) for link, m in up]


@dataclass
class CuriousView:
    """Everything the curious broker holds after the run."""

    broker: str
    messages: list[tuple[str, dict[str, Any]]]
    files: dict[str, int]  # file -> bytes scanned
    needles: int  # plaintext strings searched for
    hits: list[str]  # labels found in its state (must be empty)
    control_hits: int  # labels found in the plain profile's wire form of the same events

    @property
    def clean(self) -> bool:
        return not self.hits and self.control_hits == self.needles


def curious_view(cluster: LocalCluster, name: str, events: list[Event]) -> CuriousView:
    d = cluster.broker_dir(name)
    files = {p: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}
    needles = plaintext_needles(events)
    plain = PlainScheme()
    control = [
        msgpack.packb(Publish(pe.event_id, "plain", pe.routing, pe.body, pe.meta).to_wire())
        for pe in (plain.protect_event(e, now=0.0) for e in events)
    ] + [json.dumps(e.to_json()).encode() for e in events]
    return CuriousView(
        broker=name,
        messages=read_record(cluster.record_path(name)),
        files={p.name: len(b) for p, b in files.items()},
        needles=len(needles),
        hits=scan_for_plaintext(files.values(), needles),
        control_hits=len(scan_for_plaintext(control, needles)),
    )


# -- the scenario ---------------------------------------------------------------------------------


@dataclass
class HospitalDemoResult:
    profile: str
    domains: dict[str, str | None]  # broker -> domain
    events: list[Event]
    received: dict[str, list[Event]] = field(default_factory=dict)  # unit -> plaintext events
    expected: dict[str, list[str]] = field(default_factory=dict)  # unit -> event ids
    #: event id -> the opaque id its publication carried on the wire (the publisher's keyed hash)
    wire_ids: dict[str, str] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # what the key service refused
    key_sources: dict[str, str] = field(default_factory=dict)  # client -> where its keys came from
    curious: CuriousView | None = None
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)  # before the last act
    revocation: RevocationAct | None = None  # the last act (default profile)
    seconds: float = 0.0

    @property
    def correct(self) -> bool:
        return all(
            sorted(str(e.id) for e in self.received.get(u, [])) == sorted(ids)
            for u, ids in self.expected.items()
        )

    def to_json(self) -> dict[str, Any]:
        cv = self.curious
        return {
            "profile": self.profile,
            "domains": self.domains,
            "events": len(self.events),
            "correct": self.correct,
            "received": {u: sorted(str(e.id) for e in v) for u, v in self.received.items()},
            "expected": {u: sorted(v) for u, v in self.expected.items()},
            "refused": self.refused,
            "key_sources": self.key_sources,
            "curious": None
            if cv is None
            else {
                "broker": cv.broker,
                "messages": len(cv.messages),
                "files": cv.files,
                "needles": cv.needles,
                "plaintext_found": cv.hits,
                "control_found": cv.control_hits,
                "clean": cv.clean,
            },
            "drops": {b: s.get("drops", {}) for b, s in self.statuses.items()},
            "revocation": None if self.revocation is None else self.revocation.to_json(),
            "seconds": round(self.seconds, 2),
        }


async def hospital_demo(
    state_dir: Path | None = None,
    *,
    profile: str = "default",
    events: int = 24,
    seed: int = 7,
    in_process: bool = False,
    say: Callable[[str], None] | None = None,
) -> HospitalDemoResult:
    """Run the scenario (``state_dir`` defaults to a temporary folder removed afterwards)."""
    if profile not in ("default", "psguard"):
        raise ValueError("the hospital demo runs the default or the psguard profile")
    say = say or (lambda s: None)
    with tls_passphrase_for_run():  # identity keys encrypted at rest for the run
        if state_dir is None:
            with tempfile.TemporaryDirectory(prefix="pubguard-demo-") as tmp:
                return await _run(Path(tmp), profile, events, seed, in_process, say)
        return await _run(Path(state_dir), profile, events, seed, in_process, say)


async def _run(
    state: Path, profile: str, n: int, seed: int, in_process: bool, say: Callable[[str], None]
) -> HospitalDemoResult:
    t0 = time.perf_counter()
    cfg = hospital_config(state)
    policy = {unit: list(filters) for unit, _, filters in UNITS}
    kdc = KdcConfig(
        SecretBytes(random_bytes(32)),
        (HOSPITAL,),
        subscribers=policy,
        publishers={PUBLISHER[0]: TOPICS, LAPTOP[0]: TOPICS},
        admins=(ADMIN,),
    )
    bundle = KeyBundle(
        state / "pki" / "keys",
        now=time.time(),
        identities=[PUBLISHER[0], LAPTOP[0]],
        **kdc.bundle_kwargs(),
    )
    evs = hospital_events(n, seed)
    result = HospitalDemoResult(
        profile, {b: cfg.settings(b).get("domain") for b in cfg.brokers}, evs
    )
    async with run_local_cluster(
        cfg,
        state,
        in_process=in_process,
        bundle=bundle,
        keyservice=True,
        kdc=kdc,
        revocation_poll=REVOCATION_POLL,
    ) as cluster:
        say(
            f"{len(cfg.brokers)} brokers up in 3 domains (mutual TLS; they hold public keys only:"
            f" {cluster.keys_path.name})"
        )
        say(
            f"key service (KDC, authority) on port {cluster.keyservice_port}: every client "
            "fetches its own keys over mutual TLS"
        )
        say(gloss("KDC"))
        say(
            "TLS identity keys are encrypted at rest (PKCS#8) under PUBGUARD_TLS_PASSPHRASE, "
            "which the broker processes inherit (random for this run)"
        )
        say(gloss("PKCS#8"))
        clients: list[Client] = []
        subs: dict[str, list[Subscription]] = {}
        ref = ReferenceMatcher()
        try:
            for unit, broker, filters in UNITS:
                c = await cluster.connect(broker, unit, profile=profile)
                clients.append(c)
                result.key_sources[unit] = _key_source(c.scheme)
                subs[unit] = [await c.subscribe(f) for f in filters]
                for i, f in enumerate(filters):
                    ref.add((unit, i), Filter.parse(f))
                await c.flush()
                say(
                    f"{unit} subscribed at {broker} ({cfg.settings(broker).get('domain')}): "
                    + " | ".join(filters)
                )
            who, text = OVERREACH
            try:
                await clients[1].subscribe(text)
            except DropError as exc:
                result.refused.append(f"{who} asked for {text!r}: refused as {exc.reason} ({exc})")
                say(result.refused[-1])
            await cluster.wait_quiescent()
            name, broker = PUBLISHER
            pub = await cluster.connect(broker, name, profile=profile)
            clients.append(pub)
            result.key_sources[name] = _key_source(pub.scheme)
            result.wire_ids = {str(e.id): pub.scheme.wire_id(str(e.id)) for e in evs}
            for i in range(0, len(evs), 8):  # one signature per batch of 8 (Merkle root)
                await pub.publish_batch(evs[i : i + 8])
            await pub.flush()
            say(f"{name} published {len(evs)} <topic, age, patientRecord> events at {broker}")
            await cluster.wait_quiescent()
            result.expected = {u: [] for u, _, _ in UNITS}
            for e in evs:
                for u in sorted({k[0] for k in ref.match(e)}):  # type: ignore[index]
                    result.expected[u].append(str(e.id))
            for unit, ss in subs.items():
                got: dict[str, Event] = {}
                for s in ss:
                    while s.pending:
                        ev = (await s.next(timeout=1)).event
                        got[str(ev.id)] = ev
                result.received[unit] = sorted(got.values(), key=lambda e: str(e.id))
            result.statuses = await cluster.statuses()
            if profile == "default":  # psguard brokers (the paper's) have no revocation
                result.revocation = await revocation_act(cluster, subs, profile=profile, say=say)
        finally:
            for c in clients:
                await c.close()
    lap = [e for part in laptop_events() for e in part] if result.revocation else []
    result.curious = curious_view(cluster, CURIOUS, evs + lap)  # its files, after it stopped
    result.seconds = time.perf_counter() - t0
    return result


def _key_source(scheme: Any) -> str:
    """Where a client's keys come from: the key-service proxy's class (RemoteKdc,
    RemoteAuthority) or the in-process service's."""
    return type(scheme.key_service).__name__
