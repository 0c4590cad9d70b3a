"""The EventGuard meta-service over mutual TLS (net/keyservice/server.py): a real server on
127.0.0.1 port 0 with real certificates from the project CA, clients through the blocking
proxy. Permits fetched over the network are accepted by eventguard broker cores; identities
come from certificates only; garbage gets a clear error and the server keeps serving; no key
bytes reach the logs."""

from __future__ import annotations

import base64
import logging
import os
import random
import re
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SecretBytes
from pubguard.crypto.x509 import Role, client_ssl_context, server_ssl_context
from pubguard.errors import (
    ConfigError,
    DropError,
    DropReason,
    InvalidToken,
    TransportError,
    ValidationError,
)
from pubguard.keys.ms import MetaService, SubscriptionGrant, SubscriptionPermit
from pubguard.model import Event
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.protocol import ERROR_CODES
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.ops.pki import ClusterPki
from pubguard.overlay.tree import tree_from_edges
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.sim.engine import Simulator
from pubguard.wire.framing import FrameDecoder, encode_frame

TOPIC = "hospital/oncology"
CANARY = "CANARY-keyservice-5d1e"
EPOCH = 1000.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.5

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPki:
    return ClusterPki(tmp_path_factory.mktemp("kspki") / "pki")


@pytest.fixture(scope="module")
def service(aloop, pki):
    ms = MetaService(SecretBytes(random.Random(7).randbytes(32)), epoch_length=EPOCH)
    i = pki.identity("keyservice", Role.MS)
    ctx = server_ssl_context(i.cert_path, i.key_path, i.ca_path)
    clock = Clock()
    server = KeyServiceServer(KeyServiceCore(ms), ctx, clock=clock)
    port = aloop.run(server.start())
    yield ms, server, port, clock
    aloop.run(server.stop())


def proxy(pki: ClusterPki, name: str, port: int) -> KeyServiceClient:
    return KeyServiceClient("127.0.0.1", port, pki.client_context(name))


def test_network_permits_equal_in_kind_and_pass_an_eventguard_broker_core(pki, service):
    ms, _, port, _ = service
    pub_ms, s1_ms, s2_ms = (proxy(pki, n, port) for n in ("pub", "s1", "s2"))
    assert pub_ms.public_key == ms.public_key
    g = s1_ms.subscribe("s1", TOPIC, now=0.5)
    local = ms.subscribe("s1", TOPIC, now=0.5)
    assert isinstance(g, SubscriptionGrant) and isinstance(g.permit, SubscriptionPermit)
    assert g.permit.token == local.permit.token and g.permit.epoch == local.permit.epoch
    assert g.key.reveal() == local.key.reveal()  # K(w, e) of the one stateless MS
    assert g.ust.reveal() == ms.ust(g.permit.sb_id).reveal()

    tree = tree_from_edges([("r", "a"), ("r", "b")])
    sim = Simulator(tree, lambda _b: [EventGuardBroker(ms.public_key)], wire=True, seed=3)
    pub = sim.add_client("pub", "a", EventGuardClient("pub", pub_ms))
    s1 = sim.add_client("s1", "b", EventGuardClient("s1", s1_ms))
    s2 = sim.add_client("s2", "r", EventGuardClient("s2", s2_ms))
    sim.advertise("pub", f'topic = "{TOPIC}"', at=0.0)
    sim.subscribe("s1", f'topic = "{TOPIC}"', at=0.0)
    sid = sim.subscribe("s2", f'topic = "{TOPIC}"', at=0.0)
    sim.run()
    sim.publish("pub", Event({"topic": TOPIC, "record": CANARY}), at=1.0)
    sim.run()
    assert not sim.drops
    assert [d.event["record"] for d in s1.deliveries] == [CANARY]
    assert [d.event["record"] for d in s2.deliveries] == [CANARY]
    # the UST-backed unsubscribe permit also comes over the network and the core accepts it
    sim.unsubscribe("s2", sid, at=2.0)
    sim.run()
    assert not sim.drops and s2.acks[-1].of == "unsubscribe"
    sim.publish("pub", Event({"topic": TOPIC, "record": "second"}), at=3.0)
    sim.run()
    assert len(s1.deliveries) == 2 and len(s2.deliveries) == 1
    assert pub.deliveries == []
    for p in (pub_ms, s1_ms, s2_ms):
        p.close()


