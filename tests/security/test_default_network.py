"""Security of the default profile over real broker processes: the default 7-broker binary tree
(b0; b1, b2; leaves b3..b6), mutual TLS on loopback, durable state, each broker recording every
frame it reads and writes after TLS decryption (``secure_broker.py``). One cluster per module.

- a canary in the secret attribute and the payload reaches every authorised subscriber and
  appears in no broker's log, SQLite file or captured frame;
- a subscriber authorised for ages 20-30 cannot open the age-35 publication a broker captured;
- forged, tampered, replayed, stale, unauthorised and revoked-publisher publications are each
  dropped at the first honest broker (b3, the publisher's) with their reason in ``status``, and
  no other broker sees them; a replay after that broker's ``kill -9`` is REPLAYED;
- after an epoch change, a subscriber that unsubscribed cannot open the new epoch's events.

(The flooding broker is the simulator test ``tests/schemes/test_default_attacks.py``.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import DropReason, InvalidToken
from pubguard.model import Event, Filter
from pubguard.net.client.client import Client
from pubguard.net.config import load_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.base import ClientScheme, ProtectedEvent
from pubguard.schemes.default.broker import DEFAULT
from pubguard.schemes.default.client import DefaultClient
from pubguard.schemes.registry import KeyBundle
from pubguard.wire.framing import FrameDecoder
from pubguard.wire.messages import Unsubscribe
from tests.loopback import PATIENCE, LoopThread

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
CANARY = "CANARY-secure-net-5a9c41"
YOUNG = 'topic = "cardio" && age >= 20 && age <= 30'
EPOCH = 600.0  # key epochs of ten minutes: the epoch test publishes "ten minutes ahead"
MAX_DELAY = 3600.0  # brokers accept timestamps an hour off (so the next epoch is reachable)
POLICY = {
    "young": [YOUNG],
    "old": ['topic = "cardio" && age >= 31'],
    "any": ['topic = "cardio"'],
    "stay": [YOUNG],
    "leave": [YOUNG],
}
PUBLISHERS = {"hospital": ["cardio"], "hospital2": ["cardio"], "gone": ["cardio"]}


class SecureCluster(LocalCluster):
    """LocalCluster whose broker processes run ``tests.security.secure_broker``."""

    def __init__(self, config: Any, keys: Path) -> None:
        super().__init__(config)
        self.keys = keys

    async def _launch(self, name: str) -> None:
        (self.broker_dir(name) / "port").unlink(missing_ok=True)
        log = (self.broker_dir(name) / "broker.log").open("ab")
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.security.secure_broker",
                "--config",
                str(self.config_path(name)),
                "--keys",
                str(self.keys),
                "--profiles",
                DEFAULT,
                "--capture",
                "-vv",
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()


class Shifted(ClientScheme):
    """A client scheme whose clock runs ``offset`` seconds ahead (to act in the next epoch)."""

    def __init__(self, inner: DefaultClient, offset: float = 0.0) -> None:
        self.inner, self.offset, self.profile = inner, offset, inner.profile

    def protect_filter(self, f: Filter, *, now: float, rng: Any = None) -> Any:
        return self.inner.protect_filter(f, now=now + self.offset, rng=rng)

    def protect_advertisement(self, f: Filter, *, now: float, rng: Any = None) -> Any:
        return self.inner.protect_advertisement(f, now=now + self.offset, rng=rng)

    def protect_event(self, e: Event, *, now: float, rng: Any = None) -> Any:
        return self.inner.protect_event(e, now=now + self.offset, rng=rng)

    def open_event(self, eid: str, routing: Any, body: bytes, meta: Any, *, now: float) -> Event:
        return self.inner.open_event(eid, routing, body, meta, now=now + self.offset)


class Canned(ClientScheme):
    """An attacker's client scheme: publishes exactly the protected events it is handed."""

    profile = DEFAULT

    def __init__(self) -> None:
        self.next: ProtectedEvent | None = None

    def protect_event(self, e: Event, *, now: float, rng: Any = None) -> ProtectedEvent:
        assert self.next is not None
        pe, self.next = self.next, None
        return pe

    def protect_filter(self, f: Filter, *, now: float, rng: Any = None) -> Any:
        raise NotImplementedError

    protect_advertisement = protect_filter

    def open_event(self, *a: Any, **kw: Any) -> Event:
        raise InvalidToken()


