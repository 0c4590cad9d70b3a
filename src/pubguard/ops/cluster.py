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

A config with ``[keyservice]`` (``pubguard cluster up``) runs the key service from the
configured master secret instead of a random one (:mod:`pubguard.ops.cluster_keys`): the
secret is read first, and a missing one stops :meth:`LocalCluster.start` before anything is
written or started; ``cluster.json`` records the process under ``"keyservice"``.

A config with ``[hermes]`` runs the type owner's key-group manager as its own process too
(:mod:`pubguard.ops.hermes_cluster`, :mod:`pubguard.ops.hermes_kgm_proc`): it is found by its
pid file in ``<state>/hermes-kgm/``, stopped by :func:`stop_cluster` and named ``hermes-kgm``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from pubguard.crypto import SecretBytes, random_bytes
from pubguard.crypto.x509 import Role
from pubguard.errors import StateError, TransportError
from pubguard.net.client.client import Client, connect
from pubguard.net.client.profiles import connect as connect_profile
from pubguard.net.config import (
    ClusterConfig,
    load_broker_config,
    load_cluster_config,
)
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.net.malicious_config import malicious_toml
from pubguard.net.server.pidfile import command_line, live_pid
from pubguard.net.server.server import BrokerServer, read_port
from pubguard.ops.cluster_keys import (
    cluster_secrets,
    issued_publishers,
    keyservice_profiles,
    keyservice_record,
    narada_broker_keys,
    narada_credentials,
    running_keyservice,
    with_publishers,
)
from pubguard.ops.crl_agent import AGENT_DIR as CRL_AGENT
from pubguard.ops.crl_agent import start_crl_agent, stop_crl_agent
from pubguard.ops.hermes_cluster import HermesDeployment
from pubguard.ops.hermes_kgm_proc import KGM_DIR, running_kgm
from pubguard.ops.keyservice_proc import (
    ENDPOINT_FILE,
    KEYSERVICE,
    KeyServiceProcess,
    client_options,
    keyservice_scheme,
    serves,
)
from pubguard.ops.keyservice_proc import start_keyservice as _start_keyservice
from pubguard.ops.pki import DEFAULT_CLIENTS, PASSPHRASE_ENV, ClusterPki
from pubguard.ops.process import alive, spawn_broker, stop_pids, terminate
from pubguard.schemes.hermes import HermesSettings
from pubguard.schemes.registry import HOSPITAL, KeyBundle

__all__ = [
    "LocalCluster",
    "cluster_status",
    "restart_brokers",
    "restart_keyservice",
    "run_local_cluster",
    "running_brokers",
    "stop_cluster",
]

