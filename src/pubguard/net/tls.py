"""TLS helpers shared by every process of the network: the identity-key passphrase and the
authenticated peer.

Brokers, clients and key services authenticate each other with mutual TLS 1.3 (contexts from
:mod:`pubguard.crypto.x509`). Their identity keys are encrypted at rest with the passphrase in
``PUBGUARD_TLS_PASSPHRASE`` when it is set (PKCS#8 ``BestAvailableEncryption``); a process
takes it from its environment (a service manager's credential), never from disk. The peer's
identity (common name and role) is read only from its verified certificate.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import ssl
from collections.abc import Iterator
from typing import Any, Final

__all__ = ["TLS_PASSPHRASE_ENV", "peer_identity", "tls_passphrase_for_run", "tls_password"]

TLS_PASSPHRASE_ENV: Final = "PUBGUARD_TLS_PASSPHRASE"


@contextlib.contextmanager
def tls_passphrase_for_run() -> Iterator[bool]:
    """Within the block, ``PUBGUARD_TLS_PASSPHRASE`` is set (a random one if it was not; the
    environment is restored after), so the identities issued then are encrypted at rest and
    the broker processes started then inherit the passphrase. Yields whether it was random."""
    if os.environ.get(TLS_PASSPHRASE_ENV):
        yield False
        return
    os.environ[TLS_PASSPHRASE_ENV] = secrets.token_urlsafe(24)
    try:
        yield True
    finally:
        os.environ.pop(TLS_PASSPHRASE_ENV, None)


def tls_password() -> bytes | None:
    """The passphrase TLS identity keys are encrypted with (``PUBGUARD_TLS_PASSPHRASE``), or
    None: keys in clear (``0600``)."""
    v = os.environ.get(TLS_PASSPHRASE_ENV)
    return v.encode() if v else None


def peer_identity(obj: ssl.SSLObject | ssl.SSLSocket | None) -> tuple[str | None, str | None]:
    """(common name, role) of the verified peer certificate (role = organizational unit), or
    (None, None) without TLS. Brokers and the key service take identities only from here."""
    if obj is None:
        return None, None
    cert: Any = obj.getpeercert() or {}
    cn = role = None
    for rdn in cert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                cn = v
            elif k == "organizationalUnitName":
                role = v
    return cn, role