def test_a_client_without_a_ca_signed_certificate_is_refused(pki, service, tmp_path):
    _, server, port, _ = service
    rogue = ClusterPki(tmp_path / "rogue")  # a CA of its own
    r = rogue.identity("s1", Role.CLIENT)
    ctx = client_ssl_context(r.cert_path, r.key_path, pki.identity("keyservice", Role.MS).ca_path)
    before = server.stats["connections"]
    with pytest.raises(TransportError), KeyServiceClient("127.0.0.1", port, ctx) as c:
        c.subscribe("s1", TOPIC, now=0.5)
    assert server.stats["connections"] == before  # never reached the request handler


def test_a_revoked_client_certificate_is_refused_at_the_handshake(aloop, pki):
    """keyservice serve loads the CA's CRL (ClusterPki.revoke re-signs it): a revoked client
    never reaches the request handler; an unrevoked one is served."""
    pki.identity("carol")
    pki.identity("mallory")
    pki.revoke("mallory")
    assert pki.crl_path is not None
    ms = MetaService(SecretBytes(random.Random(8).randbytes(32)), epoch_length=EPOCH)
    i = pki.identity("keyservice", Role.MS)
    ctx = server_ssl_context(i.cert_path, i.key_path, i.ca_path, crl_path=pki.crl_path)
    server = KeyServiceServer(KeyServiceCore(ms), ctx, clock=Clock())
    port = aloop.run(server.start())
    try:
        with proxy(pki, "carol", port) as c:
            assert c.subscribe("carol", TOPIC, now=0.5).permit.token == ms.topic_token(TOPIC)
        before = server.stats["connections"]
        with pytest.raises(TransportError), proxy(pki, "mallory", port) as m:
            m.subscribe("mallory", TOPIC, now=0.5)
        assert server.stats["connections"] == before
    finally:
        aloop.run(server.stop())
    with pytest.raises(ConfigError, match="no identity 'nobody'"):
        pki.revoke("nobody")


def test_a_client_cannot_obtain_a_permit_in_another_identitys_name(pki, service):
    _, _, port, _ = service
    with proxy(pki, "alice", port) as alice, proxy(pki, "bob", port) as bob:
        with pytest.raises(DropError) as e:
            alice.subscribe("bob", TOPIC, now=0.5)
        assert e.value.reason is DropReason.UNAUTHORISED
        with pytest.raises(DropError):
            alice.advertise("bob", b"\x01" * 32, TOPIC, now=0.5)
        g = bob.subscribe("bob", TOPIC, now=0.5)
        # even holding bob's permit and UST, alice cannot withdraw or renew it in her name
        with pytest.raises(DropError):
            alice.unsubscribe(g.permit, g.ust, now=0.5)
        with pytest.raises(DropError):
            alice.renew_subscription(g.permit, g.ust, TOPIC, now=0.5)
        # bob without the UST cannot either (UST-backed, eventguard.txt §4.5)
        with pytest.raises(InvalidToken):
            bob.unsubscribe(g.permit, b"\x00" * 32, now=0.5)
        usb = bob.unsubscribe(g.permit, g.ust, now=0.5)
        assert usb.sb_id == g.permit.sb_id and usb.subject == "bob"
        with pytest.raises(ValidationError):  # a bad argument is a typed error, not a hang
            bob.subscribe("bob", "", now=0.5)


def _raw_conn(pki: ClusterPki, port: int) -> ssl.SSLSocket:
    ctx = pki.client_context("fuzzer")
    return ctx.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1"
    )


def _read(s: ssl.SSLSocket) -> list[dict]:
    dec = FrameDecoder()
    out: list[dict] = []
    while not out:
        data = s.recv(65536)
        if not data:
            break
        out = dec.feed(data)
    return out


