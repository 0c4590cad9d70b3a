"""``cluster up`` and the CA: without ``PUBGUARD_CA_PASSPHRASE`` it warns, in one line, that
the CA cannot sign again after the command; with it a CRL agent runs beside the brokers and
``cluster down`` stops it. ``ca renew-crl`` re-signs a due CRL and says one line without the
passphrase. Over real broker and agent processes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.crypto.crl_renewal import DAY
from pubguard.crypto.x509 import CertificateAuthority, load_crl
from pubguard.ops.crl_agent import running_agent
from pubguard.ops.pki import PASSPHRASE_ENV

TOPOLOGY = """
[topology]
kind = "edges"
edges = [["b0", "b1"]]
"""


def _up(tmp_path: Path, state: Path) -> object:
    conf = tmp_path / "cluster.toml"
    conf.write_text(TOPOLOGY)
    return CliRunner().invoke(cli, ["cluster", "up", "--config", str(conf), "--state", str(state)])


@pytest.mark.slow
def test_cluster_up_without_ca_passphrase_warns_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    state = tmp_path / "s"
    r = _up(tmp_path, state)
    try:
        assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
        lines = [ln for ln in r.stderr.splitlines() if PASSPHRASE_ENV in ln]  # type: ignore[attr-defined]
        assert len(lines) == 1, r.stderr  # type: ignore[attr-defined]
        assert "can no longer issue certificates or re-sign its CRL" in lines[0]
        assert running_agent(state) is None
    finally:
        CliRunner().invoke(cli, ["cluster", "down", "--state", str(state)])


@pytest.mark.slow
def test_cluster_up_with_ca_passphrase_runs_the_crl_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, "agent-pass")
    state = tmp_path / "s"
    r = _up(tmp_path, state)
    try:
        assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
        assert PASSPHRASE_ENV not in r.stderr  # type: ignore[attr-defined]
        assert running_agent(state) is not None
        st = CliRunner().invoke(cli, ["status", "--state", str(state)])
        assert st.exit_code == 0 and "renewed by the CRL agent" in st.output, st.output
    finally:
        down = CliRunner().invoke(cli, ["cluster", "down", "--state", str(state)])
    assert down.exit_code == 0, down.output
    assert running_agent(state) is None


def test_renew_crl_resigns_a_due_crl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "s"
    ca_dir = state / "pki" / "ca"
    ca = CertificateAuthority.create("ca", ca_dir, passphrase=b"pw", now=time.time())
    ca.crl(now=time.time() - 6 * DAY)  # one day left: within the two-day lead
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    r = CliRunner().invoke(cli, ["ca", "renew-crl", "--state", str(state)])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and PASSPHRASE_ENV in r.output
    monkeypatch.setenv(PASSPHRASE_ENV, "pw")
    r = CliRunner().invoke(cli, ["ca", "renew-crl", "--state", str(state)])
    assert r.exit_code == 0 and "renewed" in r.output, r.output
    nxt = load_crl(ca_dir / "crl.pem").next_update
    assert nxt is not None and nxt.timestamp() > time.time() + 6.9 * DAY
    r = CliRunner().invoke(cli, ["ca", "renew-crl", "--state", str(state)])
    assert r.exit_code == 0 and "not renewed" in r.output
