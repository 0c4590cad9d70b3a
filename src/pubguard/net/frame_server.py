"""A mutual-TLS request/response server: length-prefixed frames in, one response per request.

Theory of operation
-------------------
The key services (:class:`~pubguard.net.keyservice.server.KeyServiceServer`) and the v-CAPS
publisher's registrar (:class:`~pubguard.net.vcaps_registrar.VcapsRegistrarServer`) are thin
shells around sans-IO cores that answer one request with one response. :class:`FrameServer` is
the shell they share: one listening socket, mutual TLS (the context must require client
certificates), length-prefixed msgpack frames (:mod:`pubguard.wire.framing`), one response per
request, in order. It reads the caller's identity off the verified certificate
(:class:`Peer`: common name, role, serial) and hands each decoded request and the peer to
``respond``; what the core needs besides (time, randomness) the owner's ``respond`` adds.

A frame that cannot be decoded at all gets one ``malformed`` error frame (with the decoder's
reason when ``detail``) and its connection is closed, after the responses to the frames before
it; the server keeps serving every other connection. A connection silent for
:data:`IDLE_TIMEOUT` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl as _ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from pubguard.crypto.x509 import Certificate
from pubguard.errors import FrameError, ValidationError
from pubguard.net.tls import peer_identity
from pubguard.wire.framing import FrameDecoder, encode_frame

__all__ = ["IDLE_TIMEOUT", "FrameServer", "Peer"]

log = logging.getLogger(__name__)

IDLE_TIMEOUT: Final = 300.0  # seconds a connection may stay silent before it is closed
_READ: Final = 65536  # bytes per read


@dataclass(frozen=True, slots=True)
class Peer:
    """The caller, from its verified certificate."""

    cn: str
    role: str | None
    serial: int | None


class FrameServer:
    """Serve ``respond(request, peer) -> response`` on ``host:port`` behind mutual TLS.
    ``name`` prefixes the log lines (on ``logger``); ``stats`` counts ``connections`` and
    ``malformed``; ``detail``: whether a ``malformed`` error frame says why."""

    def __init__(
        self,
        respond: Callable[[dict[str, Any], Peer], Any],
        ssl_context: _ssl.SSLContext,
        *,
        name: str,
        max_request: int,
        host: str = "127.0.0.1",
        port: int = 0,
        detail: bool = True,
        logger: logging.Logger | None = None,
    ) -> None:
        if ssl_context.verify_mode != _ssl.CERT_REQUIRED:
            raise ValidationError(f"the {name} requires client certificates (mutual TLS)")
        self.respond, self.ssl, self.name = respond, ssl_context, name
        self.max_request, self.host, self.port, self.detail = max_request, host, port, detail
        self.log = logger or log  # the owner's logger, so its log lines keep their source
        self.stats: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()  # open client links, closed by stop()

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        self.log.info("%s: listening on %s:%d", self.name, self.host, self.port)
        return self.port

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._links):  # each handler then sees its link end and returns
                w.transport.abort()  # (a TLS close_notify would wait for the peer)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sslobj = writer.get_extra_info("ssl_object")
        cn, role = peer_identity(sslobj)
        if cn is None:  # pragma: no cover - the TLS context requires a certificate
            writer.close()
            return
        peer = Peer(cn, role, _peer_serial(sslobj))
        self.stats["connections"] += 1
        dec = FrameDecoder(self.max_request)
        self._links.add(writer)
        try:
            while True:
                data = await asyncio.wait_for(reader.read(_READ), IDLE_TIMEOUT)
                if not data:
                    break
                try:
                    frames = dec.feed(data)
                except FrameError as exc:
                    frames = []
                    bad: FrameError | None = exc
                else:
                    bad = dec.error
                for f in frames:
                    writer.write(encode_frame(self.respond(f, peer)))
                if bad is not None:
                    self.stats["malformed"] += 1
                    self.log.warning(
                        "%s: closing link of %s: malformed frame (%s)", self.name, cn, bad
                    )
                    msg = str(bad) if self.detail else ""
                    writer.write(encode_frame({"id": None, "error": "malformed", "message": msg}))
                    await writer.drain()
                    break
                await writer.drain()
        except (TimeoutError, ConnectionError, _ssl.SSLError, OSError) as exc:
            self.log.info("%s: link of %s ended: %s", self.name, cn, type(exc).__name__)
        finally:
            self._links.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _peer_serial(sslobj: Any) -> int | None:
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    return Certificate.from_der(der).serial if der else None
