"""The broker server's periodic upkeep: subscription leases that end, and link liveness.

Theory of operation
-------------------
Every ``heartbeat_interval / 2`` seconds :class:`Upkeep` (a collaborator owned by
:class:`~pubguard.net.server.server.BrokerServer`):

- asks the core for the subscriptions whose permit ran out (``Broker.expire``): a broker stops
  routing for a subscription whose token is no longer valid (narada-secure-delivery.txt §IV-H4);
  the withdrawals are applied, persisted and sent at once, not with later input;
- gives each attached link that sent nothing for ``heartbeat_interval`` a heartbeat, and closes
  a link silent for ``heartbeat_timeout`` (its peer reconnects and resends from the
  acknowledged sequence number). Both ends run this, so a dead TCP connection that no write
  would notice is found within ``heartbeat_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from pubguard.broker.core import Broker
from pubguard.net.server.batching import BatchProcessor
from pubguard.net.server.links import Link
from pubguard.wire import envelope

__all__ = ["Upkeep"]

log = logging.getLogger("pubguard.net.server")


class Upkeep:
    """Lease expiry and heartbeats for the broker ``name`` (see the module docstring):
    ``links`` are the server's links by id (read only), ``batches`` applies and flushes what
    the core returns."""

    def __init__(
        self,
        name: str,
        core: Broker,
        links: Mapping[str, Link],
        batches: BatchProcessor,
        *,
        heartbeat_interval: float,
        heartbeat_timeout: float,
    ) -> None:
        self.name = name
        self.core = core
        self.links = links
        self.batches = batches
        self.interval = heartbeat_interval
        self.timeout = heartbeat_timeout

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            await asyncio.sleep(self.interval / 2)
            self.tick()

    def tick(self) -> None:
        expired = self.core.expire(time.time())  # subscriptions whose permit ran out
        if expired:
            log.info("broker %s: subscription leases ended; %d actions", self.name, len(expired))
            self.batches.apply(expired)
            self.batches.flush()  # persist and send the withdrawals now, not with later input
        now = time.monotonic()
        for link in list(self.links.values()):
            w = link.writer
            if w is None:
                continue
            if now - link.last_rx > self.timeout:
                log.warning(
                    "broker %s: %s silent for %.1fs, closing",
                    self.name,
                    link.link_id,
                    now - link.last_rx,
                )
                w.close()
            elif now - link.last_tx > self.interval:
                link.send_control(envelope.heartbeat())
