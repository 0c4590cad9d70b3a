"""The CRL agent: the one process that holds the CA key and keeps the CRL from expiring.

Theory of operation
-------------------
The cluster CA's CRL (``<state>/pki/ca/crl.pem``) is valid for a week; brokers and the key
service check every peer certificate against it, and OpenSSL refuses them all once it
expires. Re-signing needs the CA key, whose passphrase comes from ``PUBGUARD_CA_PASSPHRASE``
(without it the CA of a cluster cannot sign anything after the command that made it), so the
renewal runs where that passphrase is: brokers never hold the CA key.

:class:`CrlAgent` is the thin I/O part around the pure schedule
:class:`~pubguard.crypto.crl_renewal.CrlRenewal`: each :meth:`CrlAgent.tick` reads the CRL on
disk (a list re-signed elsewhere, ``ClusterPki.revoke``, counts; a file not signed by the CA
counts as none), asks whether a renewal is due, and if so re-signs it with every revoked
serial (:meth:`~pubguard.crypto.x509.CertificateAuthority.crl`: atomic, under a lock).
:meth:`CrlAgent.run` ticks until stopped, sleeping until the next renewal is due but at most
``check_every`` seconds. The clock is an argument (``clock``), so tests cross a month of
renewals in a moment.

Two ways to run it (docs/keyservice.md): ``pubguard ca crl-agent --state S``, a long-running
process that ``pubguard cluster up`` starts beside the brokers when the passphrase is set
(its pid file in ``<state>/crl-agent/``; ``cluster down`` stops it), or ``pubguard ca
renew-crl --state S`` once, from cron or a systemd timer.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pubguard.crypto.crl_renewal import CrlRenewal
from pubguard.crypto.x509 import (
    CA_CERT_FILE,
    CRL_FILE,
    CertificateAuthority,
    RevocationList,
    load_crl,
)
from pubguard.errors import ConfigError, InvalidToken, StateError
from pubguard.net.crl import crl_file_status
from pubguard.net.server.pidfile import live_pid
from pubguard.ops.pki import PASSPHRASE_ENV
from pubguard.ops.process import stop_pids, terminate

__all__ = [
    "AGENT_DIR",
    "CHECK_EVERY",
    "CrlAgent",
    "crl_health",
    "running_agent",
    "start_crl_agent",
    "stop_crl_agent",
]

log = logging.getLogger(__name__)

AGENT_DIR: Final = "crl-agent"  # in <state>: the agent's pid file and log
CHECK_EVERY: Final = 3600.0  # seconds between two looks at the CRL at most
START_TIMEOUT: Final = 30.0


class CrlAgent:
    """Re-sign ``ca``'s CRL on ``renewal``'s schedule (see the module docstring)."""

    def __init__(
        self, ca: CertificateAuthority, renewal: CrlRenewal, *, clock: Callable[[], float]
    ) -> None:
        self.ca, self.renewal, self.clock = ca, renewal, clock
        self.renewals = 0

    def __repr__(self) -> str:
        return f"CrlAgent({self.ca!r}, {self.renewal!r})"

    def _on_disk(self) -> float | None:
        """The next update of the CA's CRL on disk, or None (missing, unreadable, not signed
        by this CA)."""
        try:
            crl = load_crl(self.ca.path / CRL_FILE)
            # signature and issuer, checked at a time inside the list's own window
            crl.check(self.ca.cert, crl.last_update)
        except (ConfigError, InvalidToken):
            return None
        nxt = crl.next_update
        return None if nxt is None else nxt.timestamp()

    def tick(self, now: float) -> RevocationList | None:
        """Re-sign the CRL if a renewal is due at ``now``; the new list, or None."""
        self.renewal.observe(self._on_disk())
        if not self.renewal.due(now):
            return None
        w = self.renewal.renew(now)
        crl = self.ca.crl(now=w.last_update, days=w.days)
        self.renewals += 1
        log.info(
            "crl-agent: re-signed %s (%d revoked), valid until %s",
            self.ca.path / CRL_FILE,
            len(crl.serials),
            _iso(crl.next_update),
        )
        return crl

    async def run(self, stop: asyncio.Event, *, check_every: float = CHECK_EVERY) -> None:
        """Tick until ``stop`` is set."""
        while not stop.is_set():
            now = self.clock()
            self.tick(now)
            pause = min(max(self.renewal.wait(now), 1.0), check_every)
            try:
                await asyncio.wait_for(stop.wait(), pause)
            except TimeoutError:
                pass


def _iso(t: _dt.datetime | None) -> str:
    return "forever" if t is None else t.strftime("%Y-%m-%d %H:%M:%SZ")


def crl_health(state_dir: Path, *, now: float) -> dict[str, Any]:
    """The health of the CA's CRL in ``state_dir`` at ``now``, judged from the files (so it
    is known even when every handshake is refused): the fields of
    :func:`~pubguard.net.crl.crl_file_status` plus ``agent``, the pid of the CRL agent that
    renews it (None if none runs)."""
    ca_dir = Path(state_dir) / "pki" / "ca"
    fix = f"renew it: {PASSPHRASE_ENV}=... pubguard ca renew-crl --state {state_dir}"
    h = crl_file_status(ca_dir / CRL_FILE, ca_dir / CA_CERT_FILE, now=now, fix=fix)
    h["agent"] = running_agent(state_dir)
    if h["healthy"]:
        h["summary"] += (
            f"; renewed by the CRL agent (pid {h['agent']})"
            if h["agent"] is not None
            else "; no CRL agent runs (pubguard ca crl-agent, or ca renew-crl from cron)"
        )
    return h


def running_agent(state_dir: Path) -> int | None:
    """The pid of the CRL agent of ``state_dir``, if one runs."""
    return live_pid(Path(state_dir) / AGENT_DIR)


def start_crl_agent(
    state_dir: Path, *, validity_days: float | None = None, lead_days: float | None = None
) -> subprocess.Popen[bytes]:
    """Start ``pubguard ca crl-agent --state STATE`` in its own session (it inherits this
    process's environment, hence ``PUBGUARD_CA_PASSPHRASE``) and wait until it runs (its
    pid file written once it holds the CA key). Returns the process (it outlives this one
    unless ended); :class:`StateError` if one already runs, or with the agent's last words
    if it exits first (a wrong passphrase)."""
    state_dir = Path(state_dir)
    d = state_dir / AGENT_DIR
    d.mkdir(parents=True, exist_ok=True)
    if running_agent(state_dir) is not None:
        raise StateError(f"a CRL agent already runs for {state_dir}")
    args = [sys.executable, "-m", "pubguard.cli.main", "ca", "crl-agent", "--state", str(state_dir)]
    if validity_days is not None:
        args += ["--validity-days", repr(validity_days)]
    if lead_days is not None:
        args += ["--lead-days", repr(lead_days)]
    logf = d / "crl-agent.log"
    start = logf.stat().st_size if logf.exists() else 0
    with logf.open("ab") as out:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT
    while running_agent(state_dir) != proc.pid:
        if proc.poll() is not None:
            with logf.open("rb") as f:
                f.seek(start)
                tail = f.read().decode(errors="replace").strip().splitlines()
            raise StateError(f"the CRL agent exited: {tail[-1] if tail else proc.returncode}")
        if time.monotonic() > deadline:
            terminate(proc)
            raise StateError("the CRL agent did not start")
        time.sleep(0.05)
    return proc


def stop_crl_agent(state_dir: Path) -> bool:
    """Stop the CRL agent of ``state_dir``; whether one was running."""
    pid = running_agent(state_dir)
    if pid is None:
        return False
    stop_pids([pid])
    return True
