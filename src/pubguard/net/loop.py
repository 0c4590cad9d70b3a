"""The event loop a pubguard process runs on: uvloop when it is installed, else asyncio's own.

Theory of operation
-------------------
Most of a network event's CPU time is per socket operation, not per message (docs/network.md:
a TLS record, a system call and a loop wake-up for every chunk a link reads or writes). uvloop
(libuv, with its TLS transport in Cython) runs the same asyncio protocols and transports with
less Python per operation; measured on this project's plain network it cuts the CPU per event
summed over the broker, publisher and subscriber processes by about an eighth to a sixth
(docs/network.md, "Performance"). Nothing in pubguard depends on it: :func:`run` uses it only
when it is importable and ``PUBGUARD_UVLOOP`` is not ``0``, so the behaviour (and every test)
is the same on either loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["ENV", "loop_factory", "run", "watch_parent"]

ENV = "PUBGUARD_UVLOOP"  # "0": use asyncio's loop even when uvloop is installed
T = TypeVar("T")


def loop_factory() -> Any:
    """``uvloop.new_event_loop`` when uvloop is importable and not switched off, else None
    (asyncio's default loop)."""
    if os.environ.get(ENV, "1") == "0":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_factory` picks."""
    factory = loop_factory()
    if factory is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def watch_parent(parent_pid: int, stop: asyncio.Event, poll: float = 0.5) -> None:
    """Set ``stop`` once this process's parent is no longer ``parent_pid`` (a service started
    by a cluster or a test stops with the program that started it)."""
    while os.getppid() == parent_pid:
        await asyncio.sleep(poll)
    stop.set()