@dataclasses.dataclass
class Net:
    loop: LoopThread
    bundle: KeyBundle
    cluster: SecureCluster
    clients: dict[str, Client]
    schemes: dict[str, Any]
    subs: dict[str, Any]
    state: Path
    sent: dict[str, Any] = dataclasses.field(default_factory=dict)

    def run(self, coro: Any, timeout: float = 4 * PATIENCE) -> Any:
        return self.loop.run(coro, timeout)


def patient(age: int, eid: str) -> Event:
    return Event(
        {"topic": "cardio", "age": age, "patientRecord": CANARY},
        id=eid,
        type="patient",
        payload=CANARY.encode(),
    )


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    state = tmp_path_factory.mktemp("secure")
    now = time.time()
    bundle = KeyBundle(
        state / "keys",
        now=now,
        subscribers=POLICY,
        publishers=PUBLISHERS,
        identities=list(PUBLISHERS),
        epoch_length=EPOCH,
        origin=now - 1.0,
        max_delay=MAX_DELAY,
    )
    schemes: dict[str, Any] = {
        n: bundle.client(DEFAULT, n) for n in ("hospital", "young", "old", "any", "leave")
    }
    schemes["hospital2"] = Shifted(bundle.client(DEFAULT, "hospital2"))  # type: ignore[arg-type]
    schemes["stay"] = Shifted(bundle.client(DEFAULT, "stay"))  # type: ignore[arg-type]
    gone = bundle.client(DEFAULT, "gone")
    revoked_pe = gone.protect_event(patient(25, "revoked"), now=now)  # before the revocation
    bundle.revoke("gone")
    bundle.broker_keys().save(state / "broker-keys.json")
    loop = LoopThread()
    cluster = SecureCluster(
        load_cluster_config(None, state_dir=state / "cluster"), state / "broker-keys.json"
    )
    clients: dict[str, Client] = {}
    subs: dict[str, Any] = {}
    at = {
        "hospital": "b3",
        "mallory": "b3",
        "young": "b4",
        "old": "b6",
        "any": "b5",
        "hospital2": "b3",
        "stay": "b5",
        "leave": "b6",
    }
    schemes["mallory"] = Canned()

    async def up() -> None:
        await cluster.start()
        for n, b in at.items():
            clients[n] = await cluster.connect(b, n, scheme=schemes[n])
        await clients["hospital"].advertise('topic = "cardio"')
        for n, f in (
            ("young", YOUNG),
            ("old", POLICY["old"][0]),
            ("any", POLICY["any"][0]),
            ("stay", YOUNG),
            ("leave", YOUNG),
        ):
            subs[n] = await clients[n].subscribe(f)
        for c in clients.values():
            await c.flush()
        await cluster.wait_quiescent()

    try:
        loop.run(up(), timeout=4 * PATIENCE)
        yield Net(
            loop,
            bundle,
            cluster,
            clients,
            schemes,
            subs,
            state / "cluster",
            {"revoked": revoked_pe},
        )
    finally:

        async def down() -> None:
            for c in clients.values():
                await c.close()
            await cluster.stop()

        loop.run(down(), timeout=2 * PATIENCE)
        loop.close()


async def drain(sub: Any, n: int, timeout: float = PATIENCE) -> list[Event]:
    return [(await sub.next(timeout=timeout)).event for _ in range(n)]


def files(state: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}


def captured(state: Path, broker: str) -> list[dict[str, Any]]:
    """The publications broker ``broker`` received, from its frame capture."""
    dec = FrameDecoder()
    frames = dec.feed((state / broker / "capture.in").read_bytes())
    return [f["m"] for f in frames if f.get("t") == "m" and f["m"].get("op") == "publish"]


