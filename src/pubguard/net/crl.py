"""A TLS server or client that checks peers against the CA's CRL, reloads it when the file
changes, and says so when it has expired.

Theory of operation
-------------------
narada-secure-delivery.txt §IV-H1: brokers and key services consult the CA's revocation list.
Mutual-TLS contexts (:func:`~pubguard.crypto.x509.server_ssl_context`) load the CRL once, and
OpenSSL then checks every peer's certificate against it (``VERIFY_CRL_CHECK_LEAF``). Two
things follow, and :class:`CrlWatch` handles both:

* **Renewal.** The CA re-signs the CRL before it expires and when it revokes
  (:mod:`pubguard.ops.crl_agent`), writing the file atomically. :meth:`CrlWatch.poll` looks
  at the file's mtime (every :data:`CRL_POLL` seconds in :meth:`CrlWatch.run`); when it
  changed it builds new contexts from it. The listening socket keeps its first context, whose
  SNI callback (called at the start of every handshake, with or without a server name) hands
  the connection the current one: new connections are checked against the new list, live
  ones are left alone. The dialling side (a broker's parent link, the revocation fetch) gets
  the new client context through ``on_reload``. A file that does not load (half-written by
  hand, another CA's) is logged and the contexts in use stay.
* **Expiry.** Past the CRL's next update OpenSSL refuses *every* peer certificate, with no
  word on the server's side (asyncio drops failed handshakes silently). The watch logs an
  error when the list it serves expires, and again at the start of each refused handshake
  (the first, then at most one line per :data:`REFUSAL_LOG_EVERY` seconds with the count),
  naming the cause and the fix; :meth:`CrlWatch.status` reports ``healthy: false``, which the
  broker's and the key service's status carry. Failing closed is deliberate: an expired list
  may be missing revocations.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import os
import ssl as _ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pubguard.crypto.x509 import Certificate, load_certificate, load_crl
from pubguard.errors import ConfigError, InvalidToken

__all__ = ["CRL_POLL", "REFUSAL_LOG_EVERY", "CrlWatch", "crl_file_status"]

log = logging.getLogger(__name__)

CRL_POLL: Final = 2.0  # seconds between two looks at the CRL file's mtime
REFUSAL_LOG_EVERY: Final = 60.0  # seconds between two lines about refused handshakes

#: builds the (server, client) contexts from the files as they are now; either may be None
ContextFactory = Callable[[], tuple[_ssl.SSLContext | None, _ssl.SSLContext | None]]


def _iso(t: _dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%SZ")


def crl_file_status(
    crl_path: Path, ca: Certificate | Path, *, now: float, fix: str = ""
) -> dict[str, Any]:
    """The health of the CRL in ``crl_path`` at ``now`` against the CA certificate ``ca``:
    ``state`` (``ok``, ``expired``, ``invalid``, ``missing``), ``healthy``, ``next_update``
    (epoch seconds), ``expires_in`` (seconds; negative once expired) and a one-line
    ``summary`` (``fix`` appended when it is not healthy)."""
    out: dict[str, Any] = {"path": str(crl_path), "next_update": None, "expires_in": None}
    try:
        ca_cert = ca if isinstance(ca, Certificate) else load_certificate(ca)
        crl = load_crl(crl_path)
        crl.check(ca_cert, crl.last_update)  # issuer and signature (time is judged below)
    except ConfigError as exc:
        missing = not crl_path.exists()
        out["state"] = "missing" if missing else "invalid"
        out["summary"] = f"CRL {crl_path}: {exc}"
    except InvalidToken:
        out["state"] = "invalid"
        out["summary"] = f"CRL {crl_path} is not signed by the CA"
    else:
        nxt = crl.next_update
        if nxt is not None:
            out["next_update"] = nxt.timestamp()
            out["expires_in"] = round(nxt.timestamp() - now, 3)
        if crl.expired(now):
            out["state"] = "expired"
            assert nxt is not None
            out["summary"] = (
                f"CRL {crl_path} expired at {_iso(nxt)}: every TLS handshake checked against it "
                "is refused"
            )
        else:
            out["state"] = "ok"
            until = "never expires" if nxt is None else f"valid until {_iso(nxt)}"
            out["summary"] = f"CRL {crl_path} {until} ({len(crl.serials)} revoked)"
    out["healthy"] = out["state"] == "ok"
    if not out["healthy"] and fix:
        out["summary"] += f" ({fix})"
    return out


class CrlWatch:
    """The contexts of one process that checks peers against ``crl_path`` (see the module
    docstring). ``build`` makes (server, client) contexts from the files; ``name`` labels the
    log lines; ``on_reload`` gets the new client context; ``clock`` is wall time (a CRL's
    validity is wall-clock)."""

    def __init__(
        self,
        name: str,
        crl_path: Path,
        ca_path: Path,
        build: ContextFactory,
        *,
        on_reload: Callable[[_ssl.SSLContext | None], None] | None = None,
        clock: Callable[[], float] = time.time,
        poll: float = CRL_POLL,
    ) -> None:
        self.name, self.crl_path, self.ca_path = name, Path(crl_path), Path(ca_path)
        self.build, self.on_reload, self.clock, self.poll_every = build, on_reload, clock, poll
        self._mtime = self._stat()
        srv, self.client_context = build()  # ConfigError here: the process does not start
        self._current = srv
        self.server_context = srv
        if srv is not None:
            srv.sni_callback = self._hand_over
        self.reloads = 0
        self.reload_failures = 0
        self.refused_while_expired = 0
        self._last_refusal_log: float | None = None
        self._unlogged_refusals = 0
        self._health: dict[str, Any] = {}
        self._health = self._check()
        if not self._health["healthy"]:
            log.error("%s: %s", self.name, self._health["summary"])

    def __repr__(self) -> str:
        return f"CrlWatch({self.name}, {str(self.crl_path)!r}, reloads={self.reloads})"

    def _stat(self) -> tuple[int, int, int] | None:
        """What tells a new file from the old: mtime, inode (a rename) and size."""
        try:
            st = os.stat(self.crl_path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_ino, st.st_size

    def _check(self) -> dict[str, Any]:
        """The file's health now; a change of state is logged (an error when it goes bad)."""
        fix = "renew it: PUBGUARD_CA_PASSPHRASE=... pubguard ca renew-crl"
        h = crl_file_status(self.crl_path, self.ca_path, now=self.clock(), fix=fix)
        old = self._health
        if old and old["state"] != h["state"]:
            if h["healthy"]:
                log.warning("%s: %s", self.name, h["summary"])
            else:
                log.error("%s: %s", self.name, h["summary"])
        return h

    # -- the SNI callback: every new connection gets the current context --------------------

    def _hand_over(self, sslobj: _ssl.SSLObject, server_name: str | None, _: Any) -> None:
        if self._current is not None and sslobj.context is not self._current:
            sslobj.context = self._current
        if self._health["state"] == "expired":
            self._refusing()

    def _refusing(self) -> None:
        """A handshake starts while the CRL is expired: OpenSSL will refuse the peer. Logged
        (the first, then one line per :data:`REFUSAL_LOG_EVERY` seconds with the count)."""
        self.refused_while_expired += 1
        self._unlogged_refusals += 1
        now = self.clock()
        last = self._last_refusal_log
        if last is None or now - last >= REFUSAL_LOG_EVERY:
            log.error(
                "%s: refusing %d TLS handshake(s): %s",
                self.name,
                self._unlogged_refusals,
                self._health["summary"],
            )
            self._last_refusal_log = now
            self._unlogged_refusals = 0

    # -- polling ---------------------------------------------------------------------------

    def poll(self) -> bool:
        """Reload the contexts if the CRL file changed; re-judge its health. Whether it
        reloaded."""
        reloaded = False
        mtime = self._stat()
        if mtime is not None and mtime != self._mtime:
            self._mtime = mtime
            try:
                srv, cli = self.build()
            except ConfigError as exc:
                self.reload_failures += 1
                log.error(
                    "%s: CRL changed but does not load (%s); keeping the last one", self.name, exc
                )
            else:
                self._current = srv if srv is not None else self._current
                self.client_context = cli
                self.reloads += 1
                reloaded = True
                log.info("%s: CRL %s reloaded", self.name, self.crl_path)
                if self.on_reload is not None:
                    self.on_reload(cli)
        self._health = self._check()
        return reloaded

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await asyncio.sleep(self.poll_every)
            self.poll()

    def status(self) -> dict[str, Any]:
        """The CRL's health (:func:`crl_file_status`, as of the last poll: status is asked
        often, the file is judged every :data:`CRL_POLL` seconds) plus the reload counters."""
        return {
            **self._health,
            "reloads": self.reloads,
            "reload_failures": self.reload_failures,
            "refused_while_expired": self.refused_while_expired,
        }
