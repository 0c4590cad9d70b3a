"""Mutual TLS 1.3 on loopback (real sockets, port 0) with CA-issued certificates."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from pubguard.crypto.x509 import (
    CertificateAuthority,
    Role,
    client_ssl_context,
    issue_tls_identity,
    load_certificate,
    server_ssl_context,
)
from pubguard.errors import ConfigError, ValidationError

PASS = b"tls-test-passphrase"


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> tuple[object, object]:
    """Run one TLS exchange; return (server outcome, client outcome): bytes or the exception."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    port = listener.getsockname()[1]
    result: dict[str, object] = {}

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peer = tls.getpeercert()
                tls.sendall(
                    b"hello "
                    + dict(x[0] for x in peer["subject"])["organizationalUnitName"].encode()
                )
                result["server"] = tls.recv(100)
        except (ssl.SSLError, OSError) as exc:
            result["server"] = exc

    t = threading.Thread(target=serve)
    t.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                got = tls.recv(100)  # TLS 1.3: a refused client cert surfaces here
                tls.sendall(b"bye")
                client: object = got
    except (ssl.SSLError, OSError) as exc:
        client = exc
    t.join(10)
    listener.close()
    return result.get("server"), client


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    root = tmp_path_factory.mktemp("pki")
    now = time.time()  # OpenSSL checks validity against the real clock
    ca = CertificateAuthority.create("ca", root / "ca", passphrase=PASS, now=now)
    broker = issue_tls_identity(ca, "broker-1", Role.BROKER, root / "broker", now=now)
    client = issue_tls_identity(ca, "client-1", Role.CLIENT, root / "client", now=now)
    return ca, broker, client, root, now


def test_mutual_tls_succeeds_with_ca_issued_ed25519_certs(pki):
    _, broker, client, _, _ = pki
    server_ctx = server_ssl_context(broker.cert_path, broker.key_path, broker.ca_path)
    client_ctx = client_ssl_context(client.cert_path, client.key_path, client.ca_path)
    server, got = _handshake(server_ctx, client_ctx)
    assert got == b"hello client" and server == b"bye"
    assert client_ctx.minimum_version is ssl.TLSVersion.TLSv1_3


def test_client_from_another_ca_is_refused(pki):
    _, broker, _, root, now = pki
    evil_ca = CertificateAuthority.create("evil", root / "evil-ca", passphrase=PASS, now=now)
    evil = issue_tls_identity(evil_ca, "client-x", Role.CLIENT, root / "evil", now=now)
    server_ctx = server_ssl_context(broker.cert_path, broker.key_path, broker.ca_path)
    # the evil client trusts our CA for the server, but presents a certificate from its own CA
    client_ctx = client_ssl_context(evil.cert_path, evil.key_path, broker.ca_path)
    server, got = _handshake(server_ctx, client_ctx)
    assert isinstance(server, ssl.SSLError) and isinstance(got, ssl.SSLError | OSError)


def test_server_from_another_ca_is_refused(pki):
    _, _, client, root, now = pki
    evil_ca = CertificateAuthority.create("evil2", root / "evil-ca2", passphrase=PASS, now=now)
    evil = issue_tls_identity(evil_ca, "broker-x", Role.BROKER, root / "evil2", now=now)
    server_ctx = server_ssl_context(evil.cert_path, evil.key_path, client.ca_path)
    client_ctx = client_ssl_context(client.cert_path, client.key_path, client.ca_path)
    server, got = _handshake(server_ctx, client_ctx)
    assert isinstance(got, ssl.SSLCertVerificationError)
    assert isinstance(server, ssl.SSLError | OSError)


