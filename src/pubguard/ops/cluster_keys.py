"""The key service of a cluster that runs one (``[keyservice]`` in ``cluster.toml``): its
master secret, what derives from it, and its record beside the brokers'.

Theory of operation
-------------------
ARCHITECTURE.md, *Keys*: key derivations are deterministic functions of a master secret and
public labels. So a cluster keeps exactly one secret, the master ``M``, and never writes it:
it comes from the environment variable ``[keyservice] master_env`` (base64) or from
``master_file`` (``0600``, encrypted with ``PUBGUARD_TLS_PASSPHRASE``,
:func:`pubguard.crypto.keyfile.load_secret`). Without it :func:`master_secret` raises one
:class:`~pubguard.errors.ConfigError` naming the variable, before anything starts: a random
secret would die with ``cluster up`` and leave brokers enforcing keys nobody can fetch.

From ``M`` (:func:`cluster_secrets`):

- the PSGuard KDC and the default profile's authority (psguard.txt §3.2: every filter key and
  routing token is derived from the KDC's master; the authority signs permits with a key
  derived from it), under the policy file, as :class:`~pubguard.net.keyservice.kdc.KdcConfig`;
- EventGuard's MS primary key ``rk`` (eventguard.txt §3.2), derived inside
  :class:`~pubguard.schemes.registry.KeyBundle`;
- each configured publisher's Ed25519 publication key, seeded by ``HKDF-SHA256(M, info =
  "pubguard/cluster/publisher/" || name)`` (:func:`publisher_key`; a known-answer vector in
  ``tests/ops/test_cluster_keys.py``): psguard brokers check every record's signature against
  the publisher keys they start with (:mod:`pubguard.schemes.psguard.broker`), so the same
  key must come back after ``cluster down`` / ``up``.
- when the key service serves ``narada``, the hosted KMC's secret ``HKDF-SHA256(M, info =
  "pubguard/cluster/narada-kmc")`` (:func:`kmc_secret`), from which its signing key derives
  (:mod:`pubguard.net.keyservice.kmc_service`); ``cluster up`` has the cluster CA certify that
  key (role ``kmc``, ``<state>/pki/keyservice-kmc/``) and writes the CA and that certificate
  into the brokers' keys (:func:`narada_broker_keys`).

The same ``M`` therefore gives the same public keys, tokens, permits and publisher keys after
a restart: durable subscriptions kept in the brokers' SQLite state still match, and permits
issued before still verify. A client gets its publication key from a file beside its TLS key
(``<state>/pki/<name>/publisher.key.pem``, protected as that key is), written by ``cluster
up`` for configured publishers and by ``pubguard identity issue NAME --role publisher``
(a fresh key; its public half in ``publisher.pub``, which the next ``cluster up`` adds to the
brokers' keys).

The key-service process writes its pid file to ``<state>/keyservice/pid`` (as a broker does
in its folder) and ``cluster.json`` records it under ``"keyservice"`` beside the brokers, so
``cluster status`` and ``cluster down`` from any shell find it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, SigningKey, VerifyKey, hkdf
from pubguard.crypto.keyfile import load_secret, load_signing_key, save_signing_key
from pubguard.crypto.x509 import CA_CERT_FILE, Role, load_certificate
from pubguard.errors import ConfigError, PubguardError
from pubguard.net.config import (
    KEYSERVICE_NAME,
    KEYSERVICE_SERVES,
    ClusterConfig,
    KeyServiceSettings,
)
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.net.keyservice.kmc_service import kmc_signing_key
from pubguard.net.server.pidfile import command_line, live_pid
from pubguard.net.tls import tls_password
from pubguard.ops.pki import ClusterPki
from pubguard.ops.process import alive, stop_pids
from pubguard.schemes.registry import HOSPITAL, BrokerKeys, KeyBundle

__all__ = [
    "PUBLISHER_KEY_FILE",
    "PUBLISHER_PUB_FILE",
    "ClusterSecrets",
    "cluster_secrets",
    "issue_publisher_key",
    "kmc_certificate",
    "kmc_secret",
    "narada_broker_keys",
    "narada_credentials",
    "issued_publishers",
    "keyservice_pid",
    "keyservice_profiles",
    "keyservice_record",
    "keyservice_status",
    "master_secret",
    "publisher_key",
    "publisher_signing_key",
    "running_keyservice",
    "stop_keyservice",
    "with_publishers",
]

PUBLISHER_KEY_FILE: Final = "publisher.key.pem"  # in <state>/pki/<name>/, beside the TLS key
PUBLISHER_PUB_FILE: Final = "publisher.pub"  # its public half (hex), read by `cluster up`
KMC_NAME: Final = "keyservice-kmc"  # the hosted KMC's certificate folder in <state>/pki
_KMC_LABEL: Final = b"pubguard/cluster/narada-kmc"
MIN_MASTER: Final = 16  # bytes (KdcConfig's floor); `head -c 32 /dev/urandom | base64` gives 32
_PUBLISHER_LABEL: Final = b"pubguard/cluster/publisher/"


def master_secret(
    settings: KeyServiceSettings, environ: Mapping[str, str] | None = None
) -> SecretBytes:
    """The cluster's master secret from its configured source; ConfigError (one line naming
    the variable or the file) when it is missing or malformed. Never a random one."""
    if settings.master_file is not None:
        return load_secret(settings.master_file, tls_password())
    env = settings.master_env
    assert env is not None  # one of the two is always set (net.config._keyservice)
    value = (os.environ if environ is None else environ).get(env)
    if not value:
        raise ConfigError(
            f"{env} is not set: the key service's master secret (base64 of 32 random bytes, "
            "e.g. head -c 32 /dev/urandom | base64); nothing was started",
            key=env,
        )
    try:
        m = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{env} is not base64; nothing was started", key=env) from None
    if len(m) < MIN_MASTER:
        raise ConfigError(
            f"{env} decodes to {len(m)} bytes, fewer than {MIN_MASTER}; nothing was started",
            key=env,
        )
    return SecretBytes(m)


def publisher_key(master: SecretBytes, name: str) -> SigningKey:
    """Configured publisher ``name``'s publication key, derived from the master (see the
    module docstring): the same after every restart."""
    return SigningKey.from_seed(hkdf(master, info=_PUBLISHER_LABEL + name.encode()))


def keyservice_profiles(config: ClusterConfig) -> tuple[str, ...]:
    """The profiles the cluster's key service serves: ``[keyservice] profiles``, else every
    profile the brokers serve that a key service can."""
    ks = config.keyservice
    if ks is not None and ks.profiles:
        return ks.profiles
    return tuple(p for p in config.served if p in KEYSERVICE_SERVES)


@dataclass(frozen=True, slots=True)
class ClusterSecrets:
    """What :func:`cluster_secrets` derived: the KDC (master and policy) and the bundle of key
    services made from it, with the configured publishers' keys."""

    kdc: KdcConfig = dataclasses.field(repr=False)
    bundle: KeyBundle = dataclasses.field(repr=False)
    #: narada's hosted KMC: its secret and its certificate's path (None: narada not served)
    kmc: tuple[SecretBytes, Path] | None = dataclasses.field(default=None, repr=False)


