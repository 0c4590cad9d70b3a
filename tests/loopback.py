"""Loopback helpers for network tests: an event loop in a thread, and real broker clusters
(the fixtures built on them live in tests/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
import tomllib
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

from pubguard.crypto.x509 import Role
from pubguard.net.config import BrokerConfig, TlsFiles, load_cluster_config, parse_cluster_config
from pubguard.ops.cluster import LocalCluster
from pubguard.ops.pki import ClusterPki
from pubguard.schemes.registry import HOSPITAL, KeyBundle

T = TypeVar("T")

# How long a test waits for something that must happen (a message, a lease lapsing, a
# reconnection). A bound on a wait, never a verdict: under load a step that takes
# milliseconds alone can take seconds, and the test should still pass. Only a thing that
# never happens fails, at this bound.
PATIENCE: Final = 60.0
POLL: Final = 0.05  # seconds between two looks at a condition


def wait_until(
    predicate: Callable[[], T], what: str, *, timeout: float = PATIENCE, every: float = POLL
) -> T:
    """``predicate()`` once it is truthy (polled, with ``time.sleep`` between looks); an
    AssertionError naming ``what`` and the last value if it is not by ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout:g}s (last: {value!r})")
        time.sleep(every)


async def until(
    probe: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    timeout: float = PATIENCE,
    every: float = POLL,
) -> T:
    """The asyncio twin of :func:`wait_until`: ``probe()`` (awaited when it returns an
    awaitable, e.g. a status read) once it is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout:g}s (last: {value!r})")
        await asyncio.sleep(every)


class LoopThread:
    """One asyncio loop running in a daemon thread; ``run(coro)`` waits for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def _cancel_rest() -> None:
            me = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not me]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self.run(_cancel_rest(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def broker_config(tmp: Path, pki: ClusterPki, port: int = 0, name: str = "b0") -> BrokerConfig:
    """One in-process broker's config: state in ``tmp/name``, mutual TLS from ``pki``."""
    i = pki.identity(name, Role.BROKER)
    return BrokerConfig(
        name, tmp / name, port=port, tls=TlsFiles(i.ca_path, i.cert_path, i.key_path)
    )


def start_cluster(aloop: LoopThread, state: Path, *, in_process: bool) -> LocalCluster:
    cluster = LocalCluster(load_cluster_config(None, state_dir=state), in_process=in_process)
    try:
        aloop.run(cluster.start(), timeout=90)
    except BaseException:
        aloop.run(cluster.stop())
        raise
    return cluster


@contextlib.contextmanager
def keyed_cluster(
    aloop: LoopThread, state: Path, toml_text: str, **bundle: Any
) -> Iterator[LocalCluster]:
    """Broker processes from ``toml_text`` serving the security profiles with keys from a
    ``KeyBundle(state / "keys", now=<now>, types=(HOSPITAL,), **bundle)``, started for the
    block and stopped after it (a module fixture's body)."""
    cfg = parse_cluster_config(tomllib.loads(toml_text), base=state)
    bundle.setdefault("now", time.time())
    bundle.setdefault("types", (HOSPITAL,))
    c = LocalCluster(cfg, bundle=KeyBundle(state / "keys", **bundle))
    try:
        aloop.run(c.start(), timeout=90)
        yield c
    finally:
        aloop.run(c.stop(), timeout=60)
