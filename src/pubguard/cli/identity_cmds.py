"""Credentials of a cluster's users: ``identity issue`` and ``keyservice new-secret``.

Examples::

    PUBGUARD_CA_PASSPHRASE=... pubguard identity issue researcher --role subscriber --state st
    PUBGUARD_CA_PASSPHRASE=... pubguard identity issue ward --role publisher --state st
    PUBGUARD_CA_PASSPHRASE=... pubguard identity issue h1 --role broker --state st
    PUBGUARD_CA_PASSPHRASE=... pubguard identity revoke ward --state st
    PUBGUARD_TLS_PASSPHRASE=... pubguard keyservice new-secret master.pem

``identity issue`` has the cluster's CA (``<state>/pki/ca``, its key opened with
``PUBGUARD_CA_PASSPHRASE``) issue a client certificate for NAME into ``<state>/pki/NAME/``; its
private key is encrypted with ``PUBGUARD_TLS_PASSPHRASE`` when that is set (as every
identity's). A publisher also gets an Ed25519 publication key beside it (protected the same
way; psguard brokers learn its public half at the next ``cluster up``,
:mod:`pubguard.ops.cluster_keys`). The certificate's name is the identity the key service
knows: what the KDC policy names. ``--role broker`` issues a broker's certificate instead (a
broker another domain runs on its own host, with its own ``broker.toml``).

``identity revoke`` has the CA add NAME's certificate to its CRL (``<state>/pki/ca/crl.pem``):
brokers and the key service reload it within seconds and refuse the certificate at the TLS
handshake (narada-secure-delivery.txt §IV-A: the CA's revocation list). ``pubguard keyservice
revoke --identity NAME`` revokes its keys at the authority as well.

``keyservice new-secret FILE`` writes a fresh 32-byte master secret for ``[keyservice]
master_file``: encrypted with ``PUBGUARD_TLS_PASSPHRASE`` (required), ``0600``.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from pubguard.cli.common import console, get_group

__all__ = ["register"]


def register(cli: click.Group) -> None:
    identity = get_group(cli, "identity", "Client identities issued by the cluster's CA.")

    @identity.command("issue")
    @click.option(
        "--state",
        type=click.Path(path_type=Path),
        default=Path("pubguard-cluster"),
        show_default=True,
        help="Cluster state folder (the CA in <state>/pki/ca).",
    )
    @click.option(
        "--role",
        type=click.Choice(["publisher", "subscriber", "broker"]),
        required=True,
        help="A publisher also gets a publication key (psguard records are signed with it); "
        "a broker gets a broker certificate.",
    )
    @click.argument("name")
    def issue(state: Path, role: str, name: str) -> None:
        """Issue a client certificate for NAME from the cluster's CA (its passphrase from
        PUBGUARD_CA_PASSPHRASE)."""
        from pubguard.crypto.x509 import Role
        from pubguard.errors import ConfigError
        from pubguard.ops.cluster_keys import issue_publisher_key
        from pubguard.ops.pki import PASSPHRASE_ENV, ClusterPki

        if not name or "/" in name or not all(c.isalnum() or c in "-_." for c in name):
            raise ConfigError(f"{name!r} is not a valid identity name (letters, digits, - _ .)")
        pki = ClusterPki(state / "pki")
        if not pki.exists():
            raise ConfigError(f"no CA in {pki.ca_dir} (pubguard cluster up creates it)")
        cert = pki.root / name / f"{name}.pem"
        existed = cert.exists()
        if not existed and not os.environ.get(PASSPHRASE_ENV):
            raise ConfigError(f"set {PASSPHRASE_ENV} (the CA's passphrase) to issue {name!r}")
        ident = pki.identity(name, Role.BROKER if role == "broker" else Role.CLIENT)
        verb = "already issued" if existed else "issued"
        console.print(f"{verb} {name}: certificate {ident.cert_path}", soft_wrap=True)
        if role == "publisher":
            key = issue_publisher_key(pki, name)
            console.print(
                f"publication key {key.to_bytes().hex()[:16]}... beside it; psguard brokers "
                "know it from the next cluster up",
                soft_wrap=True,
            )

    keyservice = get_group(
        cli, "keyservice", "Key services (EventGuard MS, PSGuard KDC) over mutual TLS."
    )

    @keyservice.command("new-secret")
    @click.argument("path", type=click.Path(path_type=Path))
    def new_secret(path: Path) -> None:
        """Write a fresh master secret to PATH for [keyservice] master_file (encrypted with
        PUBGUARD_TLS_PASSPHRASE, 0600). An existing file is never replaced."""
        from pubguard.crypto import random_bytes
        from pubguard.crypto.keyfile import SECRET_SIZE, save_secret
        from pubguard.errors import ConfigError
        from pubguard.net.tls import tls_password

        password = tls_password()
        if not password:
            raise ConfigError("set PUBGUARD_TLS_PASSPHRASE: a master secret is stored encrypted")
        if path.exists():
            raise ConfigError(f"{path} exists; a master secret is never replaced")
        save_secret(path, random_bytes(SECRET_SIZE), password)
        console.print(f"master secret written to {path} (encrypted, 0600)", soft_wrap=True)

    @identity.command("revoke")
    @click.option(
        "--state",
        type=click.Path(path_type=Path),
        default=Path("pubguard-cluster"),
        show_default=True,
        help="Cluster state folder (the CA in <state>/pki/ca).",
    )
    @click.argument("name")
    def revoke(state: Path, name: str) -> None:
        """Revoke NAME's certificate: the CA re-signs its CRL with it listed (passphrase from
        PUBGUARD_CA_PASSPHRASE); brokers and the key service refuse it from their next reload."""
        from pubguard.ops.pki import ClusterPki

        pki = ClusterPki(state / "pki")
        pki.revoke(name)
        console.print(f"revoked {name}: listed in {pki.ca_dir / 'crl.pem'}", soft_wrap=True)
