"""A key service whose CRL has expired: every handshake is refused (OpenSSL fails closed),
but never silently: the service logs why, its status reports it unhealthy, and ``pubguard
ca crl-status`` fails. Over a real ``pubguard keyservice serve`` process and an in-process
server, with real certificates and a CRL signed eight days ago (valid for seven)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.crypto.crl_renewal import DAY
from pubguard.crypto.x509 import CertificateAuthority, Role, server_ssl_context
from pubguard.errors import PubguardError
from pubguard.net.crl import CrlWatch
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.ops.pki import PASSPHRASE_ENV, ClusterPki
from tests.loopback import LoopThread

PASS = "crl-test-pass"


def _expired_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, ClusterPki]:
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    state = tmp_path / "ks"
    pki = ClusterPki(state / "pki")
    pki.identity("keyservice", Role.MS)
    pki.identity("alice", Role.CLIENT)
    ca = CertificateAuthority.load(pki.ca_dir, passphrase=PASS.encode())
    ca.crl(now=time.time() - 8 * DAY)  # 8 days old, valid for 7: expired a day ago
    return state, pki


def _refused(pki: ClusterPki, port: int) -> bool:
    try:
        with KeyServiceClient("127.0.0.1", port, pki.client_context("alice"), timeout=5) as c:
            c.call("info")
    except (PubguardError, OSError):
        return True
    return False


def test_expired_crl_is_logged_and_unhealthy(
    aloop: LoopThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    state, pki = _expired_state(tmp_path, monkeypatch)
    i = pki.identity("keyservice", Role.MS)
    crl = pki.ca_dir / "crl.pem"

    def contexts():  # type: ignore[no-untyped-def]
        return server_ssl_context(i.cert_path, i.key_path, i.ca_path, crl_path=crl), None

    with caplog.at_level("ERROR", logger="pubguard.net.crl"):
        watch = CrlWatch("keyservice", crl, i.ca_path, contexts)
        assert watch.server_context is not None
        server = KeyServiceServer(
            KeyServiceCore(tdn=None, kdc=None, ms=_ms()),
            watch.server_context,
            crl=watch,
        )
        port = aloop.run(server.start())
        try:
            assert _refused(pki, port)
            st = server.status()
            assert st["healthy"] is False and st["crl"]["state"] == "expired"
            assert st["crl"]["refused_while_expired"] >= 1
        finally:
            aloop.run(server.stop())
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("expired at" in m and "renew-crl" in m for m in errors), errors
    assert any(m.startswith("keyservice: refusing 1 TLS handshake") for m in errors), errors
    r = CliRunner().invoke(cli, ["ca", "crl-status", "--state", str(state)])
    assert r.exit_code == 1 and "expired at" in r.output


def _ms():  # type: ignore[no-untyped-def]
    from pubguard.crypto import SecretBytes
    from pubguard.keys.ms import MetaService

    return MetaService(SecretBytes(b"k" * 32))


@pytest.mark.slow
def test_keyservice_process_with_expired_crl_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, pki = _expired_state(tmp_path, monkeypatch)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pubguard.cli.main", "keyservice", "serve"]
        + ["--state", str(state), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        assert _refused(pki, int(m.group(1)))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert re.search(r"ERROR .*keyservice: CRL .* expired at .*renew-crl", err), err
    assert re.search(r"ERROR .*keyservice: refusing 1 TLS handshake", err), err
