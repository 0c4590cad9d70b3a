from __future__ import annotations

import datetime as dt
import os
import stat

import pytest

from pubguard.crypto.signing import SigningKey
from pubguard.crypto.x509 import (
    CA_KEY_FILE,
    Certificate,
    CertificateAuthority,
    RevocationList,
    Role,
    verify_chain,
)
from pubguard.errors import ConfigError, InvalidToken, RevokedError, StateError, ValidationError

NOW = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
PASS = b"correct horse battery staple"


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    return CertificateAuthority.create(
        "pubguard-ca", tmp_path_factory.mktemp("ca"), passphrase=PASS, now=NOW
    )


def test_issue_and_verify_with_role(ca):
    sk = SigningKey.generate()
    cert = ca.issue("broker-1", Role.BROKER, sk.public, now=NOW)
    assert cert.role is Role.BROKER and cert.name == "broker-1"
    assert "OU=broker" in cert.subject
    assert cert.verify_key == sk.public
    assert (
        verify_chain(cert, ca.cert, ca.crl(now=NOW), now=NOW + dt.timedelta(days=1)) is Role.BROKER
    )
    assert verify_chain(cert, ca.cert, now=NOW, role=Role.BROKER) is Role.BROKER
    with pytest.raises(InvalidToken):
        verify_chain(cert, ca.cert, now=NOW, role=Role.KMC)
    # PEM round trip
    assert Certificate.from_pem(cert.to_pem()) == cert
    assert Certificate.from_der(cert.to_der()).serial == cert.serial


def test_validity_window(ca):
    cert, _ = ca.issue_signing_identity("c", Role.CLIENT, now=NOW, days=10)
    with pytest.raises(InvalidToken):
        verify_chain(cert, ca.cert, now=NOW + dt.timedelta(days=11))
    with pytest.raises(InvalidToken):
        verify_chain(cert, ca.cert, now=NOW - dt.timedelta(seconds=1))


def test_revoked_certificate_is_refused(tmp_path):
    ca = CertificateAuthority.create("ca", tmp_path / "ca", passphrase=PASS, now=NOW)
    good, _ = ca.issue_signing_identity("good", Role.CLIENT, now=NOW)
    bad, _ = ca.issue_signing_identity("kmc", Role.KMC, now=NOW)
    crl = ca.revoke(bad, now=NOW + dt.timedelta(hours=1))
    later = NOW + dt.timedelta(hours=2)
    assert crl.is_revoked(bad) and not crl.is_revoked(good)
    with pytest.raises(RevokedError, match="revoked"):
        verify_chain(bad, ca.cert, crl, now=later)
    assert verify_chain(good, ca.cert, crl, now=later) is Role.CLIENT
    # the CRL file is the state: a reloaded CA still lists the serial and keeps it on re-signing
    again = CertificateAuthority.load(tmp_path / "ca", passphrase=PASS)
    crl2 = again.revoke(good, now=later)
    assert crl2.serials == {good.serial, bad.serial}
    assert RevocationList.from_pem(crl2.to_pem()).serials == crl2.serials
    # a stale CRL or one signed by another CA is not trusted
    with pytest.raises(InvalidToken):
        verify_chain(good, ca.cert, crl, now=NOW + dt.timedelta(days=30))
    other = CertificateAuthority.create("other", tmp_path / "other", passphrase=PASS, now=NOW)
    with pytest.raises(InvalidToken):
        verify_chain(good, ca.cert, other.crl(now=NOW), now=later)


def test_certificate_from_another_ca_is_refused(ca, tmp_path):
    other = CertificateAuthority.create("evil", tmp_path / "evil", passphrase=PASS, now=NOW)
    cert, _ = other.issue_signing_identity("broker-1", Role.BROKER, now=NOW)
    with pytest.raises(InvalidToken):
        verify_chain(cert, ca.cert, now=NOW)
    # a leaf certificate cannot act as a CA
    leaf, _ = ca.issue_signing_identity("leaf", Role.BROKER, now=NOW)
    with pytest.raises(InvalidToken):
        verify_chain(cert, leaf, now=NOW)


def test_ca_key_encrypted_at_rest(tmp_path):
    ca = CertificateAuthority.create("ca", tmp_path / "ca", passphrase=PASS, now=NOW)
    key_file = tmp_path / "ca" / CA_KEY_FILE
    assert b"ENCRYPTED PRIVATE KEY" in key_file.read_bytes()
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    with pytest.raises(ConfigError, match="passphrase") as exc:
        CertificateAuthority.load(tmp_path / "ca", passphrase=b"wrong")
    assert "wrong" not in str(exc.value).replace("wrong passphrase", "")
    assert CertificateAuthority.load(tmp_path / "ca", passphrase=PASS).cert == ca.cert
    with pytest.raises(StateError):
        CertificateAuthority.create("ca", tmp_path / "ca", passphrase=PASS, now=NOW)


def test_bad_input_is_typed(ca):
    sk = SigningKey.generate()
    with pytest.raises(ValidationError, match="role"):
        ca.issue("x", "wizard", sk.public, now=NOW)
    with pytest.raises(ValidationError):
        ca.issue("x", Role.CA, sk.public, now=NOW)
    with pytest.raises(ValidationError):
        ca.issue("x", Role.CLIENT, sk.public, now=dt.datetime(2025, 1, 1))
    with pytest.raises(InvalidToken):
        Certificate.from_pem(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert "SigningKey" in repr(sk) and sk.private_bytes().hex() not in repr(ca)
