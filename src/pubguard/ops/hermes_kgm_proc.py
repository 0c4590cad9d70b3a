"""The Hermes key-group manager as its own process, with its groups durable across restarts
(hermes-encrypted-access-control.txt §4, Fig. 4).

Theory of operation
-------------------
:func:`start_kgm` starts ``pubguard hermes kgm`` as a child process, as
:mod:`pubguard.ops.keyservice_proc` starts the key service. Its folder is
``<state>/hermes-kgm/``:

- ``type.json``: the owner-signed secure type (public; the launcher writes it on first start,
  a restart reuses it, so restarting needs no owner key);
- ``kgm.db``: SQLite, the OFT groups, epochs, members' capabilities, rekey broadcasts and
  revocations, every key sealed (:mod:`pubguard.net.keyservice.hermes_kgm_store`);
- ``launch.json`` (public: host, port, TLS identity, profiles, grace, the name of the owner
  seed's variable): what :func:`restart_kgm` starts it again from;
- ``revocations.json``: the type owner's signed revocation list (public; written by
  :func:`revoke_at_kgm`, applied at every start: :mod:`pubguard.ops.hermes_revocations`);
- ``endpoint.json`` (written by the child once it listens), ``pid``, ``kgm.log``.

The process serves :class:`~pubguard.net.keyservice.hermes_kgm.HermesKgmCore` behind mutual
TLS with the identity ``<owner>-kgm`` (role ``kdc``) of the cluster's CA, refusing revoked
client certificates at the handshake when the CA has a CRL (reloaded when renewed, as the key
service does). The **storage key** sealing ``kgm.db`` is
``HKDF-SHA256(owner seed, info="pubguard/hermes-kgm/storage" || type id)``
(:func:`storage_key`): the manager belongs to the type owner's domain (§4), and the same seed
(``$PUBGUARD_HERMES_OWNER``) opens the same state after a restart. The key reaches the child
through its environment only (:data:`STORAGE_ENV`); the owner's signing seed never does.

A restart (``kill -9``, ``cluster down`` / ``up``) comes back on the port it had, which the
brokers' ``hermes.json`` names; their pollers reconnect at the next poll and continue from the
sequence numbers they hold. ``cluster status`` asks it ``hermes_status`` as ``admin``
(:func:`kgm_status`); ``cluster down`` stops it (:func:`stop_kgm`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, SigningKey, hkdf
from pubguard.crypto.secret import raw
from pubguard.crypto.x509 import Role, server_ssl_context
from pubguard.errors import ConfigError, PubguardError, StateError
from pubguard.net.crl import CrlWatch
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.net.keyservice.hermes_kgm_store import KGM_DB, KgmStore
from pubguard.net.keyservice.server import KeyServiceServer
from pubguard.net.loop import watch_parent
from pubguard.net.server.pidfile import live_pid, remove_pidfile, write_pidfile
from pubguard.net.tls import tls_password
from pubguard.ops.hermes_revocations import load_revocations, revise_revocations
from pubguard.ops.pki import ClusterPki
from pubguard.ops.process import stop_pids, terminate
from pubguard.schemes.hermes import KeyGroupManager, SecureEventType
from pubguard.schemes.hermes.capability import RevocationList

__all__ = [
    "KGM_DIR",
    "STORAGE_ENV",
    "KgmProcess",
    "endpoint",
    "kgm_dir",
    "kgm_status",
    "readmit_at_kgm",
    "restart_kgm",
    "restart_material",
    "revoke_at_kgm",
    "running_kgm",
    "serve_kgm",
    "start_kgm",
    "stop_kgm",
    "storage_key",
]

KGM_DIR: Final = "hermes-kgm"  # in the cluster's state folder
TYPE_FILE: Final = "type.json"
ENDPOINT_FILE: Final = "endpoint.json"
LAUNCH_FILE: Final = "launch.json"
LOG_FILE: Final = "kgm.log"
STORAGE_ENV: Final = "PUBGUARD_HERMES_KGM_STORAGE"
START_TIMEOUT: Final = 30.0
STATUS_TIMEOUT: Final = 5.0  # seconds `cluster status` waits for the manager's answer
_STORAGE_LABEL: Final = b"pubguard/hermes-kgm/storage"
_MODES: Final = {"hermes-event": "event", "hermes-attribute": "attribute"}


def storage_key(owner_seed: bytes | SecretBytes, type_id: bytes) -> SecretBytes:
    """The key sealing the manager's state (see the module docstring)."""
    return SecretBytes(hkdf(owner_seed, info=_STORAGE_LABEL + type_id))


def kgm_dir(state_dir: Path) -> Path:
    return Path(state_dir) / KGM_DIR