def cluster_secrets(config: ClusterConfig, pki: ClusterPki, *, now: float) -> ClusterSecrets:
    """The key services of ``config`` (which has a ``[keyservice]``) from its master secret:
    ConfigError before anything is written when the secret or the policy is missing. Issues
    the configured publishers' TLS identities if needed and writes their publication keys
    beside them (protected as the TLS keys are)."""
    settings = config.keyservice
    if settings is None:
        raise ConfigError("the cluster config has no [keyservice]", key="keyservice")
    master = master_secret(settings)
    if settings.policy is not None:
        kdc = KdcConfig.load_policy(settings.policy, master)
    else:  # an open policy: every identity may subscribe and publish; `admin` may revoke
        kdc = KdcConfig(master, (HOSPITAL,), admins=("admin",))
    bundle = KeyBundle(pki.root / "keys", now=now, **kdc.bundle_kwargs())
    for name in config.publishers:
        sk = publisher_key(master, name)
        bundle.add_signing_key(name, sk)
        _write_publisher_key(pki, name, sk)
    kmc = None
    if "narada" in keyservice_profiles(config):
        secret = kmc_secret(master)
        kmc = (secret, kmc_certificate(pki, secret))
    return ClusterSecrets(kdc, bundle, kmc)


def kmc_secret(master: SecretBytes) -> SecretBytes:
    """The hosted KMC's secret, ``HKDF-SHA256(M, info="pubguard/cluster/narada-kmc")``: its
    signing and storage keys derive from it (:mod:`pubguard.net.keyservice.kmc_service`)."""
    return SecretBytes(hkdf(master, info=_KMC_LABEL))


