"""The broker server's upkeep of its links: the parent link, dialled by this broker and
redialled with back-off, and heartbeats on every link (a mixin of
:class:`~pubguard.net.server.server.BrokerServer`).

Theory of operation
-------------------
A broker dials its parent (hierarchical topology, eventguard.txt §2.1); while the parent cannot
be reached it retries after ``BACKOFF_MIN`` seconds, doubling up to ``BACKOFF_MAX``; a
connection whose ``hello`` exchange succeeds resets the back-off. The exchange and the read
loop on the connection are the server's (``_parent_session``).

Heartbeats: every ``heartbeat_interval / 2`` seconds each attached link that sent nothing for
``heartbeat_interval`` gets a heartbeat, and a link silent for ``heartbeat_timeout`` is closed
(its peer reconnects and resends from the acknowledged sequence number).
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
import time
from collections.abc import Awaitable, Callable
from typing import Final

from pubguard.broker import Action, Broker
from pubguard.errors import TransportError
from pubguard.net.config import BrokerConfig
from pubguard.net.conn import FrameConnection, open_frame_connection
from pubguard.net.server.links import Link
from pubguard.wire import envelope

__all__ = ["BACKOFF_MAX", "BACKOFF_MIN", "HANDSHAKE_TIMEOUT", "ParentLink"]

log = logging.getLogger("pubguard.net.server")

HANDSHAKE_TIMEOUT: Final = 10.0
BACKOFF_MIN: Final = 0.05
BACKOFF_MAX: Final = 2.0


class ParentLink:
    """Parent dialling and heartbeats for a broker server."""

    # provided by BrokerServer
    name: str
    config: BrokerConfig
    links: dict[str, Link]
    ssl_client: _ssl.SSLContext | None
    _closing: bool
    _parent_session: Callable[[Link, FrameConnection], Awaitable[bool]]
    core: Broker
    _apply: Callable[[list[Action]], None]
    _flush_batch: Callable[[], None]

    def _parent_port(self) -> int:
        p = self.config.parent
        assert p is not None
        if p.port is not None:
            return p.port
        assert p.port_file is not None
        try:
            return int(p.port_file.read_text().strip())
        except (OSError, ValueError) as exc:
            raise TransportError(f"parent port file {p.port_file}: {exc}") from None

    async def _dial_parent(self) -> None:
        p = self.config.parent
        assert p is not None
        lid = f"b:{p.name}"
        backoff = BACKOFF_MIN
        while not self._closing:
            link = self.links[lid]
            try:
                conn = await asyncio.wait_for(
                    open_frame_connection(p.host, self._parent_port(), ssl=self.ssl_client),
                    HANDSHAKE_TIMEOUT,
                )
            except (TimeoutError, OSError, _ssl.SSLError, TransportError) as exc:
                log.info("broker %s: cannot reach parent %s: %s", self.name, p.name, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if await self._parent_session(link, conn):
                backoff = BACKOFF_MIN
            await asyncio.sleep(backoff)

    async def _heartbeats(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.heartbeat_interval / 2)
            expired = self.core.expire(time.time())  # subscriptions whose permit ran out
            if expired:
                log.info(
                    "broker %s: subscription leases ended; %d actions", self.name, len(expired)
                )
                self._apply(expired)
                self._flush_batch()  # persist and send the withdrawals now, not with later input
            now = time.monotonic()
            for link in list(self.links.values()):
                w = link.writer
                if w is None:
                    continue
                if now - link.last_rx > cfg.heartbeat_timeout:
                    log.warning(
                        "broker %s: %s silent for %.1fs, closing",
                        self.name,
                        link.link_id,
                        now - link.last_rx,
                    )
                    w.close()
                elif now - link.last_tx > cfg.heartbeat_interval:
                    link.send_control(envelope.heartbeat())
