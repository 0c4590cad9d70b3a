"""Run a local cluster's key service as its own process and hand its clients the network
proxies.

Theory of operation
-------------------
:func:`start_keyservice` starts ``pubguard keyservice serve`` as a child process with the TLS
identity ``keyservice`` (role ``ms``) of the cluster's PKI. Secrets reach the child through
its environment only: the EventGuard MS primary key (``PUBGUARD_MS_MASTER``) and, when the
caller knows its KDC (:class:`~pubguard.net.keyservice.kdc.KdcConfig`), the KDC master
(``PUBGUARD_KDC_MASTER``); the KDC's public policy goes to ``<state>/kdc-policy.json`` (0600).
The child writes its public keys to ``<state>/ms-key.json``; they must equal the bundle's, or
the start fails (and the child is ended).

It returns what it started, a :class:`KeyServiceProcess`, and changes nothing it was given:
the caller (:class:`~pubguard.ops.cluster.LocalCluster`) keeps the process, stops it, and
points its bundle's eventguard clients at :meth:`KeyServiceProcess.client`. Every client then
gets its keys over mutual TLS, each over a connection authenticated as that client's
certificate: eventguard through ``KeyBundle.ms_for`` (a
:class:`~pubguard.net.keyservice.client.KeyServiceClient`), psguard and default through
:func:`keyservice_scheme` (:class:`~pubguard.net.keyservice.kdc_client.RemoteKdc` and
:class:`~pubguard.net.keyservice.kdc_client.RemoteAuthority`, which
:class:`~pubguard.schemes.psguard.client.PSGuardClient` and
:class:`~pubguard.schemes.default.client.DefaultClient` use unchanged). Building those client
faces is :mod:`pubguard.net.client.profiles`' job (``pubguard.connect``); this module only
adds what the bundle knows (:func:`client_options`: the publisher's signing key, the pinned
public keys) and says which profiles the process serves (:func:`serves`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, VerifyKey
from pubguard.crypto.secret import raw
from pubguard.crypto.x509 import Role
from pubguard.errors import StateError
from pubguard.net.client.profiles import profile_scheme
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.ops.pki import ClusterPki
from pubguard.ops.process import terminate
from pubguard.schemes.base import ClientScheme
from pubguard.schemes.registry import KeyBundle

__all__ = [
    "ENDPOINT_FILE",
    "KDC_PROFILES",
    "KEYSERVICE",
    "POLICY_FILE",
    "KeyServiceProcess",
    "client_options",
    "keyservice_scheme",
    "serves",
    "start_keyservice",
]

KEYSERVICE: Final = "keyservice"  # the key-service process and its TLS identity
POLICY_FILE: Final = "kdc-policy.json"
ENDPOINT_FILE: Final = "ms-key.json"  # the key service's public keys and address, in <state>
LOG_FILE: Final = "keyservice.log"
START_TIMEOUT: Final = 30.0
#: profiles whose clients get their keys from the KDC / authority
KDC_PROFILES: Final = ("psguard", "psguard-paper", "default")


def _cert_name(identity: str) -> str:
    return identity.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class KeyServiceProcess:
    """What :func:`start_keyservice` started: the child process, where it listens, whether it
    serves the PSGuard KDC / default authority (``kdc``), and the client factory bound to it."""

    proc: subprocess.Popen[bytes] = dataclasses.field(repr=False)
    host: str
    port: int
    kdc: bool
    ms_key: VerifyKey = dataclasses.field(repr=False)  # the MS public key, pinned in clients
    pki: ClusterPki = dataclasses.field(repr=False)
    kmc: bool = False  # whether it hosts narada's KMC (net/keyservice/kmc_service.py)

    @property
    def url(self) -> str:
        """Where clients reach it: ``tls://host:port`` (``pubguard.connect(keyservice=)``)."""
        return f"tls://{self.host}:{self.port}"

    def client(self, identity: str) -> KeyServiceClient:
        """A key-service connection authenticated as ``identity``'s certificate (the name
        before any ``/link`` suffix: the service serves keys in the caller's own name only);
        usable as a bundle's ``ms_for``."""
        return KeyServiceClient(
            self.host,
            self.port,
            self.pki.client_context(_cert_name(identity)),
            ms_key=self.ms_key,
        )


