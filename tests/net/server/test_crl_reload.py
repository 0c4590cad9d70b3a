"""Brokers check peers against the CA's CRL and reload it when it is re-signed, over a real
broker process started by a cluster: a client is accepted, the CA revokes its certificate and
re-signs the CRL, the broker reloads it (status ``crl.reloads``) and refuses the revoked
certificate at the next handshake, while other clients keep connecting."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pubguard.errors import PubguardError
from pubguard.net.client.client import connect
from pubguard.net.config import parse_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.ops.pki import PASSPHRASE_ENV
from tests.loopback import LoopThread, until

pytestmark = pytest.mark.slow

CLUSTER = """
[topology]
kind = "edges"
edges = [["b0", "b1"]]
"""


def test_broker_reloads_a_resigned_crl_and_refuses_the_revoked(
    aloop: LoopThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, "crl-reload-pass")
    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=tmp_path)
    cluster = LocalCluster(cfg)

    async def joins(identity: str) -> bool:
        try:
            c = await connect(
                cluster.url("b1"),
                identity=identity,
                ssl=cluster.pki.client_context(identity),
                reconnect=False,
            )
        except (PubguardError, OSError, TimeoutError):
            return False
        try:
            await c.status()  # a round trip: the server accepted the certificate
            return True
        except (PubguardError, OSError, TimeoutError):
            return False
        finally:
            await c.close()

    async def scenario() -> None:
        assert await joins("mallory") and await joins("alice")
        st = await cluster.status("b1")
        assert st["crl"]["healthy"] and st["crl"]["reloads"] == 0
        cluster.pki.revoke("mallory")  # the CA re-signs ca/crl.pem with mallory listed

        async def reloaded() -> bool:
            st = await cluster.statuses()
            return all(s["crl"]["reloads"] >= 1 for s in st.values())

        await until(reloaded, "both brokers reloaded the CRL")
        assert not await joins("mallory")
        assert await joins("alice")

    aloop.run(cluster.start(), timeout=90)
    try:
        conf = tomllib.loads(cluster.config_path("b1").read_text())
        assert conf["tls"]["crl"] == str(cluster.pki.ca_dir / "crl.pem")
        aloop.run(scenario(), timeout=120)
    finally:
        aloop.run(cluster.stop(), timeout=60)
