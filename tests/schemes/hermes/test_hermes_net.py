"""Hermes over real broker processes in four domains (mutual TLS, SQLite, a key-group manager
reached over mutual TLS): hermes-encrypted-access-control.txt Fig. 1 on Fig. 2's tree.

``isp1`` (domain isp) is the type's rendezvous node and the tree's root; it records every
frame it routes and holds no capability. ``met1`` hosts the cameras, ``met2`` Detective Smith
(domain met), ``ccs1`` the Congestion Charge Service (domain ccs, numberplate only). ``rogue``
(domain rogue) presents a capability the type owner never signed and is refused at group join.
``met3`` (domain met, same credentials as ``met1``, its child) records what ``met1`` sends it:
the credential handshake in the link ``hello`` decides that this hop carries the cache.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from pubguard.crypto import SigningKey
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.errors import FrameError, PubguardError
from pubguard.model import Event
from pubguard.model.events import AttributeSpec, EventType
from pubguard.net.config import parse_cluster_config
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.net.server.hermes_node import HermesPoller, write_hermes_file
from pubguard.net.tls import tls_password
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.hermes import (
    Capability,
    HermesBroker,
    HermesClient,
    KeyGroupManager,
    SecureEventType,
)
from pubguard.wire import envelope
from tests.loopback import LoopThread, wait_until

pytestmark = pytest.mark.slow

PROFILE = "hermes-attribute"
NP = EventType(
    "Numberplate",
    (
        AttributeSpec("numberplate", "str"),
        AttributeSpec("location", "str"),
        AttributeSpec("camera", "int"),
    ),
)
CLUSTER = """
[topology]
kind = "edges"
edges = [["isp1", "met1"], ["isp1", "met2"], ["isp1", "ccs1"], ["isp1", "rogue"], ["met1", "met3"]]
[broker]
profiles = ["hermes-attribute"]
[brokers.isp1]
domain = "isp"
record = true
[brokers.met1]
domain = "met"
[brokers.met2]
domain = "met"
[brokers.met3]
domain = "met"
record = true
[brokers.ccs1]
domain = "ccs"
[brokers.rogue]
domain = "rogue"
"""
CANARY = "CANARY-Soho-Street-9"
OWNER = SigningKey.from_seed(b"\x11" * 32)


class Net:
    def __init__(
        self,
        cluster: LocalCluster,
        kgm: KeyServiceServer,
        core: HermesKgmCore,
        stype: SecureEventType,
    ) -> None:
        self.cluster, self.kgm, self.core, self.stype = cluster, kgm, core, stype
        self.serial = 100

    def cap(
        self, holder: str, action: str, attrs: tuple[str, ...] = ("*",), not_after: float = math.inf
    ) -> Capability:
        self.serial += 1
        return Capability.issue(
            OWNER,
            holder=holder,
            type_id=self.stype.type_id,
            action=action,
            attributes=attrs,
            not_before=time.time() - 60,
            not_after=not_after,
            serial=self.serial,
        )


@pytest.fixture(scope="module")
def net(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    state = tmp_path_factory.mktemp("hermes")
    stype = SecureEventType.define("PITO", NP, OWNER)
    core = HermesKgmCore({PROFILE: KeyGroupManager(stype, "attribute", grace=5.0)})
    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=state)
    cluster = LocalCluster(cfg)
    ident = cluster.pki.identity("kgm", Role.KDC)  # the manager, in the type owner's domain
    ctx = server_ssl_context(
        ident.cert_path, ident.key_path, ident.ca_path, password=tls_password()
    )
    kgm = KeyServiceServer(core, ctx)
    port = aloop.run(kgm.start())
    n = Net(cluster, kgm, core, stype)
    grants: dict[str, tuple[str, ...]] = {
        "met1": ("*",),
        "met2": ("*",),
        "met3": ("*",),
        "ccs1": ("numberplate",),
    }
    for b in cfg.brokers:
        caps = [n.cap(b, a, grants[b]) for a in ("publish", "subscribe")] if b in grants else []
        if b == "rogue":  # signed by someone who does not own the type
            caps = [
                Capability.issue(
                    SigningKey.from_seed(b"\x12" * 32),
                    holder=b,
                    type_id=stype.type_id,
                    action="subscribe",
                    not_before=0.0,
                    serial=1,
                )
            ]
        known = stype if caps else None  # isp1 is authorised for nothing: not even the name
        write_hermes_file(
            cluster.broker_dir(b), kgm=("127.0.0.1", port), stype=known, capabilities=caps, poll=0.3
        )
    try:
        aloop.run(cluster.start(), timeout=90)
        yield n
    finally:
        aloop.run(cluster.stop(), timeout=60)
        aloop.run(kgm.stop())


def _client(
    n: Net, who: str, *, pub: Capability | None = None, sub: Capability | None = None
) -> HermesClient:
    return HermesClient(PROFILE, "Numberplate", publish=pub, subscribe=sub)


async def _drain(s: Any) -> list[Event]:
    out = []
    while s.pending:
        out.append((await s.next(timeout=1)).event)
    return out


def test_refused_at_group_join_and_delivery_cut_to_capability(aloop: LoopThread, net: Net) -> None:
    assert sorted(net.core.managers[PROFILE].members()) == ["ccs1", "met1", "met2", "met3"]
    assert net.core.stats["unauthorised"] + net.core.stats["invalid_token"] >= 1
    c = net.cluster

    async def scenario() -> tuple[list[Event], list[Event]]:
        cam = await c.connect(
            "met1", "camera", scheme=_client(net, "camera", pub=net.cap("camera", "publish"))
        )
        smith = await c.connect(
            "met2", "smith", scheme=_client(net, "smith", sub=net.cap("smith", "subscribe"))
        )
        ccs = await c.connect(
            "ccs1",
            "ccs",
            scheme=_client(net, "ccs", sub=net.cap("ccs", "subscribe", ("numberplate",))),
        )
        try:
            s1 = await smith.subscribe('numberplate = "AB12CDE"')
            s2 = await ccs.subscribe('numberplate prefix "AB"')
            await smith.flush()
            await ccs.flush()
            await c.wait_quiescent()
            for i, plate in enumerate(["AB12CDE", "XY00ZZZ", "AB99QQQ"]):
                await cam.publish(
                    Event({"numberplate": plate, "location": CANARY, "camera": i}, id=f"np-{i}")
                )
            await cam.flush()
            await c.wait_quiescent()
            return await _drain(s1), await _drain(s2)
        finally:
            for cl in (cam, smith, ccs):
                await cl.close()

    got_smith, got_ccs = aloop.run(scenario())
    assert [dict(e.attrs) for e in got_smith] == [
        {"numberplate": "AB12CDE", "location": CANARY, "camera": 0}
    ]
    assert sorted(e["numberplate"] for e in got_ccs) == ["AB12CDE", "AB99QQQ"]
    # the application's ids come back to the subscribers (sealed by the cameras' broker)...
    assert [e.id for e in got_smith] == ["np-0"]
    assert sorted(str(e.id) for e in got_ccs) == ["np-0", "np-2"]
    assert all(
        set(e.attrs) == {"numberplate"} for e in got_ccs
    )  # Fig. 1: the CCS reads no location
    isp = net.cluster.broker_dir("isp1")
    files = [p.read_bytes() for p in isp.iterdir() if p.is_file()]
    assert any(b"publish" in f for f in files)  # it did record the frames it routed
    # ...but no broker link carries them: isp1 saw only wire ids
    for needle in (CANARY, "AB12CDE", "XY00ZZZ", "Numberplate", "np-0", "np-1", "np-2"):
        assert not any(needle.encode() in f for f in files), needle
    ccs_files = [p.read_bytes() for p in net.cluster.broker_dir("ccs1").iterdir() if p.is_file()]
    assert not any(CANARY.encode() in f for f in ccs_files)


def test_a_broker_without_a_capability_is_refused_by_the_manager(net: Net, tmp_path: Path) -> None:
    ctx = net.cluster.pki.client_context("isp1")
    with KeyServiceClient("127.0.0.1", net.kgm.port, ctx, server_role="kdc") as kc:
        forged = net.cap("met1", "subscribe")  # someone else's capability
        with pytest.raises(PubguardError):
            kc.call("hermes_join", profile=PROFILE, cap=forged.to_wire())
    assert "isp1" not in net.core.managers[PROFILE].members()


def test_revoked_broker_capability_stops_delivery_within_one_refresh(
    aloop: LoopThread, net: Net
) -> None:
    c = net.cluster

    async def scenario() -> tuple[int, int]:
        cam = await c.connect(
            "met1", "camera2", scheme=_client(net, "camera2", pub=net.cap("camera2", "publish"))
        )
        ccs = await c.connect(
            "ccs1",
            "ccs2",
            scheme=_client(net, "ccs2", sub=net.cap("ccs2", "subscribe", ("numberplate",))),
        )
        try:
            s = await ccs.subscribe('numberplate prefix "RV"')
            await ccs.flush()
            await c.wait_quiescent()
            await cam.publish(Event({"numberplate": "RV-before", "location": "x", "camera": 1}))
            await cam.flush()
            await c.wait_quiescent()
            before = len(await _drain(s))
            ccs1_caps = net.core.managers[PROFILE].capability_of("ccs1")
            with KeyServiceClient(
                "127.0.0.1", net.kgm.port, c.pki.client_context("PITO"), server_role="kdc"
            ) as kc:
                await asyncio.to_thread(
                    kc.call, "hermes_revoke", profile=PROFILE, serial=ccs1_caps.serial
                )
            await asyncio.sleep(1.0)  # a few polls: every member has the refreshed key
            for i in range(3):
                await cam.publish(
                    Event({"numberplate": f"RV-after-{i}", "location": "x", "camera": 1})
                )
            await cam.flush()
            await c.wait_quiescent()
            return before, len(await _drain(s))
        finally:
            await cam.close()
            await ccs.close()

    before, after = aloop.run(scenario())
    assert before == 1
    assert after == 0
    wait_until(lambda: "ccs1" not in net.core.managers[PROFILE].members(), "ccs1 evicted")


def test_an_expired_client_capability_stops_delivery(aloop: LoopThread, net: Net) -> None:
    c = net.cluster

    async def scenario() -> tuple[int, int]:
        cam = await c.connect(
            "met1", "camera3", scheme=_client(net, "camera3", pub=net.cap("camera3", "publish"))
        )
        short = net.cap("smith3", "subscribe", not_after=time.time() + 2.0)
        smith = await c.connect("met2", "smith3", scheme=_client(net, "smith3", sub=short))
        try:
            s = await smith.subscribe('numberplate prefix "EX"')
            await smith.flush()
            await c.wait_quiescent()
            await cam.publish(Event({"numberplate": "EX-1", "location": "x", "camera": 1}))
            await cam.flush()
            await c.wait_quiescent()
            before = len(await _drain(s))
            await asyncio.sleep(max(0.0, short.not_after - time.time()) + 0.1)
            await cam.publish(Event({"numberplate": "EX-2", "location": "x", "camera": 1}))
            await cam.flush()
            await c.wait_quiescent()
            return before, len(await _drain(s))
        finally:
            await cam.close()
            await smith.close()

    assert aloop.run(scenario()) == (1, 0)


def test_the_rekey_poller_stops_with_its_node(net: Net) -> None:
    """``HermesPoller.stop`` (what ``BrokerServer.close`` calls) ends the polling thread and
    closes its connection to the manager, promptly, even mid-interval."""
    me = "poller-probe"
    scheme = HermesBroker(
        PROFILE, me, types=[net.stype], capabilities=[net.cap(me, "subscribe", ("camera",))]
    )
    ctx = net.cluster.pki.client_context(me)
    poller = HermesPoller(
        me,
        scheme,
        KeyServiceClient("127.0.0.1", net.kgm.port, ctx, server_role="kdc"),
        neighbours=["met1"],
        poll=0.05,
    )
    assert poller.join() and scheme.keyring.groups()
    poller.start()
    wait_until(lambda: poller.running, "poller running")
    time.sleep(0.2)  # a few polls
    t0 = time.monotonic()
    poller.stop()
    assert not poller.running and time.monotonic() - t0 < 2.0
    poller.stop()  # idempotent
    assert f"hermes-{me}" not in {t.name for t in threading.enumerate()}


def _recorded(net: Net, broker: str) -> list[dict[str, Any]]:
    with net.cluster.record_path(broker).open("rb") as f:
        return [m for _, m in msgpack.Unpacker(f, raw=False) if isinstance(m, dict)]


def test_the_link_handshake_decides_the_cache_per_hop(aloop: LoopThread, net: Net) -> None:
    """§3.4 over real links: met1 and met3 presented their capabilities to each other in
    their ``hello``s, verified them against PITO's key, and met1 sends met3 the ciphertext
    with the full plaintext cache; isp1 (no capability) gets the ciphertext alone."""
    c = net.cluster

    async def scenario() -> int:
        cam = await c.connect(
            "met1", "camera4", scheme=_client(net, "camera4", pub=net.cap("camera4", "publish"))
        )
        det = await c.connect(
            "met3", "det4", scheme=_client(net, "det4", sub=net.cap("det4", "subscribe"))
        )
        try:
            s = await det.subscribe('numberplate = "HS-1"')
            await det.flush()
            await c.wait_quiescent()
            await cam.publish(Event({"numberplate": "HS-1", "location": "x", "camera": 4}))
            await cam.flush()
            await c.wait_quiescent()
            return len(await _drain(s))
        finally:
            await cam.close()
            await det.close()

    assert aloop.run(scenario()) == 1
    pubs = [m for m in _recorded(net, "met3") if m.get("op") == "publish"]
    assert pubs and all("k" in m["routing"] for m in pubs)  # the cache rides to an equal
    ids = {bytes(a) for a, _ in msgpack.unpackb(pubs[-1]["routing"]["k"]) if a}
    assert ids == set(net.stype.attribute_ids.values())
    to_isp = [m for m in _recorded(net, "isp1") if m.get("op") == "publish"]
    assert to_isp and not any("k" in m["routing"] for m in to_isp)


def test_a_hello_with_malformed_credentials_is_refused() -> None:
    ok = envelope.hello("met1", "broker", "s", durable=True, rx=0, creds=[b"cap"])
    assert envelope.check_envelope(ok) == "hello"
    for bad in ([b""], ["text"], [b"x"] * 17, b"cap"):
        with pytest.raises(FrameError):
            envelope.check_envelope({**ok, "creds": bad})
