"""``pubguard keyservice serve``: the EventGuard meta-service behind mutual TLS.

Example::

    PUBGUARD_CA_PASSPHRASE=... pubguard keyservice serve --state ./net --port 7443
    pubguard keyservice serve --state ./net --tdn-ca ./narada-ca/ca.pem   # + a narada TDN
    PUBGUARD_KDC_MASTER=... pubguard keyservice serve --state ./net --kdc-policy policy.json

The TLS identity ``keyservice`` (role ``ms``) is issued by the cluster CA in ``<state>/pki`` on
first use. The MS primary key ``rk`` (eventguard.txt §3.2) comes from ``PUBGUARD_MS_MASTER``
(base64, at least 16 bytes) so replicas can share it; without it a random one lives only in
this process. It is never written to disk; only the MS public key goes to
``<state>/ms-key.json`` for brokers.

With ``--kdc-policy`` the same process also serves the PSGuard KDC and the default profile's
authority (:mod:`pubguard.net.keyservice.kdc`): the policy file holds the event types and who
may subscribe to / publish on what (:meth:`~pubguard.net.keyservice.kdc.KdcConfig.policy_json`),
the KDC master comes from ``PUBGUARD_KDC_MASTER`` (base64) and the authority's public key is
added to ``ms-key.json``. Revocations persist in ``<state>/keyservice-revocations.db``.

``pubguard keyservice revoke --identity NAME`` (an administrator named by the policy's
``admins``, ``--as``, default ``admin``) revokes an identity at the running service found
through ``<state>/ms-key.json`` (or ``--keyservice host:port``); brokers polling the
authority-signed revocation list drop its publications from then on (docs/keyservice.md)::

    $ pubguard keyservice revoke --state ./net --identity ward-laptop
    revoked ward-laptop: revocation list serial 1, 1 key(s) revoked in all
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click

from pubguard.cli.common import err_console, get_group

if TYPE_CHECKING:
    import ssl

    from pubguard.net.keyservice.kmc_service import KmcService

__all__ = ["KDC_MASTER_ENV", "MASTER_ENV", "register"]

MASTER_ENV: Final = "PUBGUARD_MS_MASTER"
KDC_MASTER_ENV: Final = "PUBGUARD_KDC_MASTER"
KMC_MASTER_ENV: Final = "PUBGUARD_KMC_MASTER"


def _master(env: str = MASTER_ENV) -> bytes | None:
    from pubguard.errors import ConfigError

    raw = os.environ.get(env)
    if raw is None:
        return None
    try:
        m = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{env} is not base64", key=env) from None
    if len(m) < 16:
        raise ConfigError(f"{env} must decode to at least 16 bytes", key=env)
    return m


def _kdc(policy: Path | None) -> object:
    """The KDC configuration of ``--kdc-policy`` (None without it); one-line errors if bad."""
    if policy is None:
        return None
    from pubguard.crypto import random_bytes
    from pubguard.net.keyservice.kdc import KdcConfig

    master = _master(KDC_MASTER_ENV)
    cfg = KdcConfig.load_policy(policy, master or random_bytes(32))
    if master is None:  # said once the policy loaded, so a bad policy is one error line
        err_console.print(
            f"[yellow]no {KDC_MASTER_ENV}: a random KDC master lives in this process[/]"
        )
    return cfg


async def _serve(
    state: Path,
    host: str,
    port: int,
    epoch_length: float,
    origin: float = 0.0,
    parent_pid: int | None = None,
    tdn_ca: Path | None = None,
    kdc: object = None,
    pid_dir: Path | None = None,
    kmc_cert: Path | None = None,
) -> None:
    import asyncio

    from pubguard.crypto import SecretBytes, random_bytes
    from pubguard.crypto.x509 import Role, server_ssl_context
    from pubguard.keys.ms import MetaService
    from pubguard.net.crl import CrlWatch
    from pubguard.net.keyservice.core import KeyServiceCore
    from pubguard.net.keyservice.server import KeyServiceServer
    from pubguard.net.tls import tls_password
    from pubguard.ops.pki import ClusterPki

    master = _master()
    ms = MetaService(
        SecretBytes(master or random_bytes(32)), epoch_length=epoch_length, origin=origin
    )
    ident = ClusterPki(state / "pki").identity("keyservice", Role.MS)
    pki = ClusterPki(state / "pki")
    # refuse revoked client certificates at the handshake: the CA's CRL if it has signed one
    # (ClusterPki.revoke, the CRL agent), else the one issued with our identity; reloaded
    # when the file changes, and an expired one logged and reported (net/crl.py)
    crl = pki.crl_path or (ident.crl_path if ident.crl_path.exists() else None)

    def contexts() -> tuple[ssl.SSLContext, None]:
        ctx = server_ssl_context(
            ident.cert_path, ident.key_path, ident.ca_path, crl_path=crl, password=tls_password()
        )
        return ctx, None

    watch = None if crl is None else CrlWatch("keyservice", crl, ident.ca_path, contexts)
    ctx = contexts()[0] if watch is None or watch.server_context is None else watch.server_context
    tdn = None
    if tdn_ca is not None:  # narada §II-A: a topic discovery node trusting that CA
        from pubguard.crypto.x509 import load_certificate
        from pubguard.keys.discovery import TopicDiscoveryNode

        tdn = TopicDiscoveryNode(load_certificate(tdn_ca))
    svc = None
    if kdc is not None:  # revocations persist beside the CA (public material only)
        from pubguard.net.keyservice.kdc import KdcService
        from pubguard.net.keyservice.revocation import REVOCATIONS_DB

        svc = KdcService(kdc, revocations=state / REVOCATIONS_DB)  # type: ignore[arg-type]
    kmc: KmcService | None = None
    if kmc_cert is not None:  # narada §IV: the KMC, its CA the cluster's (kmc_service.py)
        kmc = _kmc(state, kmc_cert, ident.ca_path, kdc)
    core = KeyServiceCore(ms, tdn=tdn, kdc=svc, kmc=kmc, health=watch.status if watch else None)
    server = KeyServiceServer(core, ctx, host=host, port=port, crl=watch)
    bound = await server.start()
    key_b64 = base64.b64encode(ms.public_key.to_bytes()).decode()
    out = {"ms_key": key_b64, "host": host, "port": bound}
    if core.kdc is not None:
        out["authority_key"] = base64.b64encode(core.kdc.authority.public_key.to_bytes()).decode()
    (state / "ms-key.json").write_text(json.dumps(out))
    if pid_dir is not None:  # as a broker's: `cluster status` / `down` find us by it
        from pubguard.net.server.pidfile import write_pidfile

        pid_dir.mkdir(parents=True, exist_ok=True)
        write_pidfile(pid_dir)
    if master is None:  # said once serving, so a failed start is one error line
        err_console.print(f"[yellow]no {MASTER_ENV}: a random MS key lives in this process[/]")
    extra = f"; KDC / authority key {out['authority_key']}" if "authority_key" in out else ""
    click.echo(f"keyservice listening on {host}:{bound} (MS public key {key_b64}{extra})")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watcher = None
    if parent_pid is not None:  # stop with the program that started us (LocalCluster)
        from pubguard.net.loop import watch_parent

        watcher = asyncio.create_task(watch_parent(parent_pid, stop))
    try:
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await server.stop()
        if pid_dir is not None:
            from pubguard.net.server.pidfile import remove_pidfile

            remove_pidfile(pid_dir)


def _kmc(state: Path, cert_path: Path, ca_path: Path, kdc: object) -> KmcService:
    """Narada's KMC with the certificate at ``cert_path`` (its key derived from
    :data:`KMC_MASTER_ENV`), the CA at ``ca_path`` and the KDC policy's rights (open without
    one); one-line ConfigError if the secret is missing or the certificate is not its key's."""
    from pubguard.crypto.x509 import load_certificate
    from pubguard.errors import ConfigError, ValidationError
    from pubguard.net.keyservice.kmc_service import KMC_DB, KmcService
    from pubguard.store import Database

    secret = _master(KMC_MASTER_ENV)
    if secret is None:
        raise ConfigError(f"--kmc-cert needs {KMC_MASTER_ENV} (base64)", key=KMC_MASTER_ENV)
    try:
        return KmcService(
            secret,
            cert=load_certificate(cert_path),
            ca_cert=load_certificate(ca_path),
            db=Database(state / KMC_DB),
            # the KDC policy's rights (KdcConfig); open without one
            subscribers=getattr(kdc, "subscribers", None),
            publishers=getattr(kdc, "publishers", None),
        )
    except ValidationError as exc:
        raise ConfigError(f"{cert_path}: {exc}", path=str(cert_path)) from None