def test_canary_reaches_authorised_subscribers_and_no_broker(net: Net) -> None:
    async def scenario() -> dict[str, list[Event]]:
        for age, eid in ((25, "e25"), (35, "e35")):
            await net.clients["hospital"].publish(patient(age, eid))
        got = {
            "young": await drain(net.subs["young"], 1),
            "old": await drain(net.subs["old"], 1),
            "any": await drain(net.subs["any"], 2),
        }
        await net.cluster.wait_quiescent()
        return got

    got = net.run(scenario())
    assert [e["age"] for e in got["young"]] == [25] and [e["age"] for e in got["old"]] == [35]
    assert sorted(e["age"] for e in got["any"]) == [25, 35]
    for e in got["young"] + got["old"] + got["any"]:
        assert e["patientRecord"] == CANARY and e.payload == CANARY.encode()
    everything = files(net.state)
    kinds = {p.name for p in everything}
    assert {
        "broker.log",
        "broker.db",
        "capture.in",
        "capture.out",
    } <= kinds  # replay state: broker.db
    w35 = net.schemes["hospital"].wire_id("e35").encode()  # brokers see the opaque wire id only
    assert sum(w35 in data for p, data in everything.items() if p.name == "capture.in") >= 3
    assert sum(w35 in data for p, data in everything.items() if p.name == "capture.out") >= 3
    leaks = [str(p) for p, data in everything.items() if CANARY.encode() in data]
    assert leaks == []
    topic = [str(p) for p, d in everything.items() if b"cardio" in d and "capture" in p.name]
    assert topic == []  # the topic travels as randomized tokens only


def test_subscriber_for_20_30_cannot_open_the_captured_age_35_event(net: Net) -> None:
    pubs = {m["event_id"]: m for m in captured(net.state, "b0")}  # the root sees every event
    young = net.schemes["young"]
    w35, w25 = (net.schemes["hospital"].wire_id(i) for i in ("e35", "e25"))
    m35, m25 = pubs[w35], pubs[w25]
    with pytest.raises(InvalidToken):
        young.open_event(w35, m35["routing"], m35.get("body", b""), m35["meta"], now=time.time())
    ok = young.open_event(w25, m25["routing"], m25.get("body", b""), m25["meta"], now=time.time())
    assert ok.id == "e25"
    assert ok["patientRecord"] == CANARY


def _attack(kind: str, net: Net) -> ProtectedEvent:
    hospital: DefaultClient = net.schemes["hospital"]
    now = time.time()
    genuine = hospital.protect_event(patient(25, f"g-{kind}"), now=now)
    match kind:
        case "forged":  # the hospital's permit, signed by another key
            forger = DefaultClient(
                "hospital", net.bundle.authority, signing_key=SigningKey.generate()
            )
            pe = forger.protect_event(patient(25, "forged"), now=now)
            return dataclasses.replace(pe, meta={**pe.meta, "pm": genuine.meta["pm"]})
        case "tampered":
            body = genuine.body[:-1] + bytes([genuine.body[-1] ^ 1])
            return dataclasses.replace(genuine, body=body)
        case "stale":  # a copy of the hospital's client whose clock is two hours late
            late = DefaultClient(
                "hospital", net.bundle.authority, signing_key=net.bundle.signing_key("hospital")
            )
            return late.protect_event(patient(25, "stale"), now=now - 2 * MAX_DELAY)
        case "unauthorised":
            return dataclasses.replace(
                genuine, meta={k: v for k, v in genuine.meta.items() if k != "pm"}
            )
        case "revoked":
            return net.sent["revoked"]  # type: ignore[no-any-return]
    raise AssertionError(kind)


async def _drops(net: Net) -> dict[str, dict[str, int]]:
    return {n: dict(s["drops"]) for n, s in (await net.cluster.statuses()).items()}


async def _until(
    net: Net, broker: str, reason: str, before: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    deadline = time.monotonic() + PATIENCE
    while True:
        now = await _drops(net)
        if now[broker].get(reason, 0) > before[broker].get(reason, 0):
            await net.cluster.wait_quiescent()
            return await _drops(net)
        if time.monotonic() > deadline:
            raise AssertionError(f"no {reason} drop at {broker}: {now}")
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("forged", "forged"),
        ("tampered", "forged"),
        ("stale", "stale"),
        ("unauthorised", "unauthorised"),
        ("revoked", "revoked"),
    ],
)
def test_attack_is_dropped_at_the_first_honest_broker(net: Net, kind: str, reason: str) -> None:
    pe = _attack(kind, net)
    mallory = net.clients["mallory"]

    async def scenario() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]], int]:
        before = await _drops(net)
        errors = len(mallory.errors)
        net.schemes["mallory"].next = pe
        await mallory.publish(Event({}))
        after = await _until(net, "b3", reason, before)
        return before, after, len(mallory.errors) - errors

    before, after, errors = net.run(scenario())
    diff = {
        b: {r: n - before[b].get(r, 0) for r, n in d.items() if n != before[b].get(r, 0)}
        for b, d in after.items()
    }
    assert diff == {b: ({reason: 1} if b == "b3" else {}) for b in after}
    assert errors == 1 and mallory.errors[-1].reason == DropReason(reason)
    assert mallory.errors[-1].ref == pe.event_id
    assert all(net.subs[n].pending == 0 for n in ("young", "old", "any"))


