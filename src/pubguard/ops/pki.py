"""The certificates of a local cluster: a CA and one TLS identity per broker and client.

On first use :class:`ClusterPki` creates the CA in ``<state>/pki/ca`` and issues identities
into ``<state>/pki/<name>/`` with ``pubguard.crypto.x509``. The CA key is encrypted at rest
with the passphrase from ``PUBGUARD_CA_PASSPHRASE``; without it a random passphrase lives only
in this process, so identities can be issued while the object lives (tests, the demo, ``cluster
up``), and later only the ones issued then (``admin``, ``cli``) are available.

The identities' private keys (brokers', clients', the key service's) are encrypted at rest
with the passphrase from ``PUBGUARD_TLS_PASSPHRASE`` when it is set (PKCS#8,
``BestAvailableEncryption``), and every TLS context of this package loads them with it
(:func:`pubguard.net.tls.tls_password`): a broker restarts unattended when its environment carries the
passphrase (a service manager's credential), and a copy of the state folder alone opens
nothing. Without it they are written in clear, ``0600`` (``pubguard demo`` sets a random one
for its run). No passphrase is ever written to disk.
"""

from __future__ import annotations

import os
import secrets
import ssl
import time
from pathlib import Path
from typing import Final

from pubguard.crypto import VerifyKey
from pubguard.crypto.x509 import (
    CRL_FILE,
    CertificateAuthority,
    Role,
    TlsIdentity,
    client_ssl_context,
    issue_tls_identity,
    load_certificate,
    server_ssl_context,
)
from pubguard.errors import ConfigError
from pubguard.net.tls import tls_password

__all__ = [
    "DEFAULT_CLIENTS",
    "PASSPHRASE_ENV",
    "ClusterPki",
]

PASSPHRASE_ENV: Final = "PUBGUARD_CA_PASSPHRASE"
DEFAULT_CLIENTS: Final = ("admin", "cli")


class ClusterPki:
    """CA + identities under ``root`` (``<state>/pki``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._ca: CertificateAuthority | None = None
        env = os.environ.get(PASSPHRASE_ENV)
        self._passphrase = env.encode() if env else None

    @property
    def ca_dir(self) -> Path:
        return self.root / "ca"

    def exists(self) -> bool:
        return (self.ca_dir / "ca.pem").exists()

    def ensure_ca(self) -> None:
        if self._ca is not None:
            return
        if self.exists():
            if self._passphrase is None:
                return  # issued identities stay usable; new ones need the passphrase
            self._ca = CertificateAuthority.load(self.ca_dir, passphrase=self._passphrase)
            return
        if self._passphrase is None:
            self._passphrase = secrets.token_urlsafe(24).encode()
        self._ca = CertificateAuthority.create(
            "pubguard-local-ca", self.ca_dir, passphrase=self._passphrase, now=time.time()
        )

    def identity(self, name: str, role: Role | str = Role.CLIENT) -> TlsIdentity:
        """The identity ``name``, issued now if it does not exist yet."""
        out = self.root / name
        ident = TlsIdentity(
            out / f"{name}.pem", out / f"{name}.key.pem", out / "ca.pem", out / "crl.pem"
        )
        if ident.cert_path.exists() and ident.key_path.exists():
            return ident
        self.ensure_ca()
        if self._ca is None:
            raise ConfigError(
                f"no certificate for {name!r}; set {PASSPHRASE_ENV} to issue new identities",
                key=name,
            )
        return issue_tls_identity(
            self._ca, name, role, out, now=time.time(), passphrase=tls_password()
        )

    def certify(self, name: str, role: Role | str, public_key: VerifyKey) -> Path:
        """Have the CA certify ``public_key`` as ``name`` with ``role`` (a key the caller
        derives and never writes, e.g. the hosted KMC's); the certificate's path
        (``<root>/<name>/<name>.pem``, replaced if it was there)."""
        self.ensure_ca()
        if self._ca is None:
            raise ConfigError(
                f"no CA key to certify {name!r}; set {PASSPHRASE_ENV}", key=PASSPHRASE_ENV
            )
        cert = self._ca.issue(name, role, public_key, now=time.time())
        out = self.root / name
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        (out / f"{name}.pem").write_bytes(cert.to_pem())
        return out / f"{name}.pem"

    @property
    def crl_path(self) -> Path | None:
        """The CA's current revocation list (``ca/crl.pem``), once one has been signed."""
        p = self.ca_dir / CRL_FILE
        return p if p.exists() else None

    def revoke(self, name: str) -> None:
        """Revoke identity ``name``'s certificate: the CA re-signs ``ca/crl.pem`` with it
        listed. Services that load that CRL (``keyservice serve``) refuse the certificate
        at the TLS handshake from their next start."""
        cert_path = self.root / name / f"{name}.pem"
        if not cert_path.exists():
            raise ConfigError(f"no identity {name!r} to revoke", key=name)
        self.ensure_ca()
        if self._ca is None:
            raise ConfigError(f"set {PASSPHRASE_ENV} to revoke {name!r}", key=name)
        self._ca.revoke(load_certificate(cert_path), now=time.time())

    def client_context(self, name: str) -> ssl.SSLContext:
        i = self.identity(name, Role.CLIENT)
        return client_ssl_context(i.cert_path, i.key_path, i.ca_path, password=tls_password())

    def server_context(self, name: str) -> ssl.SSLContext:
        i = self.identity(name, Role.BROKER)
        return server_ssl_context(i.cert_path, i.key_path, i.ca_path, password=tls_password())