def test_garbage_gets_a_clear_error_and_the_server_keeps_serving(pki, service, caplog):
    _, server, port, _ = service
    caplog.set_level(logging.INFO, logger="pubguard.net.keyservice")
    with _raw_conn(pki, port) as s:  # well-formed frames with bad content: errors, link stays
        s.sendall(encode_frame({"op": "launch", "id": 1}))
        assert _read(s) == [{"id": 1, "error": "unknown_op", "message": "unknown op 'launch'"}]
        s.sendall(encode_frame({"op": "subscribe", "id": 2, "subject": "fuzzer", "w": 7}))
        (r,) = _read(s)
        assert r["id"] == 2 and r["error"] == "malformed" and "'w'" in r["message"]
        s.sendall(encode_frame({"op": "unsubscribe", "id": 3, "permit": b"junk", "ust": b"x"}))
        assert _read(s)[0]["error"] == "invalid_token"
        s.sendall(encode_frame({"op": "info"}))
        assert _read(s)[0]["error"] == "malformed"
        s.sendall(encode_frame({"op": "info", "id": 4}))
        assert _read(s)[0]["ok"]["identity"] == "fuzzer"
    with _raw_conn(pki, port) as s:  # an undecodable frame: one error frame, then closed
        s.sendall(b"\x00\x00\x00\x05\x09junk")
        (r,) = _read(s)
        assert r["id"] is None and r["error"] == "malformed" and "version" in r["message"]
        assert s.recv(100) == b""
    with _raw_conn(pki, port) as s:  # oversize length prefix
        s.sendall(b"\x7f\xff\xff\xff")
        assert _read(s)[0]["error"] == "malformed"
    with proxy(pki, "after", port) as c:  # still serving
        assert c.subscribe("after", TOPIC, now=0.5).permit.subject == "after"
    assert server.core.stats["unknown_op"] >= 1 and server.stats["malformed"] >= 2
    assert "malformed frame" in caplog.text and "refused launch from fuzzer" in caplog.text


def test_no_key_bytes_in_logs_or_reprs(pki, service, caplog):
    _, server, port, _ = service
    caplog.set_level(logging.DEBUG)
    secrets: list[bytes] = []
    with proxy(pki, "canary", port) as c:
        g = c.subscribe("canary", TOPIC, now=0.5)
        a = c.advertise("canary", b"\x02" * 32, TOPIC, now=0.5)
        secrets += [g.key.reveal(), g.ust.reveal(), a.key.reveal(), a.uat.reveal()]
        with pytest.raises(DropError):  # a refusal is logged too
            c.subscribe("x", TOPIC, now=1)
        c.renew_subscription(g.permit, g.ust, TOPIC, now=0.5)
        c.unsubscribe(g.permit, g.ust, now=0.5)
        text = caplog.text + repr(c) + repr(g) + repr(a) + repr(server.core)
    assert "refused subscribe from canary" in caplog.text
    for k in secrets:
        for form in (k.hex(), base64.b64encode(k).decode(), repr(k)[2:-1], str(list(k))[1:-1]):
            assert form not in text
        assert not re.search(re.escape(k.hex()[:16]), text)


@pytest.mark.slow
def test_cli_keyservice_serve(tmp_path, monkeypatch, pki):
    state = tmp_path / "ks"
    tdn_ca = pki.identity("keyservice", Role.MS).ca_path  # any CA certificate (PEM)
    env = dict(os.environ, PUBGUARD_CA_PASSPHRASE="test-pass-ks")
    env["PUBGUARD_MS_MASTER"] = base64.b64encode(random.Random(9).randbytes(32)).decode()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pubguard.cli.main",
            "keyservice",
            "serve",
            "--state",
            str(state),
            "--port",
            "0",
            "--tdn-ca",
            str(tdn_ca),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert m, line + (proc.stderr.read() if proc.poll() is not None else "")  # type: ignore[union-attr]
        monkeypatch.setenv("PUBGUARD_CA_PASSPHRASE", "test-pass-ks")
        ctx = ClusterPki(state / "pki").client_context("cli-sub")
        with KeyServiceClient("127.0.0.1", int(m.group(1)), ctx) as c:
            g = c.subscribe("cli-sub", TOPIC, now=time.time())
            assert {"discover", "tdn_advertise", "subscribe"} <= set(c.call("info")["ops"])
        expect = MetaService(SecretBytes(random.Random(9).randbytes(32)))
        assert g.permit.token == expect.topic_token(TOPIC)
        assert (state / "ms-key.json").exists()
        assert random.Random(9).randbytes(32).hex() not in "".join(
            p.read_bytes().hex() for p in Path(state).rglob("*") if p.is_file()
        )
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode in (0, -15)