def test_replay_is_a_duplicate_then_replayed_after_the_broker_restarts(net: Net) -> None:
    w25 = net.schemes["hospital"].wire_id("e25")
    pub = next(m for m in captured(net.state, "b3") if m["event_id"] == w25)
    pe = ProtectedEvent(w25, pub["routing"], pub.get("body", b""), pub["meta"])
    mallory = net.clients["mallory"]

    async def replay(reason: str) -> dict[str, dict[str, int]]:
        before = await _drops(net)
        net.schemes["mallory"].next = pe
        await mallory.publish(Event({}))
        after = await _until(net, "b3", reason, before)
        return {
            b: {r: n - before[b].get(r, 0) for r, n in d.items() if n != before[b].get(r, 0)}
            for b, d in after.items()
            if d != before[b]
        }

    assert net.run(replay("duplicate")) == {"b3": {"duplicate": 1}}
    net.cluster.kill("b3")  # the de-dup window dies with the process; the replay state does not

    async def back() -> None:
        await net.cluster.restart("b3")
        await net.cluster.wait_connected()
        deadline = time.monotonic() + PATIENCE
        while not mallory.is_connected or not net.clients["hospital"].is_connected:
            if time.monotonic() > deadline:
                raise AssertionError("clients did not reconnect")
            await asyncio.sleep(0.05)
        await mallory.flush()

    try:
        net.run(back())
    except Exception as exc:  # say what b3 was doing (its -vv log), not only that it timed out
        tail = (net.cluster.broker_dir("b3") / "broker.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"b3 did not come back: {exc!r}\n--- b3 log ---\n{tail}") from exc
    assert net.run(replay("replayed")) == {"b3": {"replayed": 1}}
    assert all(net.subs[n].pending == 0 for n in ("young", "old", "any"))


def test_after_an_epoch_change_an_unsubscribed_subscriber_cannot_read(net: Net) -> None:
    leave: DefaultClient = net.schemes["leave"]
    stay: Shifted = net.schemes["stay"]
    pub: Shifted = net.schemes["hospital2"]
    lc = net.clients["leave"]

    async def scenario() -> tuple[Event, Event, Event]:
        for n in ("stay", "leave"):  # what they received earlier in the module
            while net.subs[n].pending:
                await net.subs[n].next()
        await net.clients["hospital2"].advertise('topic = "cardio"')
        await net.clients["hospital2"].publish(patient(26, "epoch0"))
        before = (await drain(net.subs["leave"], 1))[0]  # leave could read epoch e
        s0 = (await drain(net.subs["stay"], 1))[0]
        sub = net.subs["leave"]  # unsubscribe, with the withdrawal signed by its key
        meta = leave.unsubscribe_meta(Filter.parse(YOUNG), now=time.time())
        lc._subs.pop(sub.id)
        await lc._send(Unsubscribe(sub.id, DEFAULT, meta).to_wire())
        await lc.flush()
        stay.offset = pub.offset = EPOCH  # the next epoch: new tokens, new keys
        net.subs["stay1"] = await net.clients["stay"].subscribe(YOUNG)
        await net.clients["stay"].flush()
        await net.cluster.wait_quiescent()
        await net.clients["hospital2"].publish(patient(27, "epoch1"))
        after = (await drain(net.subs["stay1"], 1))[0]
        await net.cluster.wait_quiescent()
        return before, s0, after

    before, s0, after = net.run(scenario())
    assert before["age"] == s0["age"] == 26 and after["age"] == 27
    assert after["patientRecord"] == CANARY
    assert not lc.errors and net.subs["leave"].pending == 0
    w1 = net.schemes["hospital2"].inner.wire_id("epoch1")
    m = next(x for x in captured(net.state, "b0") if x["event_id"] == w1)
    assert m["meta"]["e"] == leave.authority.epoch_at(time.time()) + 1
    with pytest.raises(InvalidToken):  # handed the new epoch's ciphertext by a broker
        leave.open_event(w1, m["routing"], m.get("body", b""), m["meta"], now=time.time() + EPOCH)
