"""The subscribers of ``pubguard bench network`` in a process of their own.

Theory of operation
-------------------
One asyncio loop running the publisher *and* 32 subscribers is itself the bottleneck of the
benchmark: a subscriber's per-delivery work (a TLS read, frame decoding, the delivery's
validation, the handler) costs as much as the broker's routing of the event. So the bench forks
one child process that runs every subscriber (:class:`RemoteSubscribers`); the publisher, the
observer and the brokers' status polling stay in the parent. The method is the same for plain
and every profile (the child takes the subscriber schemes built in the parent, with their keys).

Latency is publish-to-delivery: the parent notes ``time.perf_counter()`` when it hands an event
to its client, the child when the subscriber's handler receives it; on Linux both read
``CLOCK_MONOTONIC``, one clock for every process of the machine, so the difference is exact.
Arrival times are joined with send times by event id after each step.

The parent drives the child over a pipe (never a thread: the parent waits for replies with
``loop.add_reader``): ``begin`` clears and starts recording, ``collect`` waits until the
expected number of deliveries arrived (or a timeout) and returns ``(event_id, arrival)`` pairs
in arrival order, ``close`` disconnects the subscribers and ends the child. A child whose parent
vanished sees EOF on the pipe and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Final

from pubguard.errors import TransportError
from pubguard.net import gc_tuning
from pubguard.net import loop as io_loop

if TYPE_CHECKING:
    from pubguard.net.client.client import Client, Delivery
    from pubguard.ops.cluster import LocalCluster

__all__ = ["REPLY_TIMEOUT", "RemoteSubscribers", "SubscriberSpec"]

REPLY_TIMEOUT: Final = 120.0  # seconds the parent waits for the child's answer
SubscriberSpec = tuple[str, str, str, Any]  # (leaf broker, identity, filter, client scheme)


class RemoteSubscribers:
    """Parent side: start the subscriber process, then ``begin`` / ``collect`` per step."""

    def __init__(self, cluster: LocalCluster, specs: list[SubscriberSpec]) -> None:
        self.cluster, self.specs = cluster, specs
        self._conn: Connection | None = None
        self._proc: Any = None
        self.count = 0  # deliveries received in the last collected step

    async def start(self) -> None:
        for _, name, _, _ in self.specs:
            self.cluster.pki.identity(name)  # certificates issued here, not raced in the child
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_child_main,
            args=(self.cluster, self.specs, child),
            daemon=True,
            name="bench-subscribers",
        )
        self._proc.start()
        child.close()
        self._conn = parent
        reply = await self._recv()
        if reply[0] != "ready":
            raise TransportError(f"subscriber process failed: {reply[1]}")

    @property
    def pid(self) -> int:
        """The subscriber process's id (its CPU time is read from ``/proc``)."""
        if self._proc is None or self._proc.pid is None:
            raise TransportError("subscriber process not running")
        return int(self._proc.pid)

    async def begin(self) -> None:
        await self._ask(("begin",))

    async def collect(self, expected: int, timeout: float) -> list[tuple[str, float]]:
        """Arrivals recorded since :meth:`begin` (in arrival order), once ``expected``
        deliveries arrived or ``timeout`` passed."""
        reply = await self._ask(("collect", expected, timeout))
        self.count = reply[1]
        return reply[2]  # type: ignore[no-any-return]

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.send(("close",))
                await asyncio.wait_for(self._wait_readable(conn), 10)
                conn.recv()
            conn.close()
        if self._proc is not None:
            deadline = time.monotonic() + 5
            while self._proc.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # polled: no thread in a process that forks
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
            self._proc = None

    async def _ask(self, cmd: tuple[Any, ...]) -> tuple[Any, ...]:
        if self._conn is None:
            raise TransportError("subscriber process not running")
        self._conn.send(cmd)
        reply = await self._recv()
        if reply[0] == "error":
            raise TransportError(f"subscriber process: {reply[1]}")
        return reply

    async def _recv(self) -> tuple[Any, ...]:
        conn = self._conn
        assert conn is not None
        try:
            await asyncio.wait_for(self._wait_readable(conn), REPLY_TIMEOUT)
            return conn.recv()  # type: ignore[no-any-return]
        except (TimeoutError, EOFError, OSError) as exc:
            raise TransportError(f"subscriber process did not answer: {exc!r}") from None

    @staticmethod
    async def _wait_readable(conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        fd = conn.fileno()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, ready)
        try:
            await fut
        finally:
            loop.remove_reader(fd)
            os.set_blocking(fd, True)  # uvloop's add_reader makes the pipe non-blocking


# -- the child --------------------------------------------------------------------------------


class _Arrivals:
    """The subscribers' handler: counts deliveries and notes arrival times while recording."""

    def __init__(self) -> None:
        self.items: list[tuple[str, float]] = []
        self.count = 0
        self.recording = False

    def __call__(self, d: Delivery) -> None:
        self.count += 1
        if self.recording:
            self.items.append((str(d.event.id), time.perf_counter()))


def _child_main(cluster: LocalCluster, specs: list[SubscriberSpec], conn: Connection) -> None:
    io_loop.run(_child(cluster, specs, conn))  # uvloop when installed (net/loop.py)


async def _child(cluster: LocalCluster, specs: list[SubscriberSpec], conn: Connection) -> None:
    sink = _Arrivals()
    subs: list[Client] = []
    try:
        for leaf, name, text, scheme in specs:
            c = await cluster.connect(leaf, name, window=8192, scheme=scheme)
            subs.append(c)
            await c.subscribe(text, handler=sink, max_pending=1 << 20)
        for c in subs:
            await c.flush()
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    # a dedicated process from here on, as a broker is (net/gc_tuning.py): the arrivals it
    # records would otherwise make the collector walk them again and again
    gc_tuning.tune_for_server()
    conn.send(("ready",))
    try:
        while True:
            await RemoteSubscribers._wait_readable(conn)
            try:
                cmd = conn.recv()
            except EOFError:
                return  # the parent is gone
            if cmd[0] == "begin":
                sink.items, sink.count, sink.recording = [], 0, True
                conn.send(("ok",))
            elif cmd[0] == "collect":
                expected, timeout = cmd[1], cmd[2]
                deadline = time.monotonic() + timeout
                while sink.count < expected and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
                await asyncio.sleep(0)  # handlers already scheduled run first
                sink.recording = False
                items, sink.items = sink.items, []
                conn.send(("ok", sink.count, items))
            else:
                conn.send(("ok",))
                return
    finally:
        for c in subs:
            with contextlib.suppress(Exception):
                await c.close()
