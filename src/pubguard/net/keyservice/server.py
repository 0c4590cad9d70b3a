"""The key service's asyncio shell: mutual TLS, length-prefixed frames, one response per request.

Theory of operation
-------------------
The key services (EventGuard's meta-service, narada's topic discovery node, the PSGuard KDC and
the default profile's authority) answer requests in a sans-IO core,
:class:`~pubguard.net.keyservice.core.KeyServiceCore` (the request contract is
:mod:`pubguard.net.keyservice.protocol`). :class:`KeyServiceServer` is the thin shell around
it, as :mod:`pubguard.net.keyservice.kmc_node` is around
:class:`~pubguard.keys.discovery.KmcEndpoint`: one listening socket, mutual TLS 1.3 (the client
certificate must be issued by the project CA), length-prefixed msgpack frames
(:mod:`pubguard.wire.framing`), one response per request, in order. It reads the caller's
identity off the verified certificate (common name, role, serial), the time off ``clock``, and
hands each decoded request to the core.

A frame that cannot be decoded at all gets one ``malformed`` error frame and its connection is
closed, while the server keeps serving every other connection.

With a :class:`~pubguard.net.crl.CrlWatch` (``crl=``; its ``server_context`` is the
``ssl_context``) client certificates are checked against the CA's CRL, reloaded when the file
changes; an expired CRL is logged as an error, every handshake it makes OpenSSL refuse too,
and :meth:`KeyServiceServer.status` (also the ``info`` op's ``health``) reports unhealthy.
:class:`~pubguard.net.keyservice.client.KeyServiceClient` is the blocking client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random as _random
import ssl as _ssl
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from pubguard.crypto.x509 import Certificate
from pubguard.errors import FrameError, ValidationError
from pubguard.net.crl import CrlWatch
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.net.keyservice.protocol import MAX_REQUEST_SIZE
from pubguard.net.tls import peer_identity
from pubguard.wire.framing import FrameDecoder, encode_frame

__all__ = ["IDLE_TIMEOUT", "KeyServiceServer"]

log = logging.getLogger(__name__)

IDLE_TIMEOUT: Final = 300.0  # seconds a connection may stay silent before it is closed


class KeyServiceServer:
    """Serve a :class:`KeyServiceCore` on ``host:port`` behind mutual TLS (``ssl_context``
    from :func:`~pubguard.crypto.x509.server_ssl_context`: client certificates required).
    ``clock`` and ``rng`` feed the core (real time and OS randomness by default)."""

    def __init__(
        self,
        core: KeyServiceCore | HermesKgmCore,
        ssl_context: _ssl.SSLContext,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.time,
        rng: _random.Random | None = None,
        crl: CrlWatch | None = None,
    ) -> None:
        if ssl_context.verify_mode != _ssl.CERT_REQUIRED:
            raise ValidationError("the key service requires client certificates (mutual TLS)")
        self.core, self.ssl, self.host, self.port = core, ssl_context, host, port
        self.clock, self.rng = clock, rng
        self.crl = crl
        self.stats: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._crl_task: asyncio.Task[None] | None = None
        self._links: set[asyncio.StreamWriter] = set()  # open client links, closed by stop()

    def status(self) -> dict[str, Any]:
        """Health and counters: ``healthy`` is false when the CRL the service checks its
        clients against has expired (or no longer loads): every handshake is then refused."""
        out: dict[str, Any] = {"port": self.port, "stats": dict(self.stats), "healthy": True}
        if self.crl is not None:
            out["crl"] = self.crl.status()
            out["healthy"] = out["crl"]["healthy"]
        return out

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("keyservice: listening on %s:%d", self.host, self.port)
        if self.crl is not None:
            self._crl_task = asyncio.get_running_loop().create_task(self.crl.run())
        return self.port

    async def stop(self) -> None:
        if self._crl_task is not None:
            self._crl_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._crl_task
            self._crl_task = None
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
        serial = _peer_serial(sslobj)
        self.stats["connections"] += 1
        dec = FrameDecoder(MAX_REQUEST_SIZE)
        self._links.add(writer)
        try:
            while True:
                data = await asyncio.wait_for(reader.read(65536), IDLE_TIMEOUT)
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
                    resp = self.core.handle(
                        f,
                        peer=cn,
                        peer_role=role,
                        now=self.clock(),
                        rng=self.rng,
                        peer_serial=serial,
                    )
                    writer.write(encode_frame(resp))
                if bad is not None:
                    self.stats["malformed"] += 1
                    log.warning("keyservice: closing link of %s: malformed frame (%s)", cn, bad)
                    writer.write(
                        encode_frame({"id": None, "error": "malformed", "message": str(bad)})
                    )
                    await writer.drain()
                    break
                await writer.drain()
        except (TimeoutError, ConnectionError, _ssl.SSLError, OSError) as exc:
            log.info("keyservice: link of %s ended: %s", cn, type(exc).__name__)
        finally:
            self._links.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _peer_serial(sslobj: Any) -> int | None:
    der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
    return Certificate.from_der(der).serial if der else None
