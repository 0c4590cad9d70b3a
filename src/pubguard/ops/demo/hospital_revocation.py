"""The hospital demo's last act: a stolen publisher identity is revoked while the network runs.

Theory of operation
-------------------
A ward laptop (identity :data:`LAPTOP`, a publisher of the hospital's policy) publishes at its
ward's broker and its events reach the authorised units. Then the laptop is stolen: the
hospital's administrator (:data:`ADMIN`, named in the KDC policy's ``admins``) revokes the
identity at the key service (``authority_revoke``, over mutual TLS with the admin's own
certificate). Every broker polls the authority-signed revocation list
(:mod:`pubguard.net.server.revocation`) and, within one poll, revokes the laptop's publication key.
The thief still holds the laptop's key, certificate and a valid publish permit, and publishes:
narada §IV-H / eventguard §4.4 -- the first honest broker, the ward's own, drops each event
with reason ``revoked`` and answers the thief with an error; no subscriber gets any of them.
:class:`RevocationAct` records what happened, for the demo's printout and its tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from pubguard.crypto.x509 import Role
from pubguard.model import Event
from pubguard.net.client.client import Subscription
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL

__all__ = ["ADMIN", "LAPTOP", "RevocationAct", "laptop_events", "revocation_act"]

ADMIN: Final = "hospital-admin"
LAPTOP: Final = ("ward-laptop", "h2")  # (identity, its ward's broker)
WAIT: Final = 20.0
CLIENT_LOG: Final = "pubguard.net.client"  # where a client logs the errors brokers answer


@dataclass
class RevocationAct:
    identity: str
    broker: str
    before: dict[str, list[str]] = field(default_factory=dict)  # unit -> laptop events received
    serial: int | None = None  # the list serial after the revocation
    learned: dict[str, float] = field(default_factory=dict)  # broker -> s until it held it
    thief: list[str] = field(default_factory=list)  # event ids the thief published
    errors: list[tuple[str, str]] = field(default_factory=list)  # (event id, reason) replies
    drops: dict[str, int] = field(default_factory=dict)  # broker -> publications dropped revoked
    leaked: dict[str, list[str]] = field(default_factory=dict)  # unit -> thief events received
    #: event id -> the opaque id its publication carried on the wire (the laptop's keyed hash)
    wire_ids: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Before: delivered; after: dropped at the first broker only, answered, not received."""
        return (
            any(self.before.values())
            and not any(self.leaked.values())
            and self.drops == {self.broker: len(self.thief)}
            and sorted(i for i, r in self.errors if r == "revoked") == sorted(self.thief)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "broker": self.broker,
            "before": self.before,
            "serial": self.serial,
            "learned_in_s": self.learned,
            "thief": self.thief,
            "errors": [list(e) for e in self.errors],
            "drops": self.drops,
            "leaked": self.leaked,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
        }


def laptop_events() -> tuple[list[Event], list[Event]]:
    """(what the laptop publishes before the theft, what the thief publishes after): each
    within some unit's authorised range, so only revocation keeps the thief's out."""

    def ev(i: int, topic: str, age: int, record: str) -> Event:
        return Event(
            {"topic": topic, "age": age, "patientRecord": record},
            id=f"lap{i:02d}",
            type=HOSPITAL.name,
            payload=f"laptop-{i:02d}".encode(),
        )

    before = [
        ev(0, "cardiology", 8, "MRN-5550100 Ward: ECG follow-up, routine"),
        ev(1, "cancerTrail", 70, "MRN-5550101 Ward: oncology consult booked"),
    ]
    after = [
        ev(2, "cardiology", 9, "FORGED-1 discharge order, cancel medication"),
        ev(3, "cancerTrail", 25, "FORGED-2 trial arm changed to placebo"),
        ev(4, "cardiology", 80, "FORGED-3 do-not-resuscitate order"),
    ]
    return before, after