START_TIMEOUT: Final = 30.0
STATUS_TIMEOUT: Final = 10.0  # seconds `cluster status` waits for one broker's answer
# seconds LocalCluster.status asks a live broker again before it gives up (each ask waits
# STATUS_ASK, the client's own default): one slow answer on a loaded machine is not a failure
STATUS_PATIENCE: Final = 60.0
STATUS_ASK: Final = 5.0
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
        crl_agent: bool = False,
        pki: ClusterPki | None = None,
        revocation_dir: Path | None = None,
    ) -> None:
        """``detached`` brokers outlive this process (``pubguard cluster up``); otherwise each
        broker stops by itself when this process exits, even on SIGKILL. ``keyservice``: also
        run the bundle's key services as their own process (:meth:`start_keyservice`).
        ``kdc``: the PSGuard KDC / default authority (master and policy) the bundle was made
        from; without ``bundle`` the cluster makes one from it (or from a random master and
        an open policy, ``admin`` its administrator), and only then can the key service serve
        the KDC and brokers poll its revocation list (every ``revocation_poll`` seconds).
        ``crl_agent``: when ``PUBGUARD_CA_PASSPHRASE`` is set, also run the CRL agent that
        keeps the CA's CRL renewed (:mod:`pubguard.ops.crl_agent`; brokers load that CRL).
        ``pki``: another cluster's CA and identities (the relabelled trees of one multi-path
        cluster share them: :mod:`pubguard.ops.multipath`). ``revocation_dir``: the state
        folder of the cluster whose key service's revocation list these brokers poll (a
        multi-path cluster's trees ``T_1 ..`` poll ``T_0``'s)."""
        self.config = config
        self._run_crl_agent = crl_agent
        self.detached = detached
        self.state_dir = config.state_dir.resolve()
        self.in_process = in_process
        self._bundle = bundle
        self.pki = pki or ClusterPki(self.state_dir / "pki")  # shared by a node's trees
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.servers: dict[str, BrokerServer] = {}
        self.ports: dict[str, int] = {}
        self._log_start: dict[str, int] = {}  # where this run's lines begin in broker.log
        self._admin: dict[str, Client] = {}
        # one admin link per broker: two asks at once (a retry beside a status still in
        # flight) must not open two connections under one identity, which replace each other
        self._admin_locks: dict[str, asyncio.Lock] = {}
        self._run_keyservice = keyservice or config.keyservice is not None
        self._revocation_dir = revocation_dir
        self.kdc = kdc
        self.revocation_poll = revocation_poll
        #: the key-service process, once :meth:`start_keyservice` started it
        self.keyservice: KeyServiceProcess | None = None
        #: narada's KMC hosted in the key service: (its secret, its certificate's path)
        self._kmc: tuple[SecretBytes, Path] | None = None
        #: the ``[hermes]`` table's owner and key-group manager, once :meth:`start` ran it
        self.hermes: HermesDeployment | None = None

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
        """Write the public material brokers need (public keys, certificates, CRL); with a
        ``[keyservice]``, every publication key issued under the PKI too."""
        hosted = self._kmc is not None  # narada's KMC in the key service, the cluster CA
        keys = self.bundle.broker_keys(narada="narada" in self.config.served and not hosted)
        if self.config.keyservice is not None:
            keys = with_publishers(keys, issued_publishers(self.pki.root))
        if self._kmc is not None:
            keys = narada_broker_keys(keys, self.pki, self._kmc[1])
        keys.save(self.keys_path)
        return self.keys_path

    @property
    def revocation_wired(self) -> bool:
        """Whether brokers poll the key service's revocation list (see the module docstring)."""
        if self._revocation_dir is not None:
            return True
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
            malicious = settings.pop("malicious", None)  # a table: written last
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
            if self.pki.crl_path is not None:  # the CA's live CRL, reloaded when renewed
                lines.append(f"crl = {_toml_str(self.pki.crl_path)}")
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
                    "keyservice_file = "
                    + _toml_str((self._revocation_dir or self.state_dir) / ENDPOINT_FILE),
                    f"poll = {self.revocation_poll!r}",
                    f"max_age = {MAX_AGE_POLLS * self.revocation_poll!r}",
                ]
            if malicious:  # research/test use (docs/resilience.md)
                lines += malicious_toml(malicious)
            self.broker_dir(name).mkdir(parents=True, exist_ok=True)
            self.config_path(name).write_text("\n".join(lines) + "\n")

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.keyservice is not None and self._bundle is None:
            # first, before anything is written: no configured secret, nothing started
            made = cluster_secrets(self.config, self.pki, now=time.time())
            self.kdc, self._bundle, self._kmc = made.kdc, made.bundle, made.kmc
        self.write_configs()
        if self.config.hermes is not None and self.hermes is None:
            await self._start_hermes(self.config.hermes)
        if self._run_crl_agent and os.environ.get(PASSPHRASE_ENV):
            # first: it renews a CRL that is due before any broker loads it
            self.procs[CRL_AGENT] = start_crl_agent(self.state_dir)
        for name in self.config.brokers:
            await self._launch(name)
        # the key service starts while the brokers do (brokers poll its endpoint file)
        ks = asyncio.create_task(self.start_keyservice()) if self._run_keyservice else None
        try:
            for name in self.config.brokers:
                self.ports[name] = await self._wait_port(name)
            self._write_cluster_file()
            await self.wait_connected()
        except BaseException:
            if ks is not None:
                ks.cancel()
                with contextlib.suppress(BaseException):
                    await ks
            raise
        if ks is not None:
            await ks

    async def _start_hermes(self, settings: HermesSettings) -> None:
        """The type owner's key-group manager as its own process (``pubguard.ops.hermes_cluster``;
        a detached cluster's outlives this one, and needs the owner's seed)."""
        self.hermes = HermesDeployment(
            settings,
            brokers=self.config.brokers,
            profiles=self.config.served,
            pki=self.pki,
            broker_dir=self.broker_dir,
            state_dir=self.state_dir,
            host=self.config.host,
            detached=self.detached,
        )
        await self.hermes.start()

    async def start_keyservice(self) -> int:
        """Run the bundle's key services as their own process behind mutual TLS (``pubguard
        keyservice serve``): the EventGuard MS, and the PSGuard KDC / default authority when
        :attr:`kdc` is known; the bundle's clients then get their permits and keys from it,
        each over a connection authenticated as that client. Secrets reach the child through
        its environment only. Returns the port; :meth:`stop` ends the process."""
        if KEYSERVICE in self.procs and self.procs[KEYSERVICE].poll() is None:
            raise StateError("the key service is already running")
        bundle = self.bundle  # first: it makes :attr:`kdc` when the cluster has none
        settings = self.config.keyservice
        ks = await _start_keyservice(
            host=self.config.host,
            state_dir=self.state_dir,
            pki=self.pki,
            bundle=bundle,
            kdc=self.kdc,
            detached=self.detached,
            port=settings.port if settings is not None else 0,
            pid_dir=self.state_dir / KEYSERVICE,
            kmc=self._kmc,
        )
        self.keyservice = ks
        self.procs[KEYSERVICE] = ks.proc
        bundle.ms_for = ks.client  # eventguard clients get their MS over the network
        self._write_cluster_file()
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
        log = self.broker_dir(name) / "broker.log"
        self._log_start[name] = log.stat().st_size if log.exists() else 0
        tie = None if self.detached else os.getpid()
        self.procs[name] = spawn_broker(self.config_path(name), log, parent_pid=tie)

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
                why = _last_words(self.broker_dir(name) / "broker.log", self._log_start.get(name))
                raise StateError(f"broker {name} exited with {proc.returncode}: {why}")
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
        ks = self.keyservice
        if ks is not None:
            served = tuple(p for p in keyservice_profiles(self.config) if serves(ks, p))
            data[KEYSERVICE] = keyservice_record(ks.proc.pid, ks.host, ks.port, served)
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
        if self.hermes is not None:
            await self.hermes.stop()
            self.hermes = None
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / CLUSTER_FILE).unlink()

    def kill(self, name: str) -> None:
        """``kill -9`` one broker process (its whole process group)."""
        proc = self.procs.get(name)
        if proc is None:
            raise StateError(f"broker {name} is not a running process")
        old = self._admin.pop(name, None)
        if old is not None:  # before the kill: its link must not come back to the restarted
            old.reconnect = False  # broker, where it would replace the next admin link
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

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
        ``profile``: speak that security profile; when the cluster's key service serves it,
        through :func:`pubguard.net.client.profiles.connect` (keys over mutual TLS, as any
        ``pubguard.connect`` client), else with keys from :attr:`bundle` in process
        (``topics``: the narada topics it needs a KMC token and key for)."""
        ks = self.keyservice
        if ks is not None and serves(ks, profile) and "scheme" not in kw:
            assert profile is not None  # (serves() says no to None)
            ctx = self.pki.client_context(identity)
            opts = {**client_options(self.bundle, ks, identity), **kw}
            if profile == "narada":  # its TLS identity is its narada entity (narada §IV-A)
                opts.update(narada_credentials(self.pki, identity))
            return await connect_profile(
                self.url(broker),
                identity=identity,
                profile=profile,
                keyservice=ks.url,
                ssl=ctx,
                **opts,
            )
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

    async def status(
        self, name: str, *, timeout: float = STATUS_PATIENCE, ask: float = STATUS_ASK
    ) -> dict[str, Any]:
        """Broker ``name``'s status report. An answer that does not come within ``ask`` (a
        loaded machine; a broker just restarted, its admin link still backing off) is asked
        again until ``timeout``; a broker process that has exited is a StateError at once."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await self._status_once(name, ask)
            except (TimeoutError, TransportError) as exc:
                proc = self.procs.get(name)
                if proc is not None and proc.poll() is not None:
                    raise StateError(f"broker {name} is down (exit {proc.returncode})") from None
                if time.monotonic() > deadline:
                    raise TransportError(
                        f"broker {name} status not answered within {timeout:g}s: {exc!r}"
                    ) from None
                await asyncio.sleep(0.05)

    async def _status_once(self, name: str, ask: float = STATUS_ASK) -> dict[str, Any]:
        async with self._admin_locks.setdefault(name, asyncio.Lock()):
            c = self._admin.get(name)
            if c is None or c._closing:
                c = await connect(
                    self.url(name), identity=f"admin/{name}", ssl=self.pki.client_context("admin")
                )
                self._admin[name] = c
        return await c.status(timeout=ask)

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
                    raise TransportError(f"broker status not answered: {exc}") from None
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


