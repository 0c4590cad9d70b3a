"""A running broker learns revocations live: it polls the authority's signed revocation list.

Theory of operation
-------------------
narada-secure-delivery.txt §IV-A has the CA notify brokers of revocations and §IV-H1 has them
check every message against the list; a broker that learns of a revocation only at its next
configuration would keep routing a stolen identity's publications. A broker configured with
``[revocation]`` (:class:`~pubguard.net.config.RevocationSource`) runs a
:class:`RevocationWatcher`:

- every ``poll`` seconds it fetches ``authority_revocations`` from the key service over mutual
  TLS with its own broker certificate (:class:`~pubguard.net.keyservice.client.KeyServiceClient`
  in a worker thread; the service's certificate must carry the role ``ms``);
- :class:`~pubguard.schemes.common.revocation_list.RevocationFeed` (sans-IO) verifies the authority's
  signature (the ``authority_key`` of the broker keys) and that the serial only grows; keys
  newly revoked go to ``revoke(key)`` of every profile served that has one (default,
  eventguard, psguard), so the next publication of a revoked key is dropped here with ``revoked``;
- the accepted list is kept in ``<state>/revocations.bin`` (public, signed), so a restarted
  broker applies it before its first fetch and never accepts an older serial;
- a failed fetch keeps the last good list; failures, refusals (forged, rollback, ...) and the
  list going stale (issue time older than ``max_age``) are logged once per change of state,
  and shown in the broker's status (``revocation``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl as _ssl
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from pubguard.errors import PubguardError, TransportError
from pubguard.net.config import RevocationSource
from pubguard.net.keyservice.client import KeyServiceClient
from pubguard.schemes.common.revocation_list import FeedVerdict, RevocationFeed, apply_revocations

__all__ = ["STATE_FILE", "RevocationWatcher"]

log = logging.getLogger(__name__)

STATE_FILE: Final = "revocations.bin"
FETCH_TIMEOUT: Final = 5.0


class RevocationWatcher:
    """See the module docstring. ``schemes``: the broker's scheme registry (anything
    iterable over the broker schemes); ``state_dir``: where the accepted list is kept (None:
    nowhere); ``clock``: wall time (issue times are wall-clock)."""

    def __init__(
        self,
        broker: str,
        source: RevocationSource,
        feed: RevocationFeed,
        schemes: Iterable[Any],
        ssl_context: _ssl.SSLContext | None,
        *,
        state_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.broker, self.source, self.feed = broker, source, feed
        self.schemes = schemes
        self.ssl = ssl_context
        self.clock = clock
        self.file = None if state_dir is None else Path(state_dir) / STATE_FILE
        self.state = "starting"
        self.fetches = 0
        self.failures = 0
        self.last_refusal: str | None = None
        self._client: KeyServiceClient | None = None
        self._endpoint: tuple[str, int] | None = None
        self._stale_logged = False

    def __repr__(self) -> str:
        return f"RevocationWatcher({self.broker}, {self.feed!r}, state={self.state!r})"

    # -- the sans-IO part: take a list in --------------------------------------------------
    def restore(self) -> None:
        """Apply the list kept from before a restart (if any)."""
        if self.file is None or not self.file.exists():
            return
        with contextlib.suppress(OSError):
            v = self.take(self.file.read_bytes(), persist=False)
            log.info(
                "broker %s: revocation list serial %s restored (%s)",
                self.broker,
                v.serial,
                v.outcome,
            )

    def take(self, blob: bytes, *, persist: bool = True) -> FeedVerdict:
        """Offer one list to the feed; apply and keep it if accepted."""
        now = self.clock()
        v = self.feed.offer(blob, now=now)
        if v.outcome == "applied":
            apply_revocations(self.schemes, v.new_keys)
            rl = self.feed.current
            log.log(
                logging.WARNING if v.new_keys else logging.INFO,
                "broker %s: revocation list serial %s: %d key(s) newly revoked "
                "(revoked identities: %s)",
                self.broker,
                v.serial,
                len(v.new_keys),
                ", ".join(rl.identities) if rl and rl.identities else "none",
            )
            if persist and self.file is not None:
                self._keep(blob)
        if v.accepted:
            self._set_state("ok")
            self._stale_logged = False
        else:
            self.last_refusal = v.outcome
            self._set_state(f"refused: {v.outcome}")
        return v

    def _keep(self, blob: bytes) -> None:
        assert self.file is not None
        with contextlib.suppress(OSError):
            tmp = self.file.with_suffix(".tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, self.file)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            level = logging.INFO if state == "ok" else logging.WARNING
            log.log(level, "broker %s: revocation feed: %s", self.broker, state)
            self.state = state

    def check_stale(self) -> bool:
        """Whether the list is stale now (logged once when it becomes so)."""
        now = self.clock()
        stale = self.feed.stale(now)
        if stale and not self._stale_logged and self.feed.current is not None:
            log.warning(
                "broker %s: revocation list serial %s is %.0f s old (max_age %.0f s): "
                "revocations since then are unknown here",
                self.broker,
                self.feed.serial,
                now - (self.feed.issued or 0.0),
                self.feed.max_age,
            )
            self._stale_logged = True
        return stale

    def status(self) -> dict[str, Any]:
        now = self.clock()
        issued = self.feed.issued
        return {
            "serial": self.feed.serial,
            "age": None if issued is None else round(now - issued, 3),
            "stale": self.feed.stale(now),
            "state": self.state,
            "keys": len(self.feed.revoked),
            "identities": list(self.feed.current.identities) if self.feed.current else [],
            "fetches": self.fetches,
            "failures": self.failures,
            "refused": self.feed.refused,
        }

    # -- the I/O shell ---------------------------------------------------------------------
    def _where(self) -> tuple[str, int]:
        s = self.source
        if s.endpoint_file is None:
            assert s.host is not None and s.port is not None
            return s.host, s.port
        try:
            d = json.loads(s.endpoint_file.read_text())
            return str(d["host"]), int(d["port"])
        except (OSError, ValueError, KeyError, TypeError):
            raise TransportError(f"no key service endpoint in {s.endpoint_file}") from None

    def _fetch(self) -> bytes:
        where = self._where()
        if self._client is None or where != self._endpoint:
            self.close()
            if self.ssl is None:
                raise TransportError("fetching the revocation list needs TLS")
            self._client = KeyServiceClient(*where, self.ssl, timeout=FETCH_TIMEOUT)
            self._endpoint = where
        blob = self._client.call("authority_revocations").get("list")
        if type(blob) is not bytes:
            raise TransportError("the key service sent no revocation list")
        return blob

    async def poll_once(self) -> FeedVerdict | None:
        """One fetch; the verdict, or None if the fetch failed (the last good list stays)."""
        self.fetches += 1
        try:
            blob = await asyncio.to_thread(self._fetch)
        except (PubguardError, OSError) as exc:
            self.failures += 1
            self.close()
            self._set_state(f"unreachable: {type(exc).__name__}")
            self.check_stale()
            return None
        v = self.take(blob)
        self.check_stale()
        return v

    async def run(self) -> None:
        """Poll until cancelled."""
        try:
            while True:
                await self.poll_once()
                await asyncio.sleep(self.source.poll)
        finally:
            self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
