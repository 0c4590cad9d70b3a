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
(:mod:`pubguard.wire.framing`), one response per request, in order; that request/response
shell is :class:`~pubguard.net.frame_server.FrameServer`, which the v-CAPS registrar shares.
It reads the caller's identity off the verified certificate (common name, role, serial); this
class adds the time off ``clock``, the ``rng`` and the CRL watch, and hands each decoded request
to the core.

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
from typing import Any

from pubguard.errors import ValidationError
from pubguard.net.crl import CrlWatch
from pubguard.net.frame_server import IDLE_TIMEOUT, FrameServer, Peer
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.net.keyservice.protocol import MAX_REQUEST_SIZE

__all__ = ["IDLE_TIMEOUT", "KeyServiceServer"]

log = logging.getLogger(__name__)


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
        self._frames = FrameServer(
            self._respond,
            ssl_context,
            name="keyservice",
            max_request=MAX_REQUEST_SIZE,
            host=host,
            port=port,
            logger=log,
        )
        self.stats: Counter[str] = self._frames.stats
        self._crl_task: asyncio.Task[None] | None = None

    def status(self) -> dict[str, Any]:
        """Health and counters: ``healthy`` is false when the CRL the service checks its
        clients against has expired (or no longer loads): every handshake is then refused."""
        out: dict[str, Any] = {"port": self.port, "stats": dict(self.stats), "healthy": True}
        if self.crl is not None:
            out["crl"] = self.crl.status()
            out["healthy"] = out["crl"]["healthy"]
        return out

    def _respond(self, request: dict[str, Any], peer: Peer) -> Any:
        return self.core.handle(
            request,
            peer=peer.cn,
            peer_role=peer.role,
            now=self.clock(),
            rng=self.rng,
            peer_serial=peer.serial,
        )

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self.port = await self._frames.start()
        if self.crl is not None:
            self._crl_task = asyncio.get_running_loop().create_task(self.crl.run())
        return self.port

    async def stop(self) -> None:
        if self._crl_task is not None:
            self._crl_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._crl_task
            self._crl_task = None
        await self._frames.stop()

    async def serve_forever(self) -> None:
        if not self._frames.listening:
            await self.start()
        await self._frames.serve_forever()