@pytest.mark.slow
def test_cli_keyservice_bad_master_is_one_line_error(tmp_path):
    env = dict(os.environ, PUBGUARD_MS_MASTER="not-base64!")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pubguard.cli.main",
            "keyservice",
            "serve",
            "--state",
            str(tmp_path / "ks"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "PUBGUARD_MS_MASTER" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pubguard.cli.main",
            "keyservice",
            "serve",
            "--state",
            str(tmp_path / "ks2"),
            "--tdn-ca",
            str(tmp_path / "missing.pem"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "certificate" in r.stderr
    assert not (tmp_path / "ks2").exists()  # nothing created


CLUSTER_EG = """
[topology]
kind = "edges"
edges = [["b0", "b1"]]
[broker]
profiles = ["plain", "eventguard"]
"""


@pytest.mark.slow
def test_local_cluster_runs_the_key_service_as_its_own_process(aloop, tmp_path):
    import tomllib

    from pubguard.net.config import parse_cluster_config
    from pubguard.ops.cluster import LocalCluster
    from pubguard.schemes.registry import KeyBundle

    master = random.Random(11).randbytes(32)
    cfg = parse_cluster_config(tomllib.loads(CLUSTER_EG), base=tmp_path / "c")
    bundle = KeyBundle(tmp_path / "keys", now=time.time(), master=master)
    cluster = LocalCluster(cfg, in_process=True, bundle=bundle, keyservice=True)

    async def scenario() -> tuple[Event, object]:
        await cluster.start()
        try:
            pub = await cluster.connect("b0", "pub", profile="eventguard")
            sub = await cluster.connect("b1", "sub", profile="eventguard")
            await pub.advertise(f'topic = "{TOPIC}"')
            s = await sub.subscribe(f'topic = "{TOPIC}"')
            await sub.flush()
            await pub.flush()
            await cluster.wait_quiescent()
            await pub.publish(Event({"topic": TOPIC, "record": CANARY}))
            got = (await s.next(timeout=20)).event
            ms = sub.scheme.ms
            for c in (pub, sub):
                await c.close()
            return got, ms
        finally:
            await cluster.stop()

    got, ms = aloop.run(scenario(), timeout=120)
    assert got["record"] == CANARY
    assert isinstance(ms, KeyServiceClient) and ms.port == cluster.keyservice_port
    assert "keyservice" not in cluster.procs  # stopped with the cluster
    files = [p.read_bytes() for p in (tmp_path / "c").rglob("*") if p.is_file()]
    ms_rk = bundle.ms.export_master().reveal()
    assert files and not any(ms_rk in f or ms_rk.hex().encode() in f for f in files)
    assert not any(base64.b64encode(ms_rk) in f for f in files)


_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=20),
    st.binary(max_size=40),
)
_ops = st.sampled_from(
    [
        "info",
        "subscribe",
        "advertise",
        "unsubscribe",
        "unadvertise",
        "renew_subscription",
        "renew_advertisement",
        "discover",
        "tdn_advertise",
        "bogus",
    ]
)


@given(
    op=st.one_of(_ops, _leaf),
    rid=st.one_of(st.integers(0, 2**32), _leaf),
    fields=st.dictionaries(
        st.sampled_from(
            [
                "subject",
                "w",
                "pk",
                "permit",
                "ust",
                "uat",
                "adv",
                "cert",
                "kem",
                "ts",
                "nonce",
                "sig",
                "kmc",
                "x",
            ]
        ),
        st.one_of(_leaf, st.lists(_leaf, max_size=3)),
        max_size=6,
    ),
)
@settings(max_examples=150, deadline=None)
def test_the_core_answers_every_request_with_one_typed_response(op, rid, fields):
    ms = MetaService(SecretBytes(bytes(32)), epoch_length=EPOCH)
    core = KeyServiceCore(ms)
    resp = core.handle({**fields, "op": op, "id": rid}, peer="p", now=1.0, rng=random.Random(0))
    assert resp["id"] == (rid if type(rid) is int else None)
    assert ("ok" in resp) != ("error" in resp)
    if "error" in resp:
        assert resp["error"] in ERROR_CODES and isinstance(resp["message"], str)
    else:  # info (which names nobody), or a well-formed request in the peer's own name
        assert op == "info" or (
            op in ("subscribe", "advertise") and fields.get("subject", "p") == "p"
        )
