"""Revocation while the network runs (net/server/revocation.py, net/keyservice/kdc.py), over real
broker processes, a real key-service process and real sockets: an administrator revokes a
publisher through the CLI; every broker fetches the authority-signed list; the publisher's
later events are dropped with ``revoked`` at its access broker and reach no subscriber, its
earlier ones were delivered; a forged list and a list with a lower serial (served by
impostor key services the brokers are redirected to) are refused and change nothing; a
non-admin cannot revoke."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import tomllib

import pytest

from pubguard.crypto import SecretBytes
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.errors import DropError, DropReason
from pubguard.model import Event
from pubguard.net.config import parse_cluster_config
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.kdc import KdcConfig, KdcService
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import HOSPITAL
from tests.loopback import PATIENCE

MASTER = random.Random(77).randbytes(32)
ALL = 'topic = "cardiology" && age >= 0 && age <= 127'
CLUSTER = """\
publishers = ["laptop"]
[topology]
kind = "edges"
edges = [["b0", "b1"], ["b0", "b2"]]
[broker]
profiles = ["default"]
"""


def kdc(master: bytes = MASTER) -> KdcConfig:
    return KdcConfig(
        SecretBytes(master),
        (HOSPITAL,),
        subscribers={"unit": [ALL]},
        publishers={"laptop": ["cardiology"]},
        admins=("admin",),
    )


def ev(i: int) -> Event:
    return Event(
        {"topic": "cardiology", "age": 40 + i, "patientRecord": f"record {i}"},
        id=f"e{i}",
        type=HOSPITAL.name,
        payload=b"",
    )


async def until(pred, what: str, timeout: float = PATIENCE):
    deadline = time.monotonic() + timeout
    while True:
        got = await pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


@pytest.mark.slow
def test_revocation_reaches_running_brokers_and_forged_or_older_lists_are_refused(aloop, tmp_path):
    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=tmp_path)
    cluster = LocalCluster(cfg, keyservice=True, kdc=kdc(), revocation_poll=0.25)
    state = cluster.state_dir
    endpoint = state / "ms-key.json"
    out: dict[str, object] = {}

    async def revocation(name: str) -> dict:
        return (await cluster.status(name))["revocation"]

    async def serial_everywhere(n: int) -> bool:
        sts = await cluster.statuses()
        return all(s["revocation"]["serial"] == n for s in sts.values())

    async def impostor(master: bytes, name: str) -> KeyServiceServer:
        i = cluster.pki.identity(name, Role.MS)
        ctx = server_ssl_context(i.cert_path, i.key_path, i.ca_path)
        srv = KeyServiceServer(KeyServiceCore(kdc=KdcService(kdc(master))), ctx)
        port = await srv.start()
        endpoint.write_text(json.dumps({"host": "127.0.0.1", "port": port}))
        return srv

    async def part1() -> None:
        await cluster.start()
        sub = await cluster.connect("b2", "unit", profile="default")
        s = await sub.subscribe(ALL)
        await sub.flush()
        pub = await cluster.connect("b1", "laptop", profile="default")
        await cluster.wait_quiescent()
        await pub.publish(ev(1))
        await pub.flush()
        out["before"] = (await s.next(timeout=20)).event.id
        await until(lambda: serial_everywhere(0), "every broker to hold list serial 0")
        out["clients"] = (sub, s, pub)

    async def part2() -> None:
        sub, s, pub = out["clients"]  # type: ignore[misc]
        await until(lambda: serial_everywhere(1), "every broker to hold list serial 1")
        for i in (2, 3):
            await pub.publish(ev(i))
        await pub.flush()
        await cluster.wait_quiescent()
        # the access broker answered the publisher (narada §IV-H: an error to a direct client)
        await until(lambda: _n(len(pub.errors) >= 2), "the publisher's error replies")
        # brokers name a publication by its wire id (a keyed hash, not the application's id)
        mine = {pub.scheme.wire_id(f"e{i}"): f"e{i}" for i in (2, 3)}
        out["wire_e2"] = pub.scheme.wire_id("e2")
        out["errors"] = [(mine.get(e.ref, e.ref), e.reason) for e in pub.errors]
        out["after"] = s.pending
        out["drops"] = {n: st["drops"] for n, st in (await cluster.statuses()).items()}
        # redirect the brokers to a key service whose list another authority signed
        out["forger"] = await impostor(random.Random(1).randbytes(32), "impostor")
        out["forged"] = await until(
            lambda: _state(revocation("b1"), "refused: forged"), "the forged list's refusal"
        )
        await out["forger"].stop()  # type: ignore[union-attr]
        # ... then to one signing with the authority's own key but an older list (serial 0)
        out["older"] = await impostor(MASTER, "impostor2")
        out["rollback"] = await until(
            lambda: _state(revocation("b1"), "refused: rollback"), "the older list's refusal"
        )
        await pub.publish(ev(4))
        await pub.flush()
        await cluster.wait_quiescent()
        out["end"] = (s.pending, await cluster.statuses())
        await out["older"].stop()  # type: ignore[union-attr]
        for c in (sub, pub):
            await c.close()

    try:
        aloop.run(part1(), timeout=120)
        # a non-admin cannot revoke (its own certificate; refused by the policy)
        with KeyServiceClient(
            "127.0.0.1", cluster.keyservice_port, cluster.pki.client_context("unit")
        ) as ks:
            with pytest.raises(DropError) as no:
                ks.call("authority_revoke", identity="laptop")
        assert no.value.reason is DropReason.UNAUTHORISED
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pubguard.cli.main",
                "keyservice",
                "revoke",
                "--state",
                str(state),
                "--identity",
                "laptop",
                "--as",
                "unit",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        assert (
            r.returncode == 1 and r.stderr.count("\n") == 1 and "not an administrator" in r.stderr
        )
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pubguard.cli.main",
                "keyservice",
                "revoke",
                "--state",
                str(state),
                "--identity",
                "laptop",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == (
            "revoked laptop: revocation list serial 1, 1 key(s) revoked in all"
        )
        aloop.run(part2(), timeout=120)
    finally:
        aloop.run(cluster.stop(), timeout=60)

    assert out["before"] == "e1"  # delivered before the revocation
    assert out["errors"] == [("e2", DropReason.REVOKED), ("e3", DropReason.REVOKED)]
    assert out["after"] == 0  # no subscriber got a revoked publication
    drops = out["drops"]
    assert drops["b1"].get("revoked") == 2  # type: ignore[index]
    assert "revoked" not in drops["b0"] and "revoked" not in drops["b2"]  # type: ignore[index]
    for k in ("forged", "rollback"):
        st = out[k]
        assert st["serial"] == 1 and st["identities"] == ["laptop"] and st["keys"] == 1  # type: ignore[index]
    pending, sts = out["end"]  # type: ignore[misc]
    assert pending == 0 and sts["b1"]["drops"]["revoked"] == 3
    assert all(s["revocation"]["serial"] == 1 for s in sts.values())
    log = (state / "b1" / "broker.log").read_text()
    assert "revocation list serial 1: 1 key(s) newly revoked" in log
    assert f"dropped publish {out['wire_e2']} from c:laptop: revoked" in log
    assert "revocation feed: refused: forged" in log and "refused: rollback" in log
    # the list a broker kept is public and signed: a restart would start from serial 1
    assert (state / "b1" / "revocations.bin").exists()


async def _n(v: bool) -> bool:
    return v


async def _state(coro, want: str):
    st = await coro
    return st if st["state"] == want else None