def test_revoked_client_is_refused_via_crl(tmp_path):
    now = time.time()
    ca = CertificateAuthority.create("ca", tmp_path / "ca", passphrase=PASS, now=now)
    broker = issue_tls_identity(ca, "broker", Role.BROKER, tmp_path / "b", now=now, key_type="p256")
    client = issue_tls_identity(ca, "client", Role.CLIENT, tmp_path / "c", now=now, passphrase=b"k")
    crl = ca.revoke(ca.issue_signing_identity("other", Role.CLIENT, now=now)[0], now=now)
    (tmp_path / "crl-ok.pem").write_bytes(crl.to_pem())
    server_ok = server_ssl_context(
        broker.cert_path, broker.key_path, broker.ca_path, crl_path=tmp_path / "crl-ok.pem"
    )
    client_ctx = client_ssl_context(
        client.cert_path, client.key_path, client.ca_path, password=b"k"
    )
    assert _handshake(server_ok, client_ctx) == (b"bye", b"hello client")
    crl = ca.revoke(load_certificate(client.cert_path), now=now)
    (tmp_path / "crl-revoked.pem").write_bytes(crl.to_pem())
    server_ctx = server_ssl_context(
        broker.cert_path, broker.key_path, broker.ca_path, crl_path=tmp_path / "crl-revoked.pem"
    )
    server, got = _handshake(server_ctx, client_ctx)
    assert isinstance(server, ssl.SSLError) and isinstance(got, ssl.SSLError | OSError)


def test_bad_tls_inputs_are_typed(pki, tmp_path):
    ca, broker, _, _, now = pki
    with pytest.raises(ValidationError):
        issue_tls_identity(ca, "x", Role.CLIENT, tmp_path, now=now, key_type="rsa")
    with pytest.raises(ConfigError):
        server_ssl_context(broker.cert_path, tmp_path / "missing.pem", broker.ca_path)


def test_a_tls_context_error_names_the_file_that_is_wrong(pki, tmp_path):
    _, broker, _, _, _ = pki
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError) as info:
        server_ssl_context(broker.cert_path, missing, broker.ca_path)
    assert str(info.value) == (
        f"cannot build TLS context: certificate {broker.cert_path} / key {missing}: "
        "No such file or directory"
    )
    with pytest.raises(ConfigError) as info:
        client_ssl_context(broker.cert_path, broker.key_path, missing)
    assert str(info.value).startswith(f"cannot build TLS context: CA {missing}: ")
    assert info.value.path == str(missing)
    junk = tmp_path / "crl.pem"
    junk.write_text("not a CRL")
    with pytest.raises(ConfigError) as info:
        server_ssl_context(broker.cert_path, broker.key_path, broker.ca_path, crl_path=junk)
    assert str(info.value).startswith(f"cannot build TLS context: CRL {junk}: ")


def test_identity_keys_encrypted_at_rest_open_only_with_their_passphrase(pki, tmp_path):
    """A passphrase encrypts a TLS identity key (PKCS#8); the contexts load it with the right
    one and refuse it, with a one-line reason and without prompting, otherwise."""
    ca, broker, _, _, now = pki
    secret = b"identity-passphrase-canary"
    enc = issue_tls_identity(
        ca, "client-enc", Role.CLIENT, tmp_path / "enc", now=now, passphrase=secret
    )
    pem = enc.key_path.read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") and secret not in pem
    assert enc.key_path.stat().st_mode & 0o777 == 0o600
    client_ctx = client_ssl_context(enc.cert_path, enc.key_path, enc.ca_path, password=secret)
    server_ctx = server_ssl_context(broker.cert_path, broker.key_path, broker.ca_path)
    assert _handshake(server_ctx, client_ctx) == (b"bye", b"hello client")
    for wrong in (None, b"not-it"):
        t0 = time.monotonic()
        with pytest.raises(ConfigError, match="encrypted and the passphrase is missing") as ei:
            client_ssl_context(enc.cert_path, enc.key_path, enc.ca_path, password=wrong)
        assert time.monotonic() - t0 < 60  # no terminal prompt (it would wait for ever)
        assert secret.decode() not in str(ei.value) and "\n" not in str(ei.value)