@dataclass(frozen=True, slots=True)
class KgmProcess:
    """What :func:`start_kgm` started: the child process and where it listens."""

    proc: subprocess.Popen[bytes] = dataclasses.field(repr=False)
    host: str
    port: int
    name: str  # its TLS identity, ``<owner>-kgm``


async def start_kgm(
    *,
    state_dir: Path,
    pki: ClusterPki,
    name: str,
    stype: SecureEventType | None,
    profiles: tuple[str, ...],
    grace: float,
    storage: SecretBytes,
    owner_env: str,
    host: str = "127.0.0.1",
    port: int = 0,
    detached: bool = False,
) -> KgmProcess:
    """Start the manager of ``state_dir`` (``stype`` None: the one in its ``type.json``, a
    restart) on ``port`` (0: any free one; a restart passes the old one). ``detached``: it
    outlives this process; otherwise it stops when this process exits. ``owner_env``: the
    variable holding the owner's seed, recorded for :func:`restart_kgm`."""
    d = kgm_dir(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    if stype is not None:
        (d / TYPE_FILE).write_text(json.dumps(stype.to_json(), indent=1))
    elif not (d / TYPE_FILE).exists():
        raise StateError(f"no key-group manager was ever started in {state_dir}")
    pki.identity(name, Role.KDC)  # issued here: the child needs no CA passphrase
    info = d / ENDPOINT_FILE
    info.unlink(missing_ok=True)
    env = {**os.environ, STORAGE_ENV: base64.b64encode(raw(storage)).decode()}
    tie = [] if detached else ["--parent-pid", str(os.getpid())]
    argv = [sys.executable, "-m", "pubguard.cli.main", "-v", "hermes", "kgm"]
    argv += ["--dir", str(d), "--pki", str(pki.root), "--name", name, "--host", host]
    argv += ["--port", str(port), "--profiles", ",".join(profiles), "--grace", repr(grace), *tie]
    logf = d / LOG_FILE
    start = logf.stat().st_size if logf.exists() else 0
    with logf.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
        )
    try:
        data = await _wait_endpoint(info, proc, logf, start)
    except BaseException:
        terminate(proc)  # not handed to anyone: ours to end
        raise
    launch = {"host": host, "port": int(data["port"]), "name": name, "profiles": list(profiles)}
    launch |= {"grace": grace, "owner_env": owner_env}
    (d / LAUNCH_FILE).write_text(json.dumps(launch))
    return KgmProcess(proc, host, int(data["port"]), name)


def restart_material(
    state_dir: Path,
) -> tuple[dict[str, Any], bytes, SecureEventType] | None:
    """What :func:`restart_kgm` needs: the launch record, the owner's seed (from the recorded
    variable) and the signed type; None when no manager ever ran here. ConfigError (one line)
    when the seed is missing or not the type owner's: check it before stopping a manager."""
    d = kgm_dir(state_dir)
    try:
        launch = json.loads((d / LAUNCH_FILE).read_text())
    except (OSError, ValueError):
        return None
    env = str(launch["owner_env"])
    try:
        seed = base64.b64decode(os.environ.get(env, ""), validate=True)
    except (binascii.Error, ValueError):
        seed = b""
    stype = _load_type(d)
    owner = stype.owner_key.to_bytes()
    if len(seed) != 32 or SigningKey.from_seed(seed).public.to_bytes() != owner:
        raise ConfigError(
            f"${env} does not hold the type owner's seed: the key-group manager of "
            f"{state_dir} cannot open its state without it",
            key=env,
        )
    return launch, seed, stype


async def restart_kgm(state_dir: Path) -> int | None:
    """``cluster up`` on a running cluster whose manager is down (``kill -9``): start it again,
    detached, on its old port from its sealed state, the storage key derived again from the
    owner's seed in the recorded variable. Its port, or None when it runs or never ran here.
    ConfigError (one line) when the seed is missing or not the type owner's."""
    if running_kgm(state_dir) is not None:
        return None
    found = restart_material(state_dir)
    if found is None:
        return None
    launch, seed, stype = found
    kgm = await start_kgm(
        state_dir=state_dir,
        pki=ClusterPki(Path(state_dir) / "pki"),
        name=str(launch["name"]),
        stype=None,
        profiles=tuple(launch["profiles"]),
        grace=float(launch["grace"]),
        storage=storage_key(seed, stype.type_id),
        owner_env=str(launch["owner_env"]),
        host=str(launch["host"]),
        port=int(launch["port"]),
        detached=True,
    )
    return kgm.port


