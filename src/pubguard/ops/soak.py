"""Soak: publish steadily down a chain of broker processes across key-epoch changes while
brokers are killed (``kill -9``) and restarted, then report, per profile and subscriber, what
was lost, duplicated or reordered, and when, beside the epoch changes and the outages
(``pubguard cluster soak``).

Theory of operation
-------------------
A chain ``b0 - b1 - ... - b<n-1>`` of real broker processes over mutual TLS (``LocalCluster``
with a ``KeyBundle`` of short key epochs, ``epoch`` seconds, and ``max_delay``). Per profile,
one publisher on ``b0`` publishes ``rate`` events a second for ``duration`` seconds, each with
its own id; one *durable* subscriber per other broker subscribes to the profile's topic before
the stream starts. A chaos task kills the named brokers at their times and restarts each
``outage`` seconds later from its state directory. When the stream ends, each subscription is
drained until it has every event or goes quiet for ``settle`` seconds.

What it shows (docs/network.md, "Key epochs" and "Reliability and durability"): without
outages every profile is lossless across epoch changes (renewals, leases, ``forwarded_grace``);
with them, plain and eventguard stay lossless (durable links and outboxes, replay state that
commits with its batch, ``T(w)`` surviving epochs), and so do psguard and default when an
outage spans an ahead renewal and the change that follows: their renewal cannot get past the
broker that is down, so the brokers route the new epoch's publications to a link that is down
or catching up, or park them for a client until its renewal comes (catch-up routing,
``broker/catch_up.py``). They still lose what an outage holds back for longer than
``max_delay`` past the change. ``catch_up=False`` (``--no-catch-up``) lists each broker's
child and subscribers in ``no_catch_up``, which shows what catch-up routing saves. The
chaos soak that this module makes repeatable found four faults, since fixed; its
report names each lost range with the epoch change and the outage it follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pubguard.errors import ConfigError
from pubguard.model import Event
from pubguard.net.config import chain_toml, parse_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL, KeyBundle

__all__ = ["SOAK_PROFILES", "Outage", "SoakResult", "SubscriberResult", "parse_kill", "soak"]

#: the profiles a soak can run
SOAK_PROFILES: Final = ("plain", "psguard", "default", "eventguard", "narada")
HEARTBEAT: Final = 0.5  # seconds: a dead peer is noticed quickly, leases are swept often


@dataclass(frozen=True, slots=True)
class Outage:
    """Broker ``broker`` killed at ``at`` and restarted at ``back`` (seconds from the start;
    ``back`` is when it listens again)."""

    broker: str
    at: float
    back: float


@dataclass(slots=True)
class SubscriberResult:
    profile: str
    broker: str
    sent: int
    received: int
    duplicates: int
    in_order: bool
    renewals: int
    #: lost events as ranges ``(first id, last id, first sent at, last sent at)``, seconds
    lost: list[tuple[int, int, float, float]] = field(default_factory=list)

    @property
    def lost_count(self) -> int:
        return sum(b - a + 1 for a, b, _, _ in self.lost)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "broker": self.broker,
            "sent": self.sent,
            "received": self.received,
            "lost": self.lost_count,
            "duplicates": self.duplicates,
            "in_order": self.in_order,
            "renewals": self.renewals,
            "lost_ranges": [
                {"first": a, "last": b, "from_s": round(t0, 3), "to_s": round(t1, 3)}
                for a, b, t0, t1 in self.lost
            ],
        }


@dataclass(slots=True)
class SoakResult:
    profiles: tuple[str, ...]
    brokers: int
    epoch: float
    max_delay: float
    duration: float
    epoch_changes: list[float]  # seconds from the start
    outages: list[Outage]
    subscribers: list[SubscriberResult]
    drops: dict[str, dict[str, int]]  # per broker, since its last start
    catch_up: bool = True  # False: every broker listed its child and clients in no_catch_up

    def lossless(self, profile: str) -> bool:
        return all(
            s.lost_count == 0 and s.duplicates == 0 and s.in_order
            for s in self.subscribers
            if s.profile == profile
        )

    def context(self, t: float) -> str:
        """What a lost range starting at ``t`` follows: the last epoch change and an outage
        that was running, or had ended less than five seconds before."""
        said = []
        changes = [c for c in self.epoch_changes if c <= t + 0.05]
        if changes:
            said.append(f"{t - changes[-1]:.2f} s after the epoch change at {changes[-1]:.2f} s")
        for o in self.outages:
            if o.at <= t <= o.back:
                said.append(f"{o.broker} down")
            elif o.back < t <= o.back + 5.0:
                said.append(f"{t - o.back:.2f} s after {o.broker} came back")
        return "; ".join(said) or "-"

    def to_json(self) -> dict[str, Any]:
        return {
            "profiles": list(self.profiles),
            "brokers": self.brokers,
            "epoch_s": self.epoch,
            "max_delay_s": self.max_delay,
            "duration_s": self.duration,
            "epoch_changes_s": [round(c, 3) for c in self.epoch_changes],
            "outages": [
                {"broker": o.broker, "at_s": round(o.at, 3), "back_s": round(o.back, 3)}
                for o in self.outages
            ],
            "subscribers": [s.to_json() for s in self.subscribers],
            "lossless": {p: self.lossless(p) for p in self.profiles},
            "catch_up": self.catch_up,
            "drops": self.drops,
        }


def parse_kill(text: str) -> tuple[str, float]:
    """``b1@8`` -> ("b1", 8.0); ConfigError with the accepted form otherwise."""
    name, sep, at = text.partition("@")
    try:
        t = float(at)
    except ValueError:
        t = -1.0
    if not sep or not name or t < 0:
        raise ConfigError(f"--kill {text!r}: expected BROKER@SECONDS, for example b1@8")
    return name, t


def _check(
    profiles: Sequence[str],
    brokers: int,
    kills: Sequence[tuple[str, float]],
    duration: float,
    epoch: float,
    outage: float,
) -> None:
    bad = [p for p in profiles if p not in SOAK_PROFILES]
    if not profiles or bad:
        raise ConfigError(
            f"soak profiles: {', '.join(bad) or 'none given'} (known: {', '.join(SOAK_PROFILES)})"
        )
    if not 2 <= brokers <= 8:
        raise ConfigError("a soak chain has 2 to 8 brokers")
    if not (epoch >= 1.0 and duration > 0 and outage > 0):
        raise ConfigError("epoch must be >= 1 s, duration and outage positive")
    names = {f"b{i}" for i in range(brokers)}
    for b, at in kills:
        if b not in names:
            raise ConfigError(f"--kill {b}@{at:g}: no broker {b} in a chain of {brokers}")
        if at >= duration:
            raise ConfigError(f"--kill {b}@{at:g}: after the stream ends ({duration:g} s)")
    ordered = sorted(kills, key=lambda k: k[1])
    for (_, a), (b, t) in zip(ordered, ordered[1:], strict=False):
        if t < a + outage + 1.0:
            raise ConfigError(f"--kill {b}@{t:g}: at least outage + 1 s after the one before")


async def soak(
    profiles: Sequence[str],
    *,
    brokers: int = 3,
    epoch: float = 3.0,
    duration: float = 30.0,
    kills: Sequence[tuple[str, float]] = (),
    outage: float = 1.5,
    max_delay: float = 10.0,
    rate: float = 30.0,
    settle: float = 5.0,
    state_dir: Path | None = None,
    seed: int = 1,
    tick: Callable[[float], None] | None = None,
    catch_up: bool = True,
) -> SoakResult:
    """Run one soak (see the module docstring); ``tick(seconds)`` reports progress.
    ``catch_up=False``: each broker lists its child and its subscribers in ``no_catch_up``
    (routing by matching alone), to measure what catch-up routing saves."""
    profiles = tuple(dict.fromkeys(profiles))
    _check(profiles, brokers, kills, duration, epoch, outage)
    if state_dir is None:
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            return await soak(
                profiles,
                brokers=brokers,
                epoch=epoch,
                duration=duration,
                kills=kills,
                outage=outage,
                max_delay=max_delay,
                rate=rate,
                settle=settle,
                state_dir=Path(tmp),
                seed=seed,
                tick=tick,
                catch_up=catch_up,
            )
    text = chain_toml(
        brokers,
        ("plain", *profiles),
        publishers=[f"pub-{p}" for p in profiles],
        heartbeat_interval=HEARTBEAT,
    )
    if not catch_up:
        for i in range(brokers):
            peers = [f"b{i + 1}"] if i + 1 < brokers else []
            peers += [f"sub-{p}-b{i}" for p in profiles] if i else []
            text += f"[brokers.b{i}]\nno_catch_up = {json.dumps(peers)}\n"
    cfg = parse_cluster_config(tomllib.loads(text), base=state_dir)
    now = time.time()
    bundle = KeyBundle(
        state_dir / "keys",
        now=now,
        types=(HOSPITAL,),
        identities=[f"pub-{p}" for p in profiles],
        epoch_length=epoch,
        origin=now - epoch / 2,
        max_delay=max_delay,
    )
    cluster = LocalCluster(cfg, bundle=bundle)
    await cluster.start()
    try:
        r = await _run(
            cluster,
            bundle,
            profiles,
            brokers,
            epoch,
            duration,
            kills,
            outage,
            max_delay,
            rate,
            settle,
            seed,
            tick,
        )
        r.catch_up = catch_up
        return r
    finally:
        await cluster.stop()


async def _run(
    cluster: LocalCluster,
    bundle: KeyBundle,
    profiles: tuple[str, ...],
    brokers: int,
    epoch: float,
    duration: float,
    kills: Sequence[tuple[str, float]],
    outage: float,
    max_delay: float,
    rate: float,
    settle: float,
    seed: int,
    tick: Callable[[float], None] | None,
) -> SoakResult:
    leaves = [f"b{i}" for i in range(1, brokers)]
    subs: dict[tuple[str, str], Any] = {}
    clients: list[Any] = []
    for p in profiles:
        for b in leaves:
            c = await cluster.connect(b, f"sub-{p}-{b}", profile=p, durable=True, **_topics(p))
            clients.append(c)
            subs[(p, b)] = (c, await c.subscribe(f'topic = "soak-{p}"'))
            await c.flush()
    pubs = {}
    for p in profiles:
        pubs[p] = await cluster.connect("b0", f"pub-{p}", profile=p, **_topics(p))
        clients.append(pubs[p])
        if p == "eventguard":
            await pubs[p].advertise(f'topic = "soak-{p}"')  # eventguard.txt §4.3
        await pubs[p].flush()
    await cluster.wait_quiescent()
    t0 = time.time()
    stamps: dict[str, dict[int, float]] = {p: {} for p in profiles}
    outages: list[Outage] = []
    rng = random.Random(seed)

    async def stream(p: str) -> None:
        i = 0
        while time.time() < t0 + duration:
            await pubs[p].publish(
                Event(
                    {"topic": f"soak-{p}", "age": 30, "patientRecord": f"soak {i}"},
                    id=f"{p}-{i}",
                    type=HOSPITAL.name,
                )
            )
            stamps[p][i] = time.time() - t0
            i += 1
            await asyncio.sleep(rng.uniform(0.5, 1.5) / rate)
        await pubs[p].flush()

    async def chaos() -> None:
        for b, at in sorted(kills, key=lambda k: k[1]):
            await asyncio.sleep(max(0.0, t0 + at - time.time()))
            down = time.time() - t0
            cluster.kill(b)
            await asyncio.sleep(outage)
            await cluster.restart(b)
            outages.append(Outage(b, down, time.time() - t0))

    async def clock() -> None:
        while tick is not None and time.time() < t0 + duration:
            tick(min(duration, time.time() - t0))
            await asyncio.sleep(0.25)

    await asyncio.gather(*(stream(p) for p in profiles), chaos(), clock())
    with contextlib.suppress(Exception):
        await cluster.wait_connected(timeout=10)
    results = []
    for (p, b), (c, s) in subs.items():
        sent = len(stamps[p])
        got: list[str] = []
        quiet_until = time.monotonic() + settle
        while len(got) < sent and time.monotonic() < quiet_until:
            try:
                got.append((await s.next(timeout=0.5)).event.id)
                quiet_until = time.monotonic() + settle
            except TimeoutError:
                pass
            except StopAsyncIteration:  # ended: a renewal the key service refused
                break
        results.append(_judge(p, b, stamps[p], got, c.renewals))
    ms = bundle.ms
    first = ms.epoch_at(t0)
    changes = [ms.epoch_end(e) - t0 for e in range(first, first + int(duration / epoch) + 2)]
    drops = {}
    for i in range(brokers):
        with contextlib.suppress(Exception):
            drops[f"b{i}"] = dict((await cluster.status(f"b{i}"))["drops"])
    for c in clients:
        with contextlib.suppress(Exception):
            await c.close()
    return SoakResult(
        profiles,
        brokers,
        epoch,
        max_delay,
        duration,
        [c for c in changes if 0 <= c <= duration],
        outages,
        results,
        drops,
    )


def _topics(profile: str) -> dict[str, Any]:
    """narada: the KMC topic a client needs a token and key for (narada §IV)."""
    return {"topics": (f"soak-{profile}",)} if profile == "narada" else {}


def _judge(
    profile: str, broker: str, stamps: dict[int, float], got: list[str], renewals: int
) -> SubscriberResult:
    counts = Counter(got)
    seen = [int(g.rsplit("-", 1)[1]) for g in dict.fromkeys(got)]
    lost: list[tuple[int, int, float, float]] = []
    have = set(seen)
    for i in sorted(stamps):
        if i in have:
            continue
        if lost and lost[-1][1] == i - 1:
            a, _, ta, _ = lost[-1]
            lost[-1] = (a, i, ta, stamps[i])
        else:
            lost.append((i, i, stamps[i], stamps[i]))
    return SubscriberResult(
        profile,
        broker,
        len(stamps),
        len(have),
        sum(n - 1 for n in counts.values()),
        seen == sorted(seen),
        renewals,
        lost,
    )
