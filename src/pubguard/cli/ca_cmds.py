"""``pubguard ca``: the cluster CA's CRL: renew it once, or keep it renewed.

Examples::

    PUBGUARD_CA_PASSPHRASE=... pubguard ca renew-crl --state ./net     # cron / systemd timer
    PUBGUARD_CA_PASSPHRASE=... pubguard ca crl-agent --state ./net     # long-running
    pubguard ca crl-status --state ./net

The CRL (``<state>/pki/ca/crl.pem``) is re-signed ``--lead-days`` before its next update,
each new one valid ``--validity-days`` (:mod:`pubguard.ops.crl_agent`). Both commands need
the CA key, hence ``PUBGUARD_CA_PASSPHRASE``; brokers and the key service only read the file
and reload it when it changes.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from pubguard.cli.common import console, err_console, get_group, print_json
from pubguard.errors import ConfigError, StateError

__all__ = ["register", "show_crl_health", "warn_without_ca_passphrase"]

_STATE = click.option(
    "--state",
    "state",
    type=click.Path(path_type=Path),
    default=Path("pubguard-cluster"),
    show_default=True,
    help="Cluster state folder (the CA in <state>/pki/ca).",
)
_VALIDITY = click.option(
    "--validity-days",
    type=click.FloatRange(min=0, min_open=True),
    default=7.0,
    show_default=True,
    help="How long each new CRL is valid.",
)
_LEAD = click.option(
    "--lead-days",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Re-sign this long before the current CRL's next update.",
)


def _agent(state: Path, validity_days: float, lead_days: float) -> Any:
    """A :class:`~pubguard.ops.crl_agent.CrlAgent` holding the CA of ``state``."""
    from pubguard.crypto.crl_renewal import DAY, CrlRenewal
    from pubguard.crypto.x509 import CertificateAuthority
    from pubguard.ops.crl_agent import CrlAgent
    from pubguard.ops.pki import PASSPHRASE_ENV, ClusterPki

    pki = ClusterPki(state / "pki")
    if not pki.exists():
        raise ConfigError(f"no CA in {pki.ca_dir} (pubguard cluster up makes one)", key="state")
    passphrase = os.environ.get(PASSPHRASE_ENV)
    if not passphrase:
        raise ConfigError(f"re-signing the CRL needs the CA key: set {PASSPHRASE_ENV}", key="ca")
    renewal = CrlRenewal(validity=validity_days * DAY, lead=lead_days * DAY)
    ca = CertificateAuthority.load(pki.ca_dir, passphrase=passphrase.encode())
    return CrlAgent(ca, renewal, clock=time.time)


def register(cli: click.Group) -> None:
    ca = get_group(cli, "ca", "The cluster CA: keep its revocation list (CRL) from expiring.")

    @ca.command("renew-crl")
    @_STATE
    @_VALIDITY
    @_LEAD
    @click.option("--force", is_flag=True, help="Re-sign now, even if no renewal is due.")
    def renew_crl(state: Path, validity_days: float, lead_days: float, force: bool) -> None:
        """Re-sign the CRL if it is within --lead-days of its next update (once; for cron or
        a systemd timer)."""
        agent = _agent(state, validity_days, lead_days)
        now = time.time()
        crl = agent.ca.crl(now=now, days=validity_days) if force else agent.tick(now)
        if crl is None:
            nxt = agent.renewal.next_update or now
            console.print(
                f"CRL valid until {_iso(nxt)}; not renewed (due from "
                f"{_iso(nxt - agent.renewal.lead)})",
                soft_wrap=True,
            )
        else:
            console.print(
                f"renewed {agent.ca.path / 'crl.pem'}: {len(crl.serials)} revoked, valid until "
                f"{_iso(crl.next_update.timestamp())}",
                soft_wrap=True,
            )

    @ca.command("crl-agent")
    @_STATE
    @_VALIDITY
    @_LEAD
    @click.option(
        "--check-every",
        type=click.FloatRange(min=1),
        default=3600.0,
        show_default=True,
        help="Seconds between two looks at the CRL at most.",
    )
    def crl_agent(state: Path, validity_days: float, lead_days: float, check_every: float) -> None:
        """Keep the CRL renewed until stopped (SIGTERM / Ctrl-C); `cluster up` runs one when
        PUBGUARD_CA_PASSPHRASE is set, and `cluster down` stops it."""
        import asyncio
        import logging

        from pubguard.net.server.pidfile import remove_pidfile, write_pidfile
        from pubguard.ops.crl_agent import AGENT_DIR, running_agent

        agent = _agent(state, validity_days, lead_days)  # the CA key is held from here on
        logging.getLogger("pubguard.ops.crl_agent").setLevel(logging.INFO)
        if running_agent(state) is not None:
            raise StateError(f"a CRL agent already runs for {state}")
        d = state / AGENT_DIR
        d.mkdir(parents=True, exist_ok=True)

        async def run() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            agent.tick(agent.clock())  # a due renewal is done before the agent counts as up
            write_pidfile(d)
            try:
                await agent.run(stop, check_every=check_every)
            finally:
                remove_pidfile(d)

        console.print(f"crl-agent: keeping {agent.ca.path / 'crl.pem'} renewed", soft_wrap=True)
        asyncio.run(run())

    @ca.command("crl-status")
    @_STATE
    @click.option("--json", "as_json", is_flag=True)
    def crl_status(state: Path, as_json: bool) -> None:
        """Whether the CRL is valid, until when, and whether an agent renews it (exit 1 when
        it has expired)."""
        from pubguard.ops.crl_agent import crl_health

        h = crl_health(state, now=time.time())
        if as_json:
            print_json(h)
        else:
            console.print(
                h["summary"] if h["healthy"] else f"[red]{h['summary']}[/]", soft_wrap=True
            )
        if not h["healthy"]:
            click.get_current_context().exit(1)


def warn_without_ca_passphrase(state: Path) -> None:
    """After ``cluster up``: one line on stderr when no ``PUBGUARD_CA_PASSPHRASE`` is set,
    since then nothing can sign with the CA key once the command has ended."""
    from pubguard.ops.crl_agent import crl_health
    from pubguard.ops.pki import PASSPHRASE_ENV

    if os.environ.get(PASSPHRASE_ENV):
        return
    nxt = crl_health(state, now=time.time())["next_update"]
    until = "" if nxt is None else f" (it expires {_iso(nxt)}; then every connection is refused)"
    err_console.print(
        f"[yellow]warning: {PASSPHRASE_ENV} is not set: after this command the CA can no "
        f"longer issue certificates or re-sign its CRL{until}[/]",
        soft_wrap=True,
    )


def show_crl_health(state: Path, *, quiet: bool = False) -> bool:
    """``pubguard status``: the CRL's health (one line; on stderr, in red, when it is bad, and
    only then when ``quiet``); whether it is healthy."""
    from pubguard.ops.crl_agent import crl_health

    h = crl_health(state, now=time.time())
    if h["state"] == "missing" and not (state / "pki" / "ca").exists():
        return True  # no CA here (a cluster of plain TCP brokers): nothing to judge
    if not h["healthy"]:
        err_console.print(f"[red]{h['summary']}[/]", soft_wrap=True)
    elif not quiet:
        console.print(h["summary"], soft_wrap=True)
    return bool(h["healthy"])


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(t))
