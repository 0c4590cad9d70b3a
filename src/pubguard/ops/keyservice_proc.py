"""Run a :class:`~pubguard.ops.cluster.LocalCluster`'s key service as its own process and
hand its clients the network proxies (issue 5, items 1-2).

Theory of operation
-------------------
:func:`start_keyservice` starts ``pubguard keyservice serve`` as a child process with the
cluster's TLS identity ``keyservice`` (role ``ms``). Secrets reach the child through its
environment only: the EventGuard MS primary key (``PUBGUARD_MS_MASTER``) and, when the cluster
knows its KDC (:class:`~pubguard.net.keyservice.kdc.KdcConfig`), the KDC master
(``PUBGUARD_KDC_MASTER``); the KDC's public policy goes to ``<state>/kdc-policy.json`` (0600).
The child writes its public keys to ``<state>/ms-key.json``; they must equal the bundle's, or
the start fails.

Then every client the cluster makes gets its keys over mutual TLS, each over a connection
authenticated as that client's certificate: eventguard through ``KeyBundle.ms_for`` (a
:class:`~pubguard.net.keyservice.client.KeyServiceClient`), psguard and default through
:func:`keyservice_scheme` (:class:`~pubguard.net.keyservice.kdc_client.RemoteKdc` and
:class:`~pubguard.net.keyservice.kdc_client.RemoteAuthority`, which
:class:`~pubguard.schemes.psguard.network.PSGuardClient` and
:class:`~pubguard.schemes.default.client.DefaultClient` use unchanged).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Final

from pubguard.crypto.secret import raw
from pubguard.crypto.x509 import Role
from pubguard.errors import StateError
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.kdc_client import RemoteAuthority, RemoteKdc
from pubguard.schemes.base import ClientScheme
from pubguard.schemes.default.client import DefaultClient
from pubguard.schemes.psguard.network import PSGuardClient

if TYPE_CHECKING:
    from pubguard.ops.cluster import LocalCluster

__all__ = ["KDC_PROFILES", "POLICY_FILE", "keyservice_scheme", "start_keyservice"]

KEYSERVICE: Final = "keyservice"
POLICY_FILE: Final = "kdc-policy.json"
START_TIMEOUT: Final = 30.0
#: profiles whose clients get their keys from the KDC / authority
KDC_PROFILES: Final = ("psguard", "psguard-paper", "default")


def _cert_name(identity: str) -> str:
    return identity.split("/", 1)[0]


async def start_keyservice(cluster: LocalCluster) -> int:
    """See the module docstring; returns the port."""
    procs = cluster.procs
    if KEYSERVICE in procs and procs[KEYSERVICE].poll() is None:
        raise StateError("the key service is already running")
    cluster.pki.identity(KEYSERVICE, Role.MS)  # issued here: the child needs no CA passphrase
    state = cluster.state_dir
    info = state / "ms-key.json"
    with contextlib.suppress(FileNotFoundError):
        info.unlink()
    bundle, kdc = cluster.bundle, cluster.kdc
    ms = bundle.ms
    env = dict(os.environ)
    env["PUBGUARD_MS_MASTER"] = base64.b64encode(ms.export_master().reveal()).decode()
    extra: list[str] = []
    if kdc is not None:
        env["PUBGUARD_KDC_MASTER"] = base64.b64encode(raw(kdc.master)).decode()
        kdc.save_policy(state / POLICY_FILE)
        extra = ["--kdc-policy", str(state / POLICY_FILE)]
    tie = [] if cluster.detached else ["--parent-pid", str(os.getpid())]
    logf = state / "keyservice.log"
    with logf.open("ab") as log:
        procs[KEYSERVICE] = proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pubguard.cli.main",
                "keyservice",
                "serve",
                "--state",
                str(state),
                "--host",
                cluster.config.host,
                "--port",
                "0",
                "--epoch-length",
                repr(ms.epoch_length),
                "--origin",
                repr(ms.origin),
                *extra,
                *tie,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            data = json.loads(info.read_text())
            break
        except (OSError, ValueError):
            if proc.poll() is not None:
                raise StateError(
                    f"key service exited with {proc.returncode}: {logf.read_text()[-600:]}"
                ) from None
            if time.monotonic() > deadline:
                raise StateError("key service did not start") from None
            await asyncio.sleep(0.02)
    if base64.b64decode(data["ms_key"]) != ms.public_key.to_bytes():
        raise StateError("the key service runs another MS key")
    if kdc is not None:
        ak = base64.b64decode(data.get("authority_key") or "")
        if ak != bundle.authority.public_key.to_bytes():
            raise StateError("the key service runs another KDC / authority than the bundle's")
    host, port = cluster.config.host, int(data["port"])
    cluster.keyservice_port = port
    cluster.keyservice_kdc = kdc is not None

    def ms_for(identity: str) -> KeyServiceClient:
        return KeyServiceClient(
            host, port, cluster.pki.client_context(_cert_name(identity)), ms_key=ms.public_key
        )

    bundle.ms_for = ms_for
    return port


def keyservice_scheme(
    cluster: LocalCluster, profile: str, identity: str, *, now: float, topics: tuple[str, ...] = ()
) -> ClientScheme:
    """The client face of ``profile`` for ``identity``; psguard and default get their KDC /
    authority as network proxies authenticated as ``identity``'s certificate (its name must be
    the certificate's: the service serves keys in the caller's own name only)."""
    bundle = cluster.bundle
    scheme = bundle.client(profile, identity, topics=topics, now=now)
    if profile not in KDC_PROFILES or not cluster.keyservice_kdc:
        return scheme
    assert cluster.keyservice_port is not None
    ks = KeyServiceClient(
        cluster.config.host,
        cluster.keyservice_port,
        cluster.pki.client_context(_cert_name(identity)),
        ms_key=bundle.ms.public_key,
    )
    if isinstance(scheme, DefaultClient):
        auth = RemoteAuthority(ks, authority_key=bundle.authority.public_key)
        return DefaultClient(
            identity,
            auth,  # type: ignore[arg-type]
            signing_key=bundle.signing_key(identity),
            max_delay=bundle.max_delay,
        )
    if isinstance(scheme, PSGuardClient):
        scheme.service = RemoteKdc(ks)  # type: ignore[assignment]  # no key fetched yet
        return scheme
    raise StateError(f"no key-service proxy for a {type(scheme).__name__}")  # pragma: no cover