def kmc_certificate(pki: ClusterPki, secret: SecretBytes) -> Path:
    """The path of the hosted KMC's certificate (role ``kmc``, ``<pki>/keyservice-kmc/``):
    kept while it certifies the key derived from ``secret``, else issued by the cluster CA."""
    public = kmc_signing_key(secret).public
    path = pki.root / KMC_NAME / f"{KMC_NAME}.pem"
    if path.exists():
        cert = load_certificate(path)
        if cert.verify_key == public and cert.role is Role.KMC:
            return path
    return pki.certify(KMC_NAME, Role.KMC, public)


def narada_credentials(pki: ClusterPki, name: str) -> dict[str, Any]:
    """What :func:`pubguard.net.client.profiles.connect` takes for a narada client ``name``
    (the certificate's name): its TLS certificate and key as its entity certificate and
    signing key (narada §IV-A, §IV-F)."""
    ident = pki.identity(name.split("/", 1)[0], Role.CLIENT)
    return {
        "signing_key": load_signing_key(ident.key_path, tls_password()),
        "certificate": load_certificate(ident.cert_path),
    }


def narada_broker_keys(keys: BrokerKeys, pki: ClusterPki, kmc_cert: Path) -> BrokerKeys:
    """``keys`` for narada brokers of a cluster whose key service hosts the KMC: the cluster
    CA is narada's CA (a client's TLS certificate is its entity certificate, narada §IV-A) and
    the hosted KMC is the one honoured. Revoked certificates are refused at the brokers' TLS
    handshake (``[tls] crl``, reloaded when renewed), so no CRL is frozen into the file."""
    ca = load_certificate(pki.ca_dir / CA_CERT_FILE)
    return dataclasses.replace(keys, ca_cert=ca, kmc_certs=(load_certificate(kmc_cert),), crl=None)


def _write_publisher_key(pki: ClusterPki, name: str, sk: SigningKey) -> None:
    folder = pki.identity(name, Role.CLIENT).cert_path.parent
    save_signing_key(folder / PUBLISHER_KEY_FILE, sk, tls_password())
    (folder / PUBLISHER_PUB_FILE).write_text(sk.public.to_bytes().hex() + "\n")


def issue_publisher_key(pki: ClusterPki, name: str) -> VerifyKey:
    """A fresh publication key for identity ``name`` (``pubguard identity issue --role
    publisher``), written beside its TLS key; an existing one is kept. Its public key."""
    existing = publisher_signing_key(pki.root, name)
    if existing is not None:
        return existing.public
    sk = SigningKey.generate()
    _write_publisher_key(pki, name, sk)
    return sk.public


def publisher_signing_key(pki_root: Path, name: str) -> SigningKey | None:
    """Identity ``name``'s publication key from its file (None if it has none)."""
    path = Path(pki_root) / name / PUBLISHER_KEY_FILE
    return load_signing_key(path, tls_password()) if path.exists() else None