def _read_cluster_file(state_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((Path(state_dir) / CLUSTER_FILE).read_text())
    except (OSError, ValueError):
        raise StateError(f"no cluster is running from {state_dir} (pubguard cluster up)") from None
    return data  # type: ignore[no-any-return]


def _broker_pid(state_dir: Path, name: str, info: dict[str, Any] | None = None) -> int | None:
    """The pid of broker ``name`` of ``state_dir`` if it runs, however it was started: from
    the pid file it wrote (checked against its command line), else the process ``cluster up``
    recorded if it still runs that broker's ``broker.toml`` (it may not have written the file
    yet)."""
    pid = live_pid(Path(state_dir) / name)
    if pid is not None or info is None:
        return pid
    recorded, config = int(info.get("pid", 0)), str(info.get("config", ""))
    if recorded <= 0 or recorded == os.getpid() or not alive(recorded):
        return None
    cmdline = command_line(recorded) or ()
    return recorded if config and config in cmdline else None


def _broker_names(state_dir: Path, data: dict[str, Any]) -> list[str]:
    """The brokers of a state folder: those ``cluster.json`` lists, then every other folder
    holding a ``broker.toml`` (brokers started by hand after the file was gone)."""
    names = [n for n in data if n != KEYSERVICE]
    if Path(state_dir).is_dir():
        names += sorted(
            p.name
            for p in Path(state_dir).iterdir()
            if p.name not in data and (p / "broker.toml").is_file()
        )
    return names


def running_brokers(state_dir: Path) -> dict[str, int]:
    """Each broker of ``state_dir`` that runs, with its pid."""
    data: dict[str, Any] = {}
    with contextlib.suppress(StateError):
        data = _read_cluster_file(state_dir)
    out = {}
    for name in _broker_names(state_dir, data):
        pid = _broker_pid(state_dir, name, data.get(name))
        if pid is not None:
            out[name] = pid
    return out


def stop_cluster(state_dir: Path) -> list[str]:
    """``pubguard cluster down``: stop every broker of ``state_dir``, however it was started
    (found from the pid files, see :func:`running_brokers`). ``cluster.json`` goes only once
    none runs; a broker that cannot be stopped is a :class:`StateError` and keeps it. The key
    service of a ``[keyservice]`` cluster is stopped too, and a ``[hermes]`` cluster's
    key-group manager (named after the brokers: ``keyservice``, ``hermes-kgm``)."""
    running = running_brokers(state_dir)
    stop_crl_agent(Path(state_dir))
    ks = running_keyservice(Path(state_dir))  # stopped with the brokers, all at once
    kgm = running_kgm(Path(state_dir))  # a [hermes] cluster's key-group manager too
    extra = [p for p in (ks, kgm) if p is not None]
    left = set(stop_pids([*running.values(), *extra]))
    stuck = [n for n, pid in running.items() if pid in left]
    if ks is not None and ks in left:
        stuck.append(KEYSERVICE)
    if kgm is not None and kgm in left:
        stuck.append(KGM_DIR)
    if stuck:
        raise StateError(
            f"could not stop {', '.join(stuck)} of {state_dir} "
            f"(pids {', '.join(str(p) for p in left)}); cluster.json kept"
        )
    (Path(state_dir) / CLUSTER_FILE).unlink(missing_ok=True)
    return [*running, *([KEYSERVICE] if ks is not None else []), *([KGM_DIR] if kgm else [])]


def _last_words(log: Path, start: int | None) -> str:
    """Why a broker that just exited stopped: the last line this run wrote to its log (the
    lines before ``start`` are earlier runs', and would mislead), on one line."""
    try:
        with log.open("rb") as f:
            f.seek(start or 0)
            text = f.read().decode(errors="replace")
    except OSError:
        return "no log"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):  # the CLI's one-line error, when the broker printed one
        if ln.startswith("pubguard: error: "):
            return ln.removeprefix("pubguard: error: ")
    return lines[-1][-600:] if lines else "no output"


