"""A local network of brokers on loopback, from a declared topology.

::

    async with run_local_cluster(None, state_dir) as cluster:      # 7-broker binary tree
        sub = await cluster.connect("b3", "alice")
        ...

:class:`LocalCluster` writes one ``broker.toml`` per broker into ``<state>/<name>/``, creates
the CA and the TLS identities on first use (``pki.py``), and runs each broker either as a real
process (``python -m pubguard.net.server.main``, its own process group, log in
``<state>/<name>/broker.log``, ``pid`` and ``port`` files beside it) or, for demos, as an
in-process :class:`~.server.BrokerServer` on the caller's event loop. ``cluster.json`` records
the processes so ``pubguard cluster down`` / ``status`` from another shell find them.
Children find their parent through its ``port`` file; a port chosen on first start is kept
across restarts, so ``kill -9`` + :meth:`LocalCluster.restart` brings a broker back in place.

Security profiles: when some broker serves a profile other than plain, the cluster holds the
deployment's key services (a :class:`~pubguard.schemes.registry.KeyBundle`, in memory: the
KDC / authority, EventGuard's MS, Narada's CA and KMC) and writes the public material brokers
need (:class:`~pubguard.schemes.registry.BrokerKeys`) to ``<state>/pki/broker-keys.json``
beside the TLS CA; every broker's ``keys`` points there. :meth:`LocalCluster.connect` with
``profile=`` gives the client its keys from the bundle, or, with ``keyservice=True``, from the
key-service process over mutual TLS (:mod:`pubguard.ops.keyservice_proc`: the EventGuard MS
always; the PSGuard KDC / default authority when the cluster knows its
:class:`~pubguard.net.keyservice.kdc.KdcConfig`, i.e. it made the bundle or got ``kdc=``). The
cluster keeps the :class:`~pubguard.ops.keyservice_proc.KeyServiceProcess` it started
(:attr:`LocalCluster.keyservice`) and stops it with the brokers.
Such a cluster also wires revocation: every broker polls the authority's signed revocation
list from the key service (``[revocation] keyservice_file = "<state>/ms-key.json"``, every
``revocation_poll`` seconds; :mod:`pubguard.net.server.revocation`), so ``pubguard keyservice revoke``
(an administrator of the policy; ``admin`` when the cluster made the KDC) takes effect at
every broker within a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, random_bytes
from pubguard.crypto.x509 import Role
from pubguard.errors import StateError, TransportError
from pubguard.net.client.client import Client, connect
from pubguard.net.config import (
    ClusterConfig,
    load_broker_config,
    load_cluster_config,
)
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.net.server.server import BrokerServer, read_port
from pubguard.ops.keyservice_proc import (
    ENDPOINT_FILE,
    KEYSERVICE,
    KeyServiceProcess,
    keyservice_scheme,
)
from pubguard.ops.keyservice_proc import start_keyservice as _start_keyservice
from pubguard.ops.pki import DEFAULT_CLIENTS, ClusterPki
from pubguard.ops.process import STOP_TIMEOUT, terminate
from pubguard.schemes.registry import HOSPITAL, KeyBundle

__all__ = ["LocalCluster", "cluster_status", "run_local_cluster", "stop_cluster"]

START_TIMEOUT: Final = 30.0
CLUSTER_FILE: Final = "cluster.json"
KEYS_FILE: Final = "broker-keys.json"  # in <state>/pki, beside the CA
#: the revocation list's max_age, in polls (a broker whose list is older reports it stale)
MAX_AGE_POLLS: Final = 30
RECORD_FILE: Final = "seen.msgpack"  # a recording broker's log, in <state>/<name>


def _toml_str(p: Path | str) -> str:
    return json.dumps(str(p))  # a JSON string is a valid TOML basic string


class LocalCluster:
    """Start, inspect, kill and restart the brokers of one :class:`ClusterConfig`."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        in_process: bool = False,
        bundle: KeyBundle | None = None,
        detached: bool = False,
        keyservice: bool = False,
        kdc: KdcConfig | None = None,
        revocation_poll: float = 2.0,
    ) -> None:
        """``detached`` brokers outlive this process (``pubguard cluster up``); otherwise each
        broker stops by itself when this process exits, even on SIGKILL. ``keyservice``: also
        run the bundle's key services as their own process (:meth:`start_keyservice`).
        ``kdc``: the PSGuard KDC / default authority (master and policy) the bundle was made
        from; without ``bundle`` the cluster makes one from it (or from a random master and
        an open policy, ``admin`` its administrator), and only then can the key service serve
        the KDC and brokers poll its revocation list (every ``revocation_poll`` seconds)."""
        self.config = config
        self.detached = detached
        self.state_dir = config.state_dir.resolve()
        self.in_process = in_process
        self._bundle = bundle
        self.pki = ClusterPki(self.state_dir / "pki")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.servers: dict[str, BrokerServer] = {}
        self.ports: dict[str, int] = {}
        self._admin: dict[str, Client] = {}
        self._run_keyservice = keyservice
        self.kdc = kdc
        self.revocation_poll = revocation_poll
        #: the key-service process, once :meth:`start_keyservice` started it
        self.keyservice: KeyServiceProcess | None = None

    # -- configuration ---------------------------------------------------------------------

    def broker_dir(self, name: str) -> Path:
        return self.state_dir / name

    def config_path(self, name: str) -> Path:
        return self.broker_dir(name) / "broker.toml"

    @property
    def keys_path(self) -> Path:
        return self.state_dir / "pki" / KEYS_FILE

    def record_path(self, name: str) -> Path:
        return self.broker_dir(name) / RECORD_FILE

    @property
    def keyservice_port(self) -> int | None:
        """The key service's port, once it started."""
        return self.keyservice.port if self.keyservice is not None else None

    @property
    def keyservice_kdc(self) -> bool:
        """Whether clients get psguard / default keys from the key-service process."""
        return self.keyservice is not None and self.keyservice.kdc

    @property
    def secure(self) -> bool:
        """Whether some broker serves a profile other than plain."""
        return any(p != "plain" for p in self.config.served)

    @property
    def bundle(self) -> KeyBundle:
        """The deployment's key services (created on first use; trusted, in memory)."""
        if self._bundle is None:
            if self.kdc is None:
                self.kdc = KdcConfig(SecretBytes(random_bytes(32)), (HOSPITAL,), admins=("admin",))
            self._bundle = KeyBundle(
                self.state_dir / "pki" / "keys",
                now=time.time(),
                identities=self.config.publishers,
                **self.kdc.bundle_kwargs(),
            )
        return self._bundle

    def write_keys(self) -> Path:
        """Write the public material brokers need (public keys, certificates, CRL)."""
        self.bundle.broker_keys(narada="narada" in self.config.served).save(self.keys_path)
        return self.keys_path

    @property
    def revocation_wired(self) -> bool:
        """Whether brokers poll the key service's revocation list (see the module docstring)."""
        return self._run_keyservice and self.secure and self.kdc is not None

    def write_configs(self) -> None:
        """Issue certificates (first use) and write every broker's TOML file."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for name in DEFAULT_CLIENTS:
            self.pki.identity(name, Role.CLIENT)
        if self.secure:
            self.write_keys()
        for name in self.config.brokers:
            ident = self.pki.identity(name, Role.BROKER)
            lines = [
                f"name = {_toml_str(name)}",
                f"host = {_toml_str(self.config.host)}",
                "port = 0",
                f"state_dir = {_toml_str(self.broker_dir(name))}",
            ]
            settings = self.config.settings(name)
            if settings.pop("record", False):
                lines.append(f"record = {_toml_str(self.record_path(name))}")
            for k, v in settings.items():
                lines.append(f"{k} = {json.dumps(v)}")
            if self.secure:
                lines.append(f"keys = {_toml_str(self.keys_path)}")
            children = self.config.children_of(name)
            lines.append(f"children = {json.dumps(list(children))}")
            lines += [
                "[tls]",
                f"ca = {_toml_str(ident.ca_path)}",
                f"cert = {_toml_str(ident.cert_path)}",
                f"key = {_toml_str(ident.key_path)}",
            ]
            parent = self.config.parent_of(name)
            if parent is not None:
                lines += [
                    "[parent]",
                    f"name = {_toml_str(parent)}",
                    f"host = {_toml_str(self.config.host)}",
                    f"port_file = {_toml_str(self.broker_dir(parent) / 'port')}",
                ]
            if self.revocation_wired:
                lines += [
                    "[revocation]",
                    f"keyservice_file = {_toml_str(self.state_dir / ENDPOINT_FILE)}",
                    f"poll = {self.revocation_poll!r}",
                    f"max_age = {MAX_AGE_POLLS * self.revocation_poll!r}",
                ]
            self.broker_dir(name).mkdir(parents=True, exist_ok=True)
            self.config_path(name).write_text("\n".join(lines) + "\n")

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self.write_configs()
        for name in self.config.brokers:
            await self._launch(name)
        for name in self.config.brokers:
            self.ports[name] = await self._wait_port(name)
        self._write_cluster_file()
        await self.wait_connected()
        if self._run_keyservice:
            await self.start_keyservice()

    async def start_keyservice(self) -> int:
        """Run the bundle's key services as their own process behind mutual TLS (``pubguard
        keyservice serve``): the EventGuard MS, and the PSGuard KDC / default authority when
        :attr:`kdc` is known; the bundle's clients then get their permits and keys from it,
        each over a connection authenticated as that client. Secrets reach the child through
        its environment only. Returns the port; :meth:`stop` ends the process."""
        if KEYSERVICE in self.procs and self.procs[KEYSERVICE].poll() is None:
            raise StateError("the key service is already running")
        bundle = self.bundle  # first: it makes :attr:`kdc` when the cluster has none
        ks = await _start_keyservice(
            host=self.config.host,
            state_dir=self.state_dir,
            pki=self.pki,
            bundle=bundle,
            kdc=self.kdc,
            detached=self.detached,
        )
        self.keyservice = ks
        self.procs[KEYSERVICE] = ks.proc
        bundle.ms_for = ks.client  # eventguard clients get their MS over the network
        return ks.port

    async def _launch(self, name: str) -> None:
        port_file = self.broker_dir(name) / "port"
        with contextlib.suppress(FileNotFoundError):
            port_file.unlink()
        if self.in_process:
            server = BrokerServer(load_broker_config(self.config_path(name)))
            self.servers[name] = server
            self.ports[name] = await server.start()
            return
        log = (self.broker_dir(name) / "broker.log").open("ab")
        tie = [] if self.detached else ["--parent-pid", str(os.getpid())]
        self.procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pubguard.net.server.main",
                "--config",
                str(self.config_path(name)),
                *tie,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()

    async def _wait_port(self, name: str) -> int:
        if name in self.servers:
            return self.servers[name].port
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            port = read_port(self.broker_dir(name))
            if port is not None:
                return port
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                tail = (self.broker_dir(name) / "broker.log").read_text()[-600:]
                raise StateError(f"broker {name} exited with {proc.returncode}: {tail}")
            await asyncio.sleep(0.02)
        raise StateError(f"broker {name} did not start within {START_TIMEOUT}s")

    def _write_cluster_file(self) -> None:
        data = {
            name: {
                "pid": self.procs[name].pid if name in self.procs else os.getpid(),
                "port": self.ports.get(name),
                "config": str(self.config_path(name)),
            }
            for name in self.config.brokers
        }
        (self.state_dir / CLUSTER_FILE).write_text(json.dumps(data, indent=2))

    async def stop(self) -> None:
        """Stop every broker (SIGTERM, then SIGKILL after a grace period)."""
        for c in self._admin.values():
            with contextlib.suppress(Exception):
                await c.close()
        self._admin.clear()
        for server in self.servers.values():
            await server.close()
        self.servers.clear()
        for name in list(self.procs):
            terminate(self.procs.pop(name))
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / CLUSTER_FILE).unlink()

    def kill(self, name: str) -> None:
        """``kill -9`` one broker process (its whole process group)."""
        proc = self.procs.get(name)
        if proc is None:
            raise StateError(f"broker {name} is not a running process")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        old = self._admin.pop(name, None)
        if old is not None:
            old.reconnect = False

    async def restart(self, name: str) -> None:
        """Start a killed broker again from its state directory (same port)."""
        if name in self.procs and self.procs[name].poll() is None:
            raise StateError(f"broker {name} is still running")
        await self._launch(name)
        port = await self._wait_port(name)
        if port != self.ports.get(name):
            raise StateError(f"broker {name} came back on port {port}, not {self.ports[name]}")
        self._write_cluster_file()

    # -- clients and inspection ------------------------------------------------------------

    def url(self, name: str) -> str:
        return f"tls://{self.config.host}:{self.ports[name]}"

    async def connect(
        self,
        broker: str,
        identity: str,
        *,
        profile: str | None = None,
        topics: tuple[str, ...] = (),
        **kw: Any,
    ) -> Client:
        """A client of ``broker`` with identity ``identity`` (certificate issued on demand).
        ``profile``: speak that security profile, with keys from :attr:`bundle` (``topics``:
        the narada topics it needs a KMC token and key for)."""
        if profile is not None and profile != "plain" and "scheme" not in kw:
            kw["scheme"] = keyservice_scheme(
                self.bundle,
                profile,
                identity,
                keyservice=self.keyservice,
                topics=topics,
                now=time.time(),
            )
            # an old generation lasts as long as the brokers' timestamp window
            kw.setdefault("renew_grace", self.bundle.max_delay)
        return await connect(
            self.url(broker), identity=identity, ssl=self.pki.client_context(identity), **kw
        )

    async def status(self, name: str) -> dict[str, Any]:
        c = self._admin.get(name)
        if c is None or c._closing:
            c = await connect(
                self.url(name), identity=f"admin/{name}", ssl=self.pki.client_context("admin")
            )
            self._admin[name] = c
        return await c.status()

    async def statuses(self) -> dict[str, dict[str, Any]]:
        names = self.config.brokers
        results = await asyncio.gather(*(self.status(n) for n in names))
        return dict(zip(names, results, strict=True))

    async def _statuses_by(self, deadline: float) -> dict[str, dict[str, Any]]:
        """:meth:`statuses`, asked again while one does not come (a broker just restarted,
        its admin link still backing off) until ``deadline`` (``time.monotonic``)."""
        while True:
            try:
                return await self.statuses()
            except (TimeoutError, TransportError) as exc:
                if time.monotonic() > deadline:
                    raise TransportError(f"broker status not answered: {exc!r}") from None
                await asyncio.sleep(0.05)

    async def wait_connected(self, timeout: float = START_TIMEOUT) -> None:
        """Until every broker's parent link is up (a status that does not come is asked
        again until ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            st = await self._statuses_by(deadline)
            down = [
                n
                for n, s in st.items()
                if s["parent"] and not s["link_state"][s["parent"]]["connected"]
            ]
            if not down:
                return
            if time.monotonic() > deadline:
                raise TransportError(f"brokers not linked to their parents: {down}")
            await asyncio.sleep(0.05)

    async def wait_quiescent(self, timeout: float = 30.0, settle: int = 2) -> None:
        """Until no broker has queued or unprocessed messages, ``settle`` polls in a row (a
        status that does not come is asked again until ``timeout``)."""
        deadline = time.monotonic() + timeout
        calm = 0
        while calm < settle:
            st = await self._statuses_by(deadline)
            busy = {n: s["queue"] for n, s in st.items() if s["queue"]}
            calm = 0 if busy else calm + 1
            if time.monotonic() > deadline:
                raise TransportError(f"network not quiescent after {timeout}s: {busy}")
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def run_local_cluster(
    topology: ClusterConfig | Path | str | None,
    state_dir: Path | str,
    *,
    in_process: bool = False,
    bundle: KeyBundle | None = None,
    keyservice: bool = False,
    kdc: KdcConfig | None = None,
    revocation_poll: float = 2.0,
) -> AsyncIterator[LocalCluster]:
    """Start a cluster (``topology``: config, TOML path, or None for the 7-broker default),
    yield it, and tear every broker down on exit, whatever happens. ``keyservice``: also run
    the key services as their own process (:meth:`LocalCluster.start_keyservice`); ``kdc``:
    the KDC the bundle was made from (see :class:`LocalCluster`)."""
    if isinstance(topology, ClusterConfig):
        cfg = dataclasses.replace(topology, state_dir=Path(state_dir))
    else:
        cfg = load_cluster_config(topology, state_dir=Path(state_dir))
    cluster = LocalCluster(
        cfg,
        in_process=in_process,
        bundle=bundle,
        keyservice=keyservice,
        kdc=kdc,
        revocation_poll=revocation_poll,
    )
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.stop()


