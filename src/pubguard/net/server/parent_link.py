"""The link to the parent broker: dialled by this broker over mutual TLS, resumed, redialled with
back-off.

Theory of operation
-------------------
A broker dials its parent (hierarchical topology, eventguard.txt §2.1; the parent never dials
its child, so the tree has one connection per edge and one side that owns reconnecting).
:class:`ParentConnector` is a collaborator owned by
:class:`~pubguard.net.server.server.BrokerServer`: it holds the parent's address, the server's
name and session, the client TLS context and the parent's :class:`~.links.Link`, and it tells
the server what happened through callbacks given at construction, never by touching the
server's fields:

- ``on_reset(link)``: the parent is a new process (another session), so its sequence numbers
  restarted: the link's ``rx_seq`` is back to 0 and the server persists the new session;
- ``on_up(link)``: the parent did not resume our session, so it knows nothing of our
  subscriptions: the server sends them again (``Broker.link_up``);
- ``serve(link, conn, frames)``: the server's read loop on the connection, until it ends;
- ``on_down(link)``: the connection is gone: catch-up routing until it is back.

The session: ``hello`` both ways (ours first, with our session and the last sequence number we
processed, ``rx``); the parent must name itself as configured and, with TLS, carry a
certificate for that name (hermes-encrypted-access-control.txt §2.4 assumes TLS between
brokers). Frames the parent has not processed (above its ``rx``) are written again by
:meth:`~.links.Link.attach`, so a reconnect loses nothing and duplicates nothing.

Back-off: while the parent cannot be reached the connector retries after ``BACKOFF_MIN``
seconds, doubling up to ``BACKOFF_MAX``; a connection whose ``hello`` exchange succeeds resets
the back-off.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pubguard.errors import FrameError, TransportError
from pubguard.net.config import ParentLink
from pubguard.net.conn import FrameConnection, PeerClosed, open_frame_connection
from pubguard.net.server.links import Link
from pubguard.net.tls import peer_identity
from pubguard.wire import envelope
from pubguard.wire.framing import encode_frame

__all__ = ["BACKOFF_MAX", "BACKOFF_MIN", "HANDSHAKE_TIMEOUT", "ParentConnector", "read_hello"]

log = logging.getLogger("pubguard.net.server")

HANDSHAKE_TIMEOUT: Final = 10.0
BACKOFF_MIN: Final = 0.05
BACKOFF_MAX: Final = 2.0

Frames = list[dict[str, Any]]


async def read_hello(conn: FrameConnection) -> tuple[dict[str, Any], Frames]:
    """The peer's ``hello`` (its first frame, within ``HANDSHAKE_TIMEOUT``) and the frames that
    came with it; both ends of a broker link start this way."""
    try:
        frames = await conn.next_frames(HANDSHAKE_TIMEOUT)
    except PeerClosed:
        raise TransportError("peer closed before hello") from None
    if envelope.check_envelope(frames[0]) != "hello":
        raise FrameError("the first frame must be hello")
    return frames[0], frames[1:]


class ParentConnector:
    """Dials ``parent`` for the broker ``name`` and serves the link (see the module docstring).
    ``session``: the broker's session id, sent in its ``hello`` so the parent can resume."""

    def __init__(
        self,
        name: str,
        session: str,
        parent: ParentLink,
        link: Link,
        ssl: _ssl.SSLContext | None,
        *,
        on_reset: Callable[[Link], None],
        on_up: Callable[[Link], None],
        serve: Callable[[Link, FrameConnection, Frames], Awaitable[None]],
        on_down: Callable[[Link], None],
        greeting: Callable[[], list[bytes]] = list,
        on_greeting: Callable[[str, list[bytes]], None] = lambda peer, creds: None,
    ) -> None:
        """``greeting``: the credentials this broker presents in its ``hello``;
        ``on_greeting(peer, creds)``: the parent's (hermes §3.4's handshake)."""
        self.name, self.session = name, session
        self._greeting, self._on_greeting = greeting, on_greeting
        self.parent = parent
        self.link = link
        self.ssl = ssl
        self._on_reset, self._on_up = on_reset, on_up
        self._serve, self._on_down = serve, on_down
        self._stopped = False

    def stop(self) -> None:
        """The server is closing: dial no more (the running task is cancelled by its owner)."""
        self._stopped = True

    def _port(self) -> int:
        p = self.parent
        if p.port is not None:
            return p.port
        assert p.port_file is not None
        try:
            return int(p.port_file.read_text().strip())
        except (OSError, ValueError) as exc:
            raise TransportError(f"parent port file {p.port_file}: {exc}") from None

    async def run(self) -> None:
        """Dial, serve, and redial with back-off until stopped or cancelled."""
        p = self.parent
        backoff = BACKOFF_MIN
        while not self._stopped:
            try:
                conn = await asyncio.wait_for(
                    open_frame_connection(p.host, self._port(), ssl=self.ssl, raw=True),
                    HANDSHAKE_TIMEOUT,
                )
            except (TimeoutError, OSError, _ssl.SSLError, TransportError) as exc:
                log.info("broker %s: cannot reach parent %s: %s", self.name, p.name, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if await self._session(conn):
                backoff = BACKOFF_MIN
            await asyncio.sleep(backoff)

    async def _session(self, writer: FrameConnection) -> bool:
        """``hello`` both ways on a fresh connection to the parent, then the server's read loop
        until the connection ends; True if the exchange succeeded (the back-off resets)."""
        p, link = self.parent, self.link
        greeted = False
        try:
            writer.write(
                encode_frame(
                    envelope.hello(
                        self.name,
                        "broker",
                        self.session,
                        durable=link.durable,
                        rx=link.rx_seq,
                        creds=self._greeting(),
                    )
                )
            )
            hello, rest = await read_hello(writer)
            cn, _ = peer_identity(writer.get_extra_info("ssl_object"))
            if hello["name"] != p.name or (self.ssl is not None and cn != p.name):
                raise TransportError(f"expected parent {p.name!r}, got {hello['name']!r}")
            self._on_greeting(p.name, hello.get("creds", []))
            if hello["session"] != link.session:
                link.rx_seq = 0  # the parent's sequence numbers restarted
                link.session = hello["session"]
                self._on_reset(link)
            link.attach(writer, hello["rx"])
            if not hello.get("resumed", False):
                self._on_up(link)
            greeted = True
            await self._serve(link, writer, rest)
        except (TimeoutError, FrameError, TransportError, OSError, _ssl.SSLError) as exc:
            # OSError includes PeerClosed: an orderly end (EOF, or the parent's bye)
            log.info("broker %s: parent link lost: %s", self.name, exc)
        finally:
            if link.writer is writer:
                self._on_down(link)
            writer.close()
        return greeted
