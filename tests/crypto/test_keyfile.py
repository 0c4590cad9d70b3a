"""Secrets at rest as the identities' keys are kept: encrypted PKCS#8, 0600, opened only
with the passphrase, and a master-secret file others may read is refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.crypto.keyfile import load_secret, load_signing_key, save_secret, save_signing_key
from pubguard.errors import ConfigError, ValidationError

PASS = b"correct horse"


@settings(max_examples=5, deadline=None)  # each save runs the PKCS#8 key derivation
@given(secret=st.binary(min_size=32, max_size=32))
def test_secret_round_trips_encrypted_and_private(tmp_path_factory, secret: bytes) -> None:
    path = tmp_path_factory.mktemp("k") / "master.pem"
    save_secret(path, secret, PASS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = path.read_bytes()
    assert data.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") and secret not in data
    assert load_secret(path, PASS).reveal() == secret


def test_secret_refuses_wrong_passphrase_open_mode_and_clear_file(tmp_path: Path) -> None:
    path = tmp_path / "master.pem"
    save_secret(path, os.urandom(32), PASS)
    with pytest.raises(ConfigError, match="wrong passphrase"):
        load_secret(path, b"wrong")
    with pytest.raises(ConfigError, match="no passphrase"):
        load_secret(path, None)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="must be 0600"):
        load_secret(path, PASS)
    clear = tmp_path / "clear.pem"
    save_signing_key(clear, SigningKey.generate(), None)
    with pytest.raises(ConfigError, match="not encrypted"):
        load_secret(clear, PASS)
    with pytest.raises(ValidationError):
        save_secret(tmp_path / "x.pem", os.urandom(32), b"")
    with pytest.raises(ConfigError, match="cannot read"):
        load_secret(tmp_path / "missing.pem", PASS)


@pytest.mark.parametrize("passphrase", [None, PASS])
def test_signing_key_round_trips(tmp_path: Path, passphrase: bytes | None) -> None:
    sk = SigningKey.generate()
    path = tmp_path / "publisher.key.pem"
    save_signing_key(path, sk, passphrase)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    back = load_signing_key(path, passphrase)
    assert back.public == sk.public
    assert sk.private_bytes() not in path.read_bytes() or passphrase is None