async def start_keyservice(
    *,
    host: str,
    state_dir: Path,
    pki: ClusterPki,
    bundle: KeyBundle,
    kdc: KdcConfig | None,
    detached: bool = False,
    port: int = 0,
    pid_dir: Path | None = None,
    kmc: tuple[SecretBytes, Path] | None = None,
) -> KeyServiceProcess:
    """Start the key service of ``bundle`` (and of ``kdc``, when given) on ``host`` and
    ``port`` (0: any free one); its files go to ``state_dir``. ``detached``: it outlives this
    process (otherwise it stops by itself when this process exits). ``pid_dir``: where it
    writes its pid file once it listens (as a broker does). ``kmc``: also host narada's KMC,
    ``(its secret, its certificate's path)`` (the secret through the child's environment,
    ``PUBGUARD_KMC_MASTER``). See the module docstring."""
    pki.identity(KEYSERVICE, Role.MS)  # issued here: the child needs no CA passphrase
    info = state_dir / ENDPOINT_FILE
    with contextlib.suppress(FileNotFoundError):
        info.unlink()
    ms = bundle.ms
    env = dict(os.environ)
    env["PUBGUARD_MS_MASTER"] = base64.b64encode(ms.export_master().reveal()).decode()
    extra: list[str] = []
    if kdc is not None:
        env["PUBGUARD_KDC_MASTER"] = base64.b64encode(raw(kdc.master)).decode()
        kdc.save_policy(state_dir / POLICY_FILE)
        extra = ["--kdc-policy", str(state_dir / POLICY_FILE)]
    if kmc is not None:
        env["PUBGUARD_KMC_MASTER"] = base64.b64encode(raw(kmc[0])).decode()
        extra += ["--kmc-cert", str(kmc[1])]
    tie = [] if detached else ["--parent-pid", str(os.getpid())]
    if pid_dir is not None:
        tie += ["--pid-dir", str(pid_dir)]
    logf = state_dir / LOG_FILE
    with logf.open("ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pubguard.cli.main",
                "keyservice",
                "serve",
                "--state",
                str(state_dir),
                "--host",
                host,
                "--port",
                str(port),
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
    try:
        data = await _wait_endpoint(info, proc, logf)
        if base64.b64decode(data["ms_key"]) != ms.public_key.to_bytes():
            raise StateError("the key service runs another MS key")
        if kdc is not None:
            ak = base64.b64decode(data.get("authority_key") or "")
            if ak != bundle.authority.public_key.to_bytes():
                raise StateError("the key service runs another KDC / authority than the bundle's")
    except BaseException:
        terminate(proc)  # not handed to anyone: ours to end
        raise
    return KeyServiceProcess(
        proc, host, int(data["port"]), kdc is not None, ms.public_key, pki, kmc is not None
    )


async def _wait_endpoint(info: Path, proc: subprocess.Popen[bytes], logf: Path) -> Any:
    """The child's endpoint file once it is written; StateError if the child exits first or
    does not write it within :data:`START_TIMEOUT`."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            return json.loads(info.read_text())
        except (OSError, ValueError):
            if proc.poll() is not None:
                raise StateError(
                    f"key service exited with {proc.returncode}: {logf.read_text()[-600:]}"
                ) from None
            if time.monotonic() > deadline:
                raise StateError("key service did not start") from None
            await asyncio.sleep(0.02)


def serves(keyservice: KeyServiceProcess | None, profile: str | None) -> bool:
    """Whether clients of ``profile`` get their keys from ``keyservice`` (eventguard: the MS
    always; psguard and default: when it serves the KDC; narada: when it hosts the KMC;
    plain: never)."""
    if keyservice is None or profile is None:
        return False
    if profile == "eventguard":
        return True
    if profile == "narada":
        return keyservice.kmc
    return profile in KDC_PROFILES and keyservice.kdc


def client_options(
    bundle: KeyBundle, keyservice: KeyServiceProcess, identity: str
) -> dict[str, Any]:
    """What :func:`pubguard.net.client.profiles.connect` takes beside the URLs for a client of
    ``bundle``'s deployment: the identity's publisher key (the one psguard brokers know), the
    publishers' keys, the pinned MS and authority keys and the brokers' timestamp window."""
    return {
        "signing_key": bundle.signing_key(identity),
        "publisher_keys": bundle.broker_keys().publishers,
        "ms_key": keyservice.ms_key,
        "authority_key": bundle.authority.public_key,
        "max_delay": bundle.max_delay,
    }


def keyservice_scheme(
    bundle: KeyBundle,
    profile: str,
    identity: str,
    *,
    keyservice: KeyServiceProcess | None,
    now: float,
    topics: tuple[str, ...] = (),
) -> ClientScheme:
    """The client face of ``profile`` for ``identity`` from ``bundle``; when ``keyservice``
    serves the profile (:func:`serves`), its keys come from it over mutual TLS, authenticated
    as ``identity``'s certificate (:func:`~pubguard.net.client.profiles.profile_scheme`; its
    name must be the certificate's: the service serves keys in the caller's own name only).
    The key-service connection is closed by the garbage collector: a client that owns it is
    what :func:`~pubguard.net.client.profiles.connect` makes."""
    if keyservice is None or not serves(keyservice, profile):
        return bundle.client(profile, identity, topics=topics, now=now)
    opts = client_options(bundle, keyservice, identity)
    ks = keyservice.client(identity)
    del opts["ms_key"]  # pinned in the key-service client already
    return profile_scheme(profile, identity, keyservice=ks, **opts)