async def _wait_endpoint(
    info: Path, proc: subprocess.Popen[bytes], logf: Path, start: int
) -> dict[str, Any]:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            data: dict[str, Any] = json.loads(info.read_text())
            return data
        except (OSError, ValueError):
            if proc.poll() is not None:
                with logf.open("rb") as f:
                    f.seek(start)
                    lines = f.read().decode(errors="replace").strip().splitlines()
                why = lines[-1].removeprefix("pubguard: error: ") if lines else "no output"
                raise StateError(
                    f"the key-group manager exited with {proc.returncode}: {why}"
                ) from None
            if time.monotonic() > deadline:
                raise StateError("the key-group manager did not start") from None
            await asyncio.sleep(0.02)


def endpoint(state_dir: Path) -> dict[str, Any] | None:
    """The manager's last ``endpoint.json`` (None: never started here)."""
    try:
        data = json.loads((kgm_dir(state_dir) / ENDPOINT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def running_kgm(state_dir: Path) -> int | None:
    """The manager's pid if it runs (its pid file, checked against its command line)."""
    return live_pid(kgm_dir(state_dir))


def stop_kgm(state_dir: Path) -> bool:
    """Stop the manager of ``state_dir`` if it runs; whether one was stopped."""
    pid = running_kgm(state_dir)
    if pid is None:
        return False
    if stop_pids([pid]):
        raise StateError(f"could not stop the key-group manager of {state_dir} (pid {pid})")
    return True


def kgm_status(state_dir: Path) -> dict[str, Any] | None:
    """``cluster status``: the manager of ``state_dir`` (None: the cluster runs none): its
    address, ``down`` when its process is gone, else its groups, their members and epochs
    (``hermes_status`` asked as ``admin`` over mutual TLS; ``error`` if it does not answer)."""
    ep = endpoint(state_dir)
    if ep is None:
        return None
    out: dict[str, Any] = {
        "name": ep.get("name"),
        "url": f"tls://{ep.get('host')}:{ep.get('port')}",
    }
    pid = running_kgm(state_dir)
    if pid is None:
        return {**out, "down": True}
    out["pid"] = pid
    try:
        ctx = ClusterPki(Path(state_dir) / "pki").client_context("admin")
        with KeyServiceClient(
            str(ep["host"]), int(ep["port"]), ctx, timeout=STATUS_TIMEOUT, server_role="kdc"
        ) as c:
            out.update(c.call("hermes_status"))
    except (PubguardError, OSError) as exc:
        return {**out, "error": str(exc)}
    return out


def _owner_material(state_dir: Path) -> tuple[SigningKey, SecureEventType]:
    """The type owner's key (from the seed in the recorded variable) and the signed type;
    StateError when no manager ever ran here, ConfigError when the seed is not the owner's."""
    try:
        found = restart_material(state_dir)
    except ConfigError as exc:  # say what this needs the seed for
        raise ConfigError(
            f"${exc.key} is unset or not the type owner's seed (the one `cluster up` ran "
            f"with): only the owner signs the revocation list of {state_dir}",
            key=exc.key,
        ) from None
    if found is None:
        raise StateError(f"no key-group manager ever ran in {state_dir} (pubguard cluster up)")
    _, seed, stype = found
    return SigningKey.from_seed(seed), stype


def revoke_at_kgm(
    state_dir: Path, *, broker: str | None = None, serial: int | None = None
) -> dict[str, Any]:
    """The type owner revokes ``serial``, or ``broker`` (every capability it holds and any
    issued to it later): first in the owner's signed revocation list
    (:mod:`pubguard.ops.hermes_revocations`, which ``cluster up`` and the manager honour after
    any re-issue), then at the running manager (``hermes_revoke`` over mutual TLS as the
    owner's identity), which evicts the holders and refreshes their groups at once (§4.2).
    Needs the owner's seed (``$PUBGUARD_HERMES_OWNER``) to sign the list. ``running``: whether
    a manager took it now (else it applies when the manager starts)."""
    if (broker is None) == (serial is None):
        raise ConfigError("give exactly one of a broker and a serial", key="serial")
    serials = [serial] if serial is not None else []
    if broker is not None:
        try:
            caps = json.loads((Path(state_dir) / broker / "hermes.json").read_text())
            serials = sorted({int(c["serial"]) for c in caps.get("capabilities", [])})
        except (OSError, ValueError, KeyError, TypeError):
            raise ConfigError(f"no hermes.json for broker {broker!r} in {state_dir}") from None
    owner_key, stype = _owner_material(state_dir)
    rl = revise_revocations(
        kgm_dir(state_dir),
        owner_key,
        stype.type_id,
        now=time.time(),
        add_holders=[broker] if broker is not None else [],
        add_serials=serials,
    )
    out: dict[str, Any] = {"revoked": serials, "rekeys": 0, "running": False, "list": rl}
    ep = endpoint(state_dir)
    if ep is None or running_kgm(state_dir) is None:
        return out
    pki = ClusterPki(Path(state_dir) / "pki")
    pki.identity(stype.owner, Role.CLIENT)  # the owner's identity: it alone may revoke
    ctx = pki.client_context(stype.owner)
    with KeyServiceClient(str(ep["host"]), int(ep["port"]), ctx, server_role="kdc") as c:
        for profile in ep.get("profiles", []):
            for s in serials:
                out["rekeys"] += int(c.call("hermes_revoke", profile=profile, serial=s)["rekeys"])
            if broker is not None:
                got = c.call("hermes_revoke", profile=profile, holder=broker)
                out["rekeys"] += int(got["rekeys"])
    out["running"] = True
    return out


def readmit_at_kgm(state_dir: Path, broker: str) -> RevocationList:
    """The type owner takes a broker's revocation back: the list without it, signed again.
    It takes effect at the next ``cluster down`` / ``up`` (new capabilities; the manager, on
    its next start, no longer refuses the holder). ConfigError if it was not revoked."""
    owner_key, stype = _owner_material(state_dir)
    old = load_revocations(kgm_dir(state_dir), owner_key.public, stype.type_id)
    if old is None or broker not in old.holders:
        raise ConfigError(f"broker {broker!r} is not revoked in {state_dir}", key="broker")
    return revise_revocations(
        kgm_dir(state_dir), owner_key, stype.type_id, now=time.time(), remove_holders=[broker]
    )


# -- the child ----------------------------------------------------------------------------------


def _storage_from_env() -> SecretBytes:
    raw_b64 = os.environ.get(STORAGE_ENV)
    try:
        key = base64.b64decode(raw_b64 or "", validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ConfigError(f"{STORAGE_ENV} must be a base64 32-byte key", key=STORAGE_ENV)
    return SecretBytes(key)


def _load_type(d: Path) -> SecureEventType:
    try:
        return SecureEventType.from_json(json.loads((d / TYPE_FILE).read_text()))
    except (OSError, ValueError, PubguardError):
        raise ConfigError(
            "no valid owner-signed type in the manager's folder", path=str(d / TYPE_FILE)
        ) from None


async def serve_kgm(
    d: Path,
    *,
    pki_root: Path,
    name: str,
    host: str,
    port: int,
    profiles: tuple[str, ...],
    grace: float,
    parent_pid: int | None = None,
) -> None:
    """The child's main (``pubguard hermes kgm``): open the sealed state in ``d``, serve it
    behind mutual TLS until SIGTERM / SIGINT (or the parent is gone), write the endpoint and
    pid files once listening."""
    bad = [p for p in profiles if p not in _MODES]
    if not profiles or bad:
        raise ConfigError(f"--profiles: not hermes profiles: {bad or 'none'}", key="profiles")
    storage = _storage_from_env()
    stype = _load_type(d)
    store = KgmStore(d / KGM_DB, storage, stype)
    fresh = {p: KeyGroupManager(stype, _MODES[p], grace=grace) for p in profiles}
    core = HermesKgmCore.restore(store, fresh)
    # the owner's signed revocation list: a revoked holder stays out whatever it presents
    revocations = load_revocations(d, stype.owner_key, stype.type_id)
    if revocations is not None:
        core.apply_revocations(revocations, now=time.time())
    pki = ClusterPki(pki_root)
    ident = pki.identity(name, Role.KDC)
    crl = pki.crl_path

    def contexts() -> tuple[Any, None]:
        ctx = server_ssl_context(
            ident.cert_path, ident.key_path, ident.ca_path, crl_path=crl, password=tls_password()
        )
        return ctx, None

    watch = None if crl is None else CrlWatch(name, crl, ident.ca_path, contexts)
    ctx = contexts()[0] if watch is None or watch.server_context is None else watch.server_context
    server = KeyServiceServer(core, ctx, host=host, port=port, crl=watch)
    bound = await server.start()
    members = {p: len(m.members()) for p, m in core.managers.items()}
    write_pidfile(d)
    ep = {"host": host, "port": bound, "name": name, "profiles": list(profiles)}
    ep["type_id"] = stype.type_id.hex()
    tmp = d / f".{ENDPOINT_FILE}.tmp"
    tmp.write_text(json.dumps(ep))
    os.replace(tmp, d / ENDPOINT_FILE)
    print(f"hermes key-group manager {name} on {host}:{bound}; members {members}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watcher = None if parent_pid is None else asyncio.create_task(watch_parent(parent_pid, stop))
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await server.stop()
        store.close()
        with contextlib.suppress(OSError):
            remove_pidfile(d)
            (d / ENDPOINT_FILE).unlink()  # stopped, not crashed: status no longer lists it
