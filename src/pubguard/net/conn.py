"""A framed connection as an asyncio ``Protocol``: bytes go straight from ``data_received`` into
the :class:`~pubguard.wire.framing.FrameDecoder` and the decoded envelopes to their consumer.

Theory of operation
-------------------
A link read with a ``StreamReader`` and a task looping on ``await reader.read()`` would pay,
for each chunk that arrived, a buffer copy, a future, a task
wake-up and a coroutine resume on top of the TLS record, and with events fanned out to many
links a chunk is usually one or two frames. :class:`FrameConnection` decodes in the transport's
callback instead and calls the consumer (``on_frames``) synchronously, so a chunk costs one
Python call into the consumer.

The connection keeps the old shape for the code that owns it: the handshake still awaits its
first frames (:meth:`next_frames`, with a timeout), and the owner then awaits :meth:`run`,
which hands every later chunk's envelopes to ``on_frames`` and returns when the peer closes
the connection (or raises what ended it). An exception from the decoder (a malformed frame:
:class:`~pubguard.errors.FrameError`) or from ``on_frames`` stops reading at once (later bytes
are ignored) and is re-raised by :meth:`run`, where the owner logs it, writes its ``bye`` and
closes: one bad link never disturbs the others.

Writing: :meth:`write` is ``transport.write``; the transport calls ``pause_writing`` above its
high-water mark and ``resume_writing`` below the low one, and :meth:`drain` waits while it is
paused (what ``StreamWriter.drain`` did), so a fast writer can be slowed without an unbounded
buffer. The object also answers ``close``, ``is_closing``, ``get_extra_info`` (the peer
certificate for mutual TLS, hermes-encrypted-access-control.txt §2.4) and ``wait_closed`` like
the stream writer it replaces.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from pubguard.wire.framing import FrameDecoder

__all__ = ["FrameConnection", "PeerClosed", "open_frame_connection"]

FramesHandler = Callable[[list[dict[str, Any]]], None]


class PeerClosed(ConnectionError):
    """The peer ended the connection in an orderly way (EOF); an ``OSError`` like a reset."""


class FrameConnection(asyncio.Protocol):
    """One TCP / TLS connection carrying frames (see the module docstring)."""

    def __init__(
        self, on_made: Callable[[FrameConnection], None] | None = None, *, raw: bool = False
    ) -> None:
        self._on_made = on_made  # a server's hook: start serving this connection
        self.transport: asyncio.Transport | None = None
        # raw: a broker's connection keeps each message's bytes (``FrameDecoder``)
        self.decoder = FrameDecoder(raw=raw)
        self.last_rx = time.monotonic()
        self._pending: list[dict[str, Any]] = []
        self._on_frames: FramesHandler | None = None
        self._error: BaseException | None = None
        self._lost = False
        self._lost_exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None  # next_frames / run
        self._closed: asyncio.Future[None] | None = None
        self._paused = False
        self._drainers: list[asyncio.Future[None]] = []

    # -- the asyncio Protocol callbacks --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._closed = asyncio.get_running_loop().create_future()
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        if self._error is not None or self._lost:
            return  # reading stopped: the owner is closing this connection
        self.last_rx = time.monotonic()
        try:
            frames = self.decoder.feed(data)
            handler = self._on_frames
            if handler is None:
                self._pending += frames
            else:
                handler(frames)
            if self.decoder.error is not None:
                raise self.decoder.error  # frames before the bad one were handled
        except Exception as exc:  # noqa: BLE001 - re-raised by run() in the owner's task
            self._stop(exc)
            return
        if self._pending:
            self._wake()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost, self._lost_exc = True, exc
        self._wake()
        if self._closed is not None and not self._closed.done():
            self._closed.set_result(None)
        for f in self._drainers:
            if not f.done():
                f.set_result(None)
        self._drainers.clear()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for f in self._drainers:
            if not f.done():
                f.set_result(None)
        self._drainers.clear()

    # -- for the owner --------------------------------------------------------------------------

    def _stop(self, exc: BaseException) -> None:
        self._error = exc
        t = self.transport
        if t is not None and not t.is_closing():
            try:
                t.pause_reading()
            except (RuntimeError, AttributeError):  # pragma: no cover - already closing
                pass
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _raise_end(self) -> None:
        if self._error is not None:
            raise self._error
        if self._lost:
            exc = self._lost_exc
            if isinstance(exc, OSError):
                raise exc
            raise PeerClosed("peer closed the link")

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def next_frames(self, timeout: float) -> list[dict[str, Any]]:
        """The envelopes decoded so far (at least one), waiting up to ``timeout`` seconds:
        the handshake's read. TimeoutError, or what ended the connection."""
        async with asyncio.timeout(timeout):
            while not self._pending:
                self._raise_end()
                await self._wait()
        frames, self._pending = self._pending, []
        return frames

    async def run(self, on_frames: FramesHandler, first: list[dict[str, Any]]) -> None:
        """Hand ``first`` and then every chunk's envelopes to ``on_frames`` (synchronously,
        from the transport's callback) until the connection ends; raises what ended it
        (:class:`PeerClosed` for an orderly close)."""
        pending, self._pending = first + self._pending, []
        self._on_frames = on_frames
        try:
            on_frames(pending)
        except Exception as exc:  # noqa: BLE001 - raised below like a callback's
            self._stop(exc)
        while True:
            self._raise_end()
            await self._wait()

    # -- the StreamWriter face ------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        t = self.transport
        if t is not None and not t.is_closing():
            t.write(data)

    def close(self) -> None:
        t = self.transport
        if t is not None:
            t.close()

    def is_closing(self) -> bool:
        t = self.transport
        return t is None or t.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        t = self.transport
        return default if t is None else t.get_extra_info(name, default)

    def write_buffer_size(self) -> int:
        t = self.transport
        return 0 if t is None else t.get_write_buffer_size()

    async def drain(self) -> None:
        """Wait while the transport has paused writing (its buffer over the high-water mark)."""
        if self._lost:
            raise ConnectionResetError("connection lost")
        if self._paused:
            f = asyncio.get_running_loop().create_future()
            self._drainers.append(f)
            await f

    async def wait_closed(self) -> None:
        if self._closed is not None:
            await asyncio.shield(self._closed)


async def open_frame_connection(
    host: str, port: int, *, ssl: Any, raw: bool = False
) -> FrameConnection:
    """Dial ``host:port`` (TLS when ``ssl`` is a context) and return the connection
    (``raw``: see :class:`FrameConnection`)."""
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(lambda: FrameConnection(raw=raw), host, port, ssl=ssl)
    return conn