async def _drain(subs: dict[str, list[Subscription]]) -> dict[str, list[str]]:
    got: dict[str, list[str]] = {}
    for unit, ss in subs.items():
        ids: list[str] = []
        for s in ss:
            while s.pending:
                ids.append(str((await s.next(timeout=1)).event.id))
        got[unit] = sorted(set(ids))
    return got


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger ``name`` at ERROR for the block (its warnings would interleave the output)."""
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


async def revocation_act(
    cluster: LocalCluster,
    subs: dict[str, list[Subscription]],
    *,
    profile: str,
    say: Callable[[str], None],
) -> RevocationAct:
    """Run the act on a running hospital cluster whose units hold ``subs`` (drained first)."""
    t0 = time.perf_counter()
    name, broker = LAPTOP
    act = RevocationAct(name, broker)
    before, after = laptop_events()
    await _drain(subs)
    laptop = await cluster.connect(broker, name, profile=profile)
    act.wire_ids = {str(e.id): laptop.scheme.wire_id(str(e.id)) for e in before + after}
    try:
        await laptop.publish_batch(before)
        await laptop.flush()
        await cluster.wait_quiescent()
        act.before = await _drain(subs)
        got = ", ".join(f"{u}: {' '.join(ids)}" for u, ids in act.before.items() if ids)
        say(f"{name} published {len(before)} events at {broker}; delivered ({got})")
        # the laptop is stolen: the administrator revokes its identity at the key service
        cluster.pki.identity(ADMIN, Role.CLIENT)
        keyservice = cluster.keyservice
        assert keyservice is not None

        def revoke() -> dict[str, Any]:
            with keyservice.client(ADMIN) as ks:  # over mutual TLS, as the administrator
                return ks.call("authority_revoke", identity=name)

        t_rev = time.monotonic()
        out = await asyncio.to_thread(revoke)
        act.serial = int(out["serial"])
        say(
            f"{name} reported stolen: {ADMIN} revoked it at the key service (signed revocation "
            f"list serial {act.serial})"
        )
        waiting = set(cluster.config.brokers)
        deadline = time.monotonic() + WAIT
        while waiting and time.monotonic() < deadline:
            for b in sorted(waiting):
                rv = (await cluster.status(b)).get("revocation") or {}
                if (rv.get("serial") or 0) >= act.serial:
                    act.learned[b] = round(time.monotonic() - t_rev, 2)
                    waiting.discard(b)
            await asyncio.sleep(0.05)
        slowest = max(act.learned.values(), default=0.0)
        say(
            f"{len(act.learned)}/{len(cluster.config.brokers)} brokers verified and applied the "
            f"list within {slowest:.1f} s (they poll every {cluster.revocation_poll} s)"
        )
        # the thief publishes with the stolen key, certificate and (still valid) permit
        drops0 = {b: s["drops"].get("revoked", 0) for b, s in (await cluster.statuses()).items()}
        with _quiet(CLIENT_LOG):  # the act reports the thief's errors itself, in one line
            await laptop.publish_batch(after)
            await laptop.flush()
            act.thief = [str(e.id) for e in after]
            await cluster.wait_quiescent()
            deadline = time.monotonic() + WAIT
            while len(laptop.errors) < len(after) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        # a broker's error names the opaque wire id; the publisher maps it back to its own id
        mine = {w: i for i, w in act.wire_ids.items()}
        act.errors = [(mine.get(e.ref, e.ref), e.reason.value) for e in laptop.errors]
        sts = await cluster.statuses()
        act.drops = {
            b: n for b, s in sts.items() if (n := s["drops"].get("revoked", 0) - drops0.get(b, 0))
        }
        act.leaked = {u: ids for u, ids in (await _drain(subs)).items() if ids}
    finally:
        await laptop.close()
    act.seconds = time.perf_counter() - t0
    where = ", ".join(f"{b}: {n}" for b, n in act.drops.items()) or "nowhere"
    n = sum(map(len, act.leaked.values()))
    say(
        f"the thief published {len(after)} events as {name}: dropped as revoked at {where}; "
        + (f"{n} reached a subscriber" if n else "none reached a subscriber")
    )
    return act