def _endpoint(state: Path, keyservice: str | None) -> tuple[str, int]:
    from pubguard.errors import ConfigError

    if keyservice is None:
        f = state / "ms-key.json"
        try:
            d = json.loads(f.read_text())
            return str(d["host"]), int(d["port"])
        except (OSError, ValueError, KeyError, TypeError):
            raise ConfigError(
                f"{f}: no running key service recorded (give --keyservice)", key="keyservice"
            ) from None
    host, _, port = keyservice.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--keyservice {keyservice!r} is not host:port", key="keyservice")
    return host, int(port)


def _revoke(
    state: Path, keyservice: str | None, as_: str, identity: str | None, key: str | None
) -> None:
    from pubguard.errors import ConfigError, DropError, FrameError, RevokedError
    from pubguard.net.keyservice.client import KeyServiceClient
    from pubguard.ops.pki import ClusterPki

    if (identity is None) == (key is None):
        raise ConfigError("give exactly one of --identity and --key", key="identity")
    fields: dict[str, object] = {"identity": identity}
    if key is not None:
        try:
            k = bytes.fromhex(key)
        except ValueError:
            k = b""
        if len(k) != 32:
            raise ConfigError("--key is a 64-hex-digit Ed25519 public key", key="key")
        fields = {"key": k}
    host, port = _endpoint(state, keyservice)
    pki = ClusterPki(state / "pki")
    if not (pki.root / as_ / f"{as_}.pem").exists():
        raise ConfigError(f"no certificate for {as_!r} in {pki.root}", key="as")
    with KeyServiceClient(host, port, pki.client_context(as_)) as ks:
        try:
            out = ks.call("authority_revoke", **fields)
        except DropError:
            raise ConfigError(
                f"{as_!r} is not an administrator of the key service (refused: unauthorised)",
                key="as",
            ) from None
        except RevokedError:
            raise ConfigError(f"{as_!r} is itself revoked", key="as") from None
        except FrameError as exc:
            if "unknown_op" not in str(exc):
                raise
            # an MS-only service (no --kdc-policy): no authority, so no revocation list
            raise ConfigError(
                f"the key service at {host}:{port} runs no authority to revoke "
                "at (serve it with --kdc-policy; the policy's admins may revoke)",
                key="keyservice",
            ) from None
    what = identity if identity is not None else f"key {key}"
    verb = "revoked" if out.get("changed") else "already revoked:"
    click.echo(
        f"{verb} {what}: revocation list serial {out.get('serial')}, "
        f"{out.get('keys')} key(s) revoked in all"
    )