def issued_publishers(pki_root: Path) -> dict[str, VerifyKey]:
    """Every publication key issued under ``pki_root`` (public halves only)."""
    out = {}
    for pub in sorted(Path(pki_root).glob(f"*/{PUBLISHER_PUB_FILE}")):
        try:
            out[pub.parent.name] = VerifyKey.from_bytes(bytes.fromhex(pub.read_text().strip()))
        except ValueError:
            raise ConfigError(f"{pub}: not a hex Ed25519 public key", path=str(pub)) from None
    return out


def with_publishers(keys: BrokerKeys, extra: Mapping[str, VerifyKey]) -> BrokerKeys:
    """``keys`` knowing ``extra`` publishers too (the bundle's own keys win)."""
    return dataclasses.replace(keys, publishers={**extra, **keys.publishers})


# -- the process, beside the brokers ------------------------------------------------------------


def keyservice_record(pid: int, host: str, port: int, profiles: tuple[str, ...]) -> dict[str, Any]:
    """The key service's entry in ``cluster.json``."""
    return {
        "pid": pid,
        "host": host,
        "port": port,
        "url": f"tls://{host}:{port}",
        "profiles": list(profiles),
    }


def keyservice_pid(state_dir: Path, info: Mapping[str, Any] | None = None) -> int | None:
    """The key service's pid if it runs: from its pid file (checked against its command
    line), else the process ``cluster.json`` recorded if it still runs ``keyservice serve``
    of this state folder."""
    pid = live_pid(Path(state_dir) / KEYSERVICE_NAME)
    if pid is not None or info is None:
        return pid
    recorded = int(info.get("pid", 0))
    if recorded <= 0 or recorded == os.getpid() or not alive(recorded):
        return None
    cmd = command_line(recorded) or ()
    ours = "serve" in cmd and str(Path(state_dir).resolve()) in cmd
    return recorded if ours else None


def running_keyservice(state_dir: Path) -> int | None:
    """The pid of ``state_dir``'s key service if it runs (see :func:`keyservice_pid`)."""
    info = None
    try:
        info = json.loads((Path(state_dir) / "cluster.json").read_text()).get(KEYSERVICE_NAME)
    except (OSError, ValueError, AttributeError):
        pass
    return keyservice_pid(state_dir, info if isinstance(info, dict) else None)


def stop_keyservice(state_dir: Path) -> bool:
    """Stop the key service of ``state_dir`` if it runs (SIGTERM, then SIGKILL); whether one
    was stopped (a folder without one is simply not running it)."""
    pid = running_keyservice(state_dir)
    if pid is None:
        return False
    return not stop_pids([pid])


#: seconds `cluster status` waits for the key service's answer
STATUS_TIMEOUT: Final = 5.0


def keyservice_status(state_dir: Path) -> dict[str, Any] | None:
    """``cluster status``: the key service ``cluster.json`` records (None: the cluster runs
    none): its address and profiles, ``down`` when its process is gone, else the ops it
    answers to an ``info`` asked as ``admin`` over mutual TLS (``error`` if it does not)."""
    try:
        info = json.loads((Path(state_dir) / "cluster.json").read_text()).get(KEYSERVICE_NAME)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(info, dict):
        return None
    out = {k: info.get(k) for k in ("url", "profiles")}
    pid = keyservice_pid(state_dir, info)
    if pid is None:
        return {**out, "down": True}
    out["pid"] = pid
    pki = ClusterPki(Path(state_dir) / "pki")
    try:
        ctx = pki.client_context("admin")
        with KeyServiceClient(
            str(info["host"]), int(info["port"]), ctx, timeout=STATUS_TIMEOUT
        ) as ks:
            answer = ks.call("info")
    except (PubguardError, OSError) as exc:
        return {**out, "error": str(exc)}
    out["ops"] = len(answer.get("ops", ()))
    return out