async def restart_brokers(
    state_dir: Path, names: list[str] | None = None, *, running_too: bool = False
) -> list[str]:
    """Start again the brokers of a running cluster that are down (``names``: only those; all
    by default) from their ``broker.toml``, on their old ports, and wait until every broker is
    linked to its parent again; returns the ones started. ``running_too``: stop the named ones
    that run first (``pubguard cluster restart NAME``)."""
    state_dir = Path(state_dir)
    data = _read_cluster_file(state_dir)
    for n in names or ():
        if n not in data or n == KEYSERVICE:
            raise StateError(f"the cluster in {state_dir} has no broker {n!r}")
    chosen = list(names or (n for n in data if n != KEYSERVICE))
    if running_too:
        pids = {n: _broker_pid(state_dir, n, data[n]) for n in chosen}
        stuck = stop_pids(p for p in pids.values() if p is not None)
        if stuck:
            raise StateError(f"could not stop pids {', '.join(map(str, stuck))}")
    down = [n for n in chosen if _broker_pid(state_dir, n, data[n]) is None]
    procs, starts = {}, {}
    for n in down:
        bdir = Path(data[n]["config"]).parent
        (bdir / "port").unlink(missing_ok=True)
        log = bdir / "broker.log"
        starts[n] = log.stat().st_size if log.exists() else 0
        procs[n] = spawn_broker(Path(data[n]["config"]), log)
    deadline = time.monotonic() + START_TIMEOUT
    for n in down:
        bdir = Path(data[n]["config"]).parent
        while (port := read_port(bdir)) is None:
            if procs[n].poll() is not None:
                why = _last_words(bdir / "broker.log", starts[n])
                raise StateError(f"broker {n} exited with {procs[n].returncode}: {why}")
            if time.monotonic() > deadline:
                raise StateError(f"broker {n} did not start within {START_TIMEOUT}s")
            await asyncio.sleep(0.02)
        data[n] = {**data[n], "pid": procs[n].pid, "port": port}
    if down:
        (state_dir / CLUSTER_FILE).write_text(json.dumps(data, indent=2))
        await _wait_linked(state_dir, deadline)
    return down


