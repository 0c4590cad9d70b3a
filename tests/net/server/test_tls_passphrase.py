"""TLS identity keys encrypted at rest (``PUBGUARD_TLS_PASSPHRASE``, ops/pki.py), over real
broker processes: with the passphrase in the environment every identity key a cluster issues
is PKCS#8-encrypted, broker processes (which inherit it) start and route over mutual TLS, and
the passphrase is written nowhere under the cluster's folder. Without it a broker cannot load
its key and says why in one line.
"""

from __future__ import annotations

import secrets
import time
import tomllib
from pathlib import Path

import pytest

from pubguard.errors import ConfigError
from pubguard.model import Event
from pubguard.net.config import load_broker_config, parse_cluster_config
from pubguard.net.server.server import BrokerServer
from pubguard.net.tls import TLS_PASSPHRASE_ENV
from pubguard.ops.cluster import LocalCluster
from tests.loopback import PATIENCE, LoopThread

pytestmark = pytest.mark.slow

CLUSTER = """
[topology]
kind = "edges"
edges = [["b0", "b1"]]
"""


def test_a_cluster_runs_with_encrypted_identity_keys(
    aloop: LoopThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passphrase = "tls-canary-" + secrets.token_hex(8)
    monkeypatch.setenv(TLS_PASSPHRASE_ENV, passphrase)
    cfg = parse_cluster_config(tomllib.loads(CLUSTER), base=tmp_path)
    cluster = LocalCluster(cfg)

    async def scenario() -> list[str]:
        sub = await cluster.connect("b1", "reader")
        s = await sub.subscribe('topic = "x"')
        await sub.flush()
        pub = await cluster.connect("b0", "writer")
        await cluster.wait_quiescent()
        await pub.publish(Event({"topic": "x"}, id="e1"))
        got = [(await s.next(timeout=PATIENCE)).event.id]
        await pub.close()
        await sub.close()
        return got

    aloop.run(cluster.start(), timeout=90)
    try:
        assert aloop.run(scenario(), timeout=60) == ["e1"]
    finally:
        aloop.run(cluster.stop(), timeout=60)
    keys = sorted(tmp_path.rglob("*.key.pem"))
    assert len(keys) >= 4  # the CA, two brokers, two clients
    for k in keys:
        assert k.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----"), k
    for f in (p for p in tmp_path.rglob("*") if p.is_file()):
        assert passphrase.encode() not in f.read_bytes(), f  # logs, SQLite, configs, keys
    # the same broker without the passphrase: one line naming the key, no prompt
    monkeypatch.delenv(TLS_PASSPHRASE_ENV)
    conf = load_broker_config(cluster.config_path("b0"))
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="passphrase is missing or wrong") as ei:
        BrokerServer(conf)
    # no prompt (one would wait for ever; the bound is generous: a loaded machine is slow)
    assert time.monotonic() - t0 < 60 and "\n" not in str(ei.value)
    assert passphrase not in str(ei.value)
