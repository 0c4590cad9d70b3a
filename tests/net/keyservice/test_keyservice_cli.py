"""``pubguard keyservice revoke`` against a key service that runs no authority (served without
``--kdc-policy``): one line that says what to do, not the protocol's ``unknown_op``."""

from __future__ import annotations

import random
from pathlib import Path

from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.crypto import SecretBytes
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.keys.ms import MetaService
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.ops.pki import ClusterPki


def test_revoke_at_an_ms_only_key_service_is_one_clear_line(aloop, tmp_path: Path) -> None:
    state = tmp_path / "net"
    pki = ClusterPki(state / "pki")
    pki.identity("admin", Role.CLIENT)
    i = pki.identity("keyservice", Role.MS)
    ms = MetaService(SecretBytes(random.Random(3).randbytes(32)), epoch_length=1000.0)
    server = KeyServiceServer(
        KeyServiceCore(ms), server_ssl_context(i.cert_path, i.key_path, i.ca_path)
    )
    port = aloop.run(server.start())
    try:
        res = CliRunner().invoke(
            cli,
            [
                "keyservice",
                "revoke",
                "--state",
                str(state),
                "--identity",
                "ward-laptop",
                "--keyservice",
                f"127.0.0.1:{port}",
            ],
        )
    finally:
        aloop.run(server.stop())
    assert res.exit_code == 1, res.output
    assert res.stderr.strip().splitlines() == [
        f"pubguard: error: the key service at 127.0.0.1:{port} runs no authority to revoke at "
        "(serve it with --kdc-policy; the policy's admins may revoke)"
    ]


def test_serve_with_a_missing_policy_is_one_line_and_creates_nothing(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("PUBGUARD_KDC_MASTER", raising=False)  # the warning must not come first
    policy, state = tmp_path / "policy.json", tmp_path / "ks"
    res = CliRunner().invoke(
        cli, ["keyservice", "serve", "--state", str(state), "--kdc-policy", str(policy)]
    )
    assert res.exit_code == 1
    assert res.stderr.strip().splitlines() == [
        f"pubguard: error: {policy}: cannot read: No such file or directory"
    ]
    assert not state.exists()