async def restart_keyservice(state_dir: Path, config: ClusterConfig) -> int | None:
    """Start again the key service of a running ``[keyservice]`` cluster that is down (``cluster
    up`` again), from the same configured master secret; its port, or None when it runs (or
    the config has none). Brokers find the new port in its endpoint file."""
    state_dir = Path(state_dir)
    data = _read_cluster_file(state_dir)
    if config.keyservice is None or running_keyservice(state_dir) is not None:
        return None
    pki = ClusterPki(state_dir / "pki")
    made = cluster_secrets(config, pki, now=time.time())
    ks = await _start_keyservice(
        host=config.host,
        state_dir=state_dir,
        pki=pki,
        bundle=made.bundle,
        kdc=made.kdc,
        detached=True,
        port=config.keyservice.port,
        pid_dir=state_dir / KEYSERVICE,
        kmc=made.kmc,
    )
    served = tuple(p for p in keyservice_profiles(config) if serves(ks, p))
    data[KEYSERVICE] = keyservice_record(ks.proc.pid, ks.host, ks.port, served)
    (state_dir / CLUSTER_FILE).write_text(json.dumps(data, indent=2))
    return ks.port


async def _wait_linked(state_dir: Path, deadline: float) -> None:
    """Until every broker answers and is linked to its parent (``deadline``: monotonic)."""
    while True:
        st = await cluster_status(state_dir)
        waiting = [
            n
            for n, s in st.items()
            if "error" in s or s.get("down") or (s["parent"] and not _linked(s))
        ]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise StateError(f"brokers not linked to their parents: {', '.join(waiting)}")
        await asyncio.sleep(0.1)


def _linked(s: dict[str, Any]) -> bool:
    return bool(s["link_state"].get(s["parent"], {}).get("connected"))


async def _one_status(state_dir: Path, name: str, info: dict[str, Any]) -> dict[str, Any]:
    if _broker_pid(state_dir, name, info) is None:
        return {"broker": name, "port": info.get("port"), "down": True}
    pki = ClusterPki(Path(state_dir) / "pki")

    async def ask() -> dict[str, Any]:
        c = await connect(
            f"tls://127.0.0.1:{info['port']}",
            identity=f"admin/{secrets.token_hex(4)}",  # two status commands never replace each other
            ssl=pki.client_context("admin"),
            reconnect=False,
        )
        try:
            return await c.status()
        finally:
            await c.close()

    try:
        return await asyncio.wait_for(ask(), STATUS_TIMEOUT)
    except TimeoutError:
        return {"broker": name, "error": f"no answer within {STATUS_TIMEOUT:g}s"}
    except TransportError as exc:
        return {"broker": name, "error": str(exc)}


async def cluster_status(state_dir: Path) -> dict[str, Any]:
    """``pubguard cluster status``: each recorded broker's status; ``{"down": true}`` for one
    that does not run, ``{"error": ...}`` for one that runs and does not answer."""
    data = _read_cluster_file(state_dir)
    names = [n for n in data if n != KEYSERVICE]
    got = await asyncio.gather(*(_one_status(state_dir, n, data[n]) for n in names))
    return dict(zip(names, got, strict=True))
