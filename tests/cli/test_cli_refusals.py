"""What the CLI must refuse before it sends, and what a broker must refuse before it starts
(real broker processes started by ``cluster up`` in a temporary folder).

A new-user run found that on a ``profiles = ["default"]`` cluster ``publish`` printed
``published <id>`` with exit 0 while the broker dropped the plaintext as ``unknown profile``
(and a recording broker stored it), and ``subscribe`` said "subscribed" and received nothing;
and that a broker whose ``name`` is not its certificate's common name started and ran.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.crypto.x509 import Role
from pubguard.ops.pki import DEFAULT_CLIENTS, ClusterPki

pytestmark = pytest.mark.slow

DEFAULT_ONLY = """
[topology]
kind = "tree"
arity = 2
depth = 0
[broker]
profiles = ["default"]
[brokers.b0]
record = true
"""
REFUSED = (
    "pubguard: error: broker b0 does not serve profile 'plain' (it serves: default); "
    "nothing was sent"
)


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubguard.cli.main", *args, "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def default_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    tmp = tmp_path_factory.mktemp("default-only")
    (tmp / "cluster.toml").write_text(DEFAULT_ONLY)
    state = tmp / "net"
    runner = CliRunner()
    res = runner.invoke(
        cli, ["cluster", "up", "--config", str(tmp / "cluster.toml"), "--state", str(state)]
    )
    assert res.exit_code == 0, res.output
    try:
        yield state
    finally:
        runner.invoke(cli, ["cluster", "down", "--state", str(state)])


def _recorded(state: Path) -> list[tuple[str, dict[str, object]]]:
    """Every message the recording broker b0 received, as it arrived."""
    path = state / "b0" / "seen.msgpack"
    if not path.exists():
        return []
    return [(link, m) for link, m in msgpack.Unpacker(path.open("rb"), raw=False)]


def _drops(state: Path) -> object:
    res = _cli(state, "status", "--json")
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)["b0"]
    return s["drops"], s["counters"].get("in.publish", 0)


def test_plaintext_to_a_default_only_broker_is_refused_before_it_is_sent(
    default_only: Path,
) -> None:
    before = _drops(default_only)
    ev = json.dumps({"attrs": {"ssn": "123-45-6789"}, "id": "secret1"})
    res = _cli(default_only, "publish", "--broker", "b0", ev)
    assert res.returncode == 1
    assert res.stdout == ""  # no "published"
    assert res.stderr.strip() == REFUSED
    res = _cli(default_only, "subscribe", "--broker", "b0", "--count", "1", 'ssn = "x"')
    assert res.returncode == 1
    assert "subscribed" not in res.stderr
    assert res.stderr.strip() == REFUSED
    # what the broker got: not one message from the CLI, no drop counted, no plaintext
    assert [link for link, _ in _recorded(default_only) if link.startswith("c:cli")] == []
    assert _drops(default_only) == before
    seen = default_only / "b0" / "seen.msgpack"
    assert not seen.exists() or b"123-45-6789" not in seen.read_bytes()


def test_a_broker_whose_name_is_not_its_certificates_refuses_to_start(tmp_path: Path) -> None:
    pki = ClusterPki(tmp_path / "pki")
    ident = pki.identity("b0", Role.BROKER)
    state = tmp_path / "b9"
    config = tmp_path / "b9.toml"
    config.write_text(
        f'name = "b9"\nport = 0\nstate_dir = "{state}"\n[tls]\n'
        f'ca = "{ident.ca_path}"\ncert = "{ident.cert_path}"\nkey = "{ident.key_path}"\n'
    )
    line = (
        f"pubguard: error: broker name 'b9' differs from the common name 'b0' of its "
        f"certificate {ident.cert_path}: they must be equal"
    )
    res = subprocess.run(
        [sys.executable, "-m", "pubguard.cli.main", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1
    assert res.stderr.strip() == line
    assert not state.exists()  # nothing opened or written

    # cluster up surfaces it too: b0's certificate in the PKI names another broker
    cstate = tmp_path / "net"
    cpki = ClusterPki(cstate / "pki")
    for name in DEFAULT_CLIENTS:
        cpki.identity(name, Role.CLIENT)
    b0, b1 = cpki.identity("b0", Role.BROKER), cpki.identity("b1", Role.BROKER)
    shutil.copyfile(b1.cert_path, b0.cert_path)
    shutil.copyfile(b1.key_path, b0.key_path)
    (tmp_path / "one.toml").write_text('[topology]\nkind = "tree"\narity = 2\ndepth = 0\n')
    res2 = CliRunner().invoke(
        cli, ["cluster", "up", "--config", str(tmp_path / "one.toml"), "--state", str(cstate)]
    )
    try:
        assert res2.exit_code == 1, res2.output
        assert "broker name 'b0' differs from the common name 'b1'" in res2.stderr
        assert "Traceback" not in res2.output
    finally:
        CliRunner().invoke(cli, ["cluster", "down", "--state", str(cstate)])
