"""One broker process serving every relabelled spanning tree ``T_0 .. T_{ind-1}`` of G^ind.

Theory of operation
-------------------
eventguard.txt §5.2 (Claim 5.3) and psguard.txt §4.2.1 give every subscriber ``ind``
independent paths. Routing on them uses the ``ind`` relabelled trees of
:mod:`pubguard.overlay.multipath`: a broker ``n`` holds the position ``sigma_k^{-1}(n)`` of
``T_k``, with that tree's parent and children, and each tree keeps its *own* subscription and
advertisement state (a subscription set up on ``T_1`` must not pull events sent on ``T_0``).

The host composes, it does not restructure: it holds one
:class:`~pubguard.net.server.server.BrokerServer` (so one sans-IO
:class:`~pubguard.broker.core.Broker` core, one SQLite state, one catch-up router) per tree,
all on one event loop in one process. Tree ``T_k``'s links are logical links of their own:
each is its own mutual-TLS connection to the tree's own listening port, so frames of two
trees never mix and no envelope field is needed. Durability and catch-up are per tree because
each tree's core keeps its own state under its own ``state_dir``.

A node's ``broker.toml`` is its ``T_0`` configuration; ``trees = [...]`` lists the
``broker.toml`` of the same node in ``T_1 ..`` (``pubguard cluster up`` writes both from
``[topology] ind``). :func:`run_host` runs the host when ``trees`` is set and the ordinary
single-tree broker otherwise, so ``pubguard broker --config`` and a cluster restart bring a
node back on every tree. A process that dies takes the node out of every tree at once, which
is the failure the independent paths are built for (a broker is malicious in all of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from pubguard.errors import ConfigError
from pubguard.net.config import BrokerConfig, load_broker_config
from pubguard.net.server.pidfile import remove_pidfile, write_pidfile
from pubguard.net.server.server import BrokerServer, run_broker

__all__ = ["MultiTreeHost", "load_tree_configs", "run_host"]


def load_tree_configs(config: BrokerConfig) -> list[BrokerConfig]:
    """``config`` (``T_0``) and the configurations its ``trees`` names, checked to be the
    same broker: one name (one certificate) and one host, distinct state folders."""
    out = [config]
    for path in config.trees:
        c = load_broker_config(path)
        if c.trees:
            raise ConfigError(f"{path}: a tree's broker.toml must not list trees", key="trees")
        if c.name != config.name or c.host != config.host:
            raise ConfigError(
                f"{path}: tree of broker {c.name!r} on {c.host}, not {config.name!r} on "
                f"{config.host}",
                key="trees",
            )
        out.append(c)
    dirs = [c.state_dir.resolve() for c in out]
    if len(set(dirs)) != len(dirs):
        raise ConfigError("two trees share a state_dir", key="trees")
    return out


class MultiTreeHost:
    """The ``ind`` broker servers of one node, one per tree (see the module docstring)."""

    def __init__(self, configs: Sequence[BrokerConfig]) -> None:
        if not configs:
            raise ConfigError("a multi-tree host needs at least one tree", key="trees")
        self.name = configs[0].name
        self.servers: list[BrokerServer] = []
        try:
            for c in configs:
                self.servers.append(BrokerServer(c))
        except BaseException:
            for s in self.servers:  # the stores opened so far
                if s.store is not None:
                    s.store.close()
            raise

    @property
    def ind(self) -> int:
        return len(self.servers)

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    async def start(self) -> list[int]:
        """Listen on every tree's port; the ports, in tree order."""
        try:
            for s in self.servers:
                await s.start()
        except BaseException:
            await self.close()
            raise
        return self.ports

    async def close(self) -> None:
        for s in self.servers:
            with contextlib.suppress(Exception):
                await s.close()

    def status(self) -> dict[str, Any]:
        """Each tree's status report (``trees[k]`` is ``T_k``'s)."""
        return {"broker": self.name, "trees": [s.status() for s in self.servers]}


async def run_host(config: BrokerConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run the broker of ``config`` until cancelled: on every tree it lists (``trees``), else
    as the one-tree broker (:func:`~pubguard.net.server.server.run_broker`)."""
    if not config.trees:
        await run_broker(config, ready=ready)
        return
    host = MultiTreeHost(load_tree_configs(config))
    try:
        await host.start()
        write_pidfile(config.state_dir)  # T_0's folder: where `cluster down` looks
        if ready is not None:
            ready.set()
        await asyncio.gather(*(s.serve_forever() for s in host.servers))
    finally:
        await host.close()
        remove_pidfile(config.state_dir)