def register(cli: click.Group) -> None:
    group = get_group(
        cli, "keyservice", "Key services (EventGuard MS, PSGuard KDC) over mutual TLS."
    )

    @group.command("serve")
    @click.option(
        "--state",
        type=click.Path(path_type=Path),
        default=Path("pubguard-cluster"),
        show_default=True,
        help="State folder (the CA and identities in <state>/pki).",
    )
    @click.option("--host", default="127.0.0.1", show_default=True)
    @click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=0,
        show_default=True,
        help="TCP port (0: any free port, printed).",
    )
    @click.option(
        "--epoch-length",
        type=click.FloatRange(min=1.0, min_open=False),
        default=30 * 86400.0,
        show_default=True,
        help="MS epoch length in seconds.",
    )
    @click.option(
        "--origin",
        type=float,
        default=0.0,
        show_default=True,
        help="Start of epoch 0 (seconds since the Unix epoch).",
    )
    @click.option(
        "--parent-pid",
        type=int,
        default=None,
        help="Stop when this process is gone (set by LocalCluster).",
    )
    @click.option(
        "--tdn-ca",
        type=click.Path(path_type=Path),
        default=None,
        help="Also serve a narada topic discovery node trusting this CA (PEM).",
    )
    @click.option(
        "--kdc-policy",
        type=click.Path(path_type=Path),
        default=None,
        help="Also serve the PSGuard KDC / default authority with this policy (JSON; the "
        f"master from {KDC_MASTER_ENV}).",
    )
    @click.option(
        "--pid-dir",
        type=click.Path(path_type=Path),
        default=None,
        help="Write a pid file here once listening (set by cluster up).",
    )
    @click.option(
        "--kmc-cert",
        type=click.Path(path_type=Path),
        default=None,
        help="Also serve narada's KMC with this certificate (PEM, role kmc; its key derived "
        f"from {KMC_MASTER_ENV}).",
    )
    def serve(
        state: Path,
        host: str,
        port: int,
        epoch_length: float,
        origin: float,
        parent_pid: int | None,
        tdn_ca: Path | None,
        kdc_policy: Path | None,
        pid_dir: Path | None,
        kmc_cert: Path | None,
    ) -> None:
        """Serve the meta-service (and optionally the PSGuard KDC / default authority):
        permits, tokens and epoch keys for authenticated clients."""
        import asyncio

        _master()  # a bad master or CA is a one-line error before anything is created
        kdc = _kdc(kdc_policy)
        if tdn_ca is not None:
            from pubguard.crypto.x509 import load_certificate

            load_certificate(tdn_ca)
        if kmc_cert is not None and _master(KMC_MASTER_ENV) is None:
            from pubguard.errors import ConfigError

            raise ConfigError(f"--kmc-cert needs {KMC_MASTER_ENV} (base64)", key=KMC_MASTER_ENV)
        state.mkdir(parents=True, exist_ok=True)
        asyncio.run(
            _serve(
                state, host, port, epoch_length, origin, parent_pid, tdn_ca, kdc, pid_dir, kmc_cert
            )
        )

    @group.command("revoke")
    @click.option(
        "--state",
        type=click.Path(path_type=Path),
        default=Path("pubguard-cluster"),
        show_default=True,
        help="State folder (CA and identities in <state>/pki).",
    )
    @click.option("--identity", default=None, help="The identity to revoke (and its keys).")
    @click.option("--key", default=None, help="Or one Ed25519 public key (hex).")
    @click.option(
        "--as",
        "as_",
        default="admin",
        show_default=True,
        help="The administrator identity (certificate) to act as.",
    )
    @click.option(
        "--keyservice",
        default=None,
        help="host:port of the key service (default: <state>/ms-key.json).",
    )
    def revoke(
        state: Path, identity: str | None, key: str | None, as_: str, keyservice: str | None
    ) -> None:
        """Revoke an identity (or one key) at the running key service; brokers learn it
        from the authority-signed revocation list they poll."""
        _revoke(state, keyservice, as_, identity, key)