def stop_cluster(state_dir: Path) -> list[str]:
    """``pubguard cluster down``: stop the processes recorded in ``cluster.json``."""
    f = Path(state_dir) / CLUSTER_FILE
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        return []
    stopped = []
    for name, info in data.items():
        pid = int(info["pid"])
        if pid == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
            stopped.append(name)
    deadline = time.monotonic() + STOP_TIMEOUT
    for info in data.values():
        pid = int(info["pid"])
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    f.unlink(missing_ok=True)
    return stopped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as dead
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    return True


async def cluster_status(state_dir: Path) -> dict[str, Any]:
    """``pubguard cluster status``: each recorded broker's status, or why it is unreachable."""
    f = Path(state_dir) / CLUSTER_FILE
    try:
        data = json.loads(f.read_text())
    except (OSError, ValueError):
        raise StateError(f"no cluster is running from {state_dir}") from None
    pki = ClusterPki(Path(state_dir) / "pki")
    out: dict[str, Any] = {}
    for name, info in data.items():
        try:
            c = await connect(
                f"tls://127.0.0.1:{info['port']}",
                identity="admin",
                ssl=pki.client_context("admin"),
                reconnect=False,
            )
            try:
                out[name] = await c.status()
            finally:
                await c.close()
        except TransportError as exc:
            out[name] = {"broker": name, "error": str(exc)}
    return out
