"""Multi-path routing on the network: every broker process serves all ``ind`` relabelled trees.

Theory of operation
-------------------
eventguard.txt §5.2 and psguard.txt §4.2.1 add edges to the broker tree so that every
subscriber has ``ind`` independent paths from the publisher (Claims 5.3 / 4.3). Routing on them
uses the ``ind`` relabelled spanning trees ``T_0 .. T_{ind-1}`` of G^ind
(:mod:`pubguard.overlay.multipath`), and each tree keeps its *own* subscription and
advertisement state (a subscription set up on ``T_1`` must not pull events sent on ``T_0``).

:class:`MultiPathCluster` is a :class:`~pubguard.ops.cluster.LocalCluster` of the configured
tree (``[topology] ind`` in the cluster config, ``pubguard cluster up``) whose brokers each
serve every tree in **one process** (:mod:`pubguard.net.server.multitree`): node ``n`` has its
``T_0`` state and ``broker.toml`` in ``<state>/n`` as any broker, and its state in ``T_k`` in
``<state>/tree<k>/n``, with ``T_k``'s parent and children; its ``broker.toml`` lists the
others (``trees = [...]``), so ``pubguard broker --config`` and ``cluster restart`` bring the
node back on every tree. Each tree's links are mutual-TLS connections of their own (to the
tree's own port), so the extra G^ind edges are exactly the tree links of ``T_1 ..``. All
trees share the CA, the identities and the key bundle, so a secure profile's keys are valid on
every path. Covering, durability and catch-up work per tree because each tree is served by an
ordinary broker core with its own state.

Clients (:class:`MultiPathClient`) hold one connection per tree: to the publisher's broker
(the root) on every tree, and for a subscriber whose home is the leaf position ``L`` to
``sigma_k(L)`` on ``T_k`` (the subscriber's own ``ind`` edges):

- *eventguard* (§5.2, "each message is multicast along all ind independent paths"):
  :meth:`MultiPathClient.publish` with ``paths=None`` sends on every tree, and the subscriber
  keeps the first copy of each event id (:class:`MultiPathSubscription`);
- *psguard / default* (psguard.txt §4.2): token ``t`` is set up on
  ``ind_t = clamp(round(tau * lambda_t), 1, ind_max)`` trees
  (:func:`~pubguard.overlay.resilient.ind_for_frequencies`; ``subscribe(..., paths=ind_t)``),
  and each event of ``t`` takes one of them, chosen uniformly (``publish(..., paths=ind_t)``).
  Setting up on the extra trees is the construction cost of psguard.txt Fig. 8; routing an
  event costs one tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from random import Random
from typing import Any, Final

from pubguard.errors import ConfigError, StateError, TransportError, ValidationError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.client.client import Client
from pubguard.net.client.subscription import Delivery, Subscription
from pubguard.net.config import ClusterConfig
from pubguard.net.server.server import read_port
from pubguard.ops.cluster import START_TIMEOUT, LocalCluster
from pubguard.overlay.multipath import relabel_map, spanning_trees
from pubguard.overlay.tree import Tree, tree_from_edges
from pubguard.schemes.registry import KeyBundle

__all__ = [
    "DEDUP_WINDOW",
    "MultiPathClient",
    "MultiPathCluster",
    "MultiPathSubscription",
    "cluster_for",
]

#: event ids a multi-path subscription remembers to drop later copies (oldest forgotten first);
#: copies of one event arrive within one dissemination, far fewer than this apart
DEDUP_WINDOW: Final = 65_536


def cluster_for(config: ClusterConfig, **kw: Any) -> LocalCluster:
    """The cluster ``pubguard cluster up`` runs: multi-path when ``[topology] ind > 1``."""
    return MultiPathCluster(config, **kw) if config.ind > 1 else LocalCluster(config, **kw)


class MultiPathCluster(LocalCluster):
    """A local cluster whose broker processes serve the ``ind`` relabelled spanning trees of
    the configured tree's G^ind (see the module docstring). The inherited API is tree
    ``T_0``'s (status, ports, ``connect``); :meth:`view` is ``T_k``'s."""

    def __init__(self, config: ClusterConfig, ind: int | None = None, **kw: Any) -> None:
        ind = config.ind if ind is None else ind
        if kw.get("in_process"):
            raise ConfigError("a multi-path cluster runs its brokers as processes", key="ind")
        #: the configured tree: the positions, and T_0
        self.tree: Tree = tree_from_edges(config.edges, nodes=config.brokers)
        try:
            self.trees = spanning_trees(self.tree, ind)
        except ValidationError as exc:
            raise ConfigError(f"[topology] ind = {ind}: {exc}", key="topology.ind") from None
        super().__init__(dataclasses.replace(config, ind=ind), **kw)
        self.ind = ind
        self.sigma = [relabel_map(self.tree, k) for k in range(ind)]
        #: T_1 ..: config writers and client views of the same processes (they run none);
        #: made with the configs, when the key bundle they share exists
        self.extra: list[LocalCluster] = []

    def _tree_cluster(self, k: int, bundle: KeyBundle | None) -> LocalCluster:
        tk = self.trees[k]
        cfg = dataclasses.replace(
            self.config,
            state_dir=self.state_dir / f"tree{k}",
            edges=tuple(tk.edges),
            brokers=tk.nodes,
            keyservice=None,
            ind=1,
        )
        # every tree polls T_0's key service for its revocation list: a revoked key is
        # refused on every path, not only on T_0
        return LocalCluster(
            cfg,
            pki=self.pki,
            bundle=bundle,
            revocation_dir=self.state_dir if self.revocation_wired else None,
            revocation_poll=self.revocation_poll,
        )

    def view(self, k: int) -> LocalCluster:
        """Tree ``T_k``: ports, status and client connections of that tree."""
        if not 0 <= k < self.ind:
            raise ValidationError(f"tree must be in 0 .. {self.ind - 1}")
        if k and not self.extra:
            raise StateError("the trees exist once the cluster started")
        return self if k == 0 else self.extra[k - 1]

    def write_configs(self) -> None:
        """Every node's ``broker.toml`` on ``T_0`` (listing its trees) and on each ``T_k``."""
        super().write_configs()
        bundle = self.bundle if self.secure else None  # one key bundle for all trees
        self.extra = [self._tree_cluster(k, bundle) for k in range(1, self.ind)]
        for sub in self.extra:
            sub.write_configs()
            for name in self.config.brokers:  # a port file is this run's once it exists
                (sub.broker_dir(name) / "port").unlink(missing_ok=True)
        for name in self.config.brokers:
            paths = [str(sub.config_path(name)) for sub in self.extra]
            text = self.config_path(name).read_text()
            self.config_path(name).write_text(f"trees = {json.dumps(paths)}\n{text}")

    async def start(self) -> None:
        await super().start()
        try:
            deadline = time.monotonic() + START_TIMEOUT
            for sub in self.extra:
                for name in self.config.brokers:
                    sub.ports[name] = await _tree_port(sub, name, deadline)
                await sub.wait_connected()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for sub in self.extra:
            await sub.stop()  # its admin links (it runs no process)
        await super().stop()

    def paths_of(self, leaf: str) -> list[list[str]]:
        """The brokers from the root to the subscriber at ``leaf`` on each tree (Q_k)."""
        return [tk.path_from_root(self.sigma[k][leaf]) for k, tk in enumerate(self.trees)]

    async def connect_paths(
        self, identity: str, *, home: str | None = None, seed: int = 0, **kw: Any
    ) -> MultiPathClient:
        """One connection per tree: at ``sigma_k(home)`` (default: the root, a publisher)."""
        home = home or self.tree.root
        if home not in self.sigma[0]:
            raise ValidationError(f"no broker {home!r}")
        clients: list[Client] = []
        try:
            for k in range(self.ind):
                clients.append(await self.view(k).connect(self.sigma[k][home], identity, **kw))
        except BaseException:
            for cl in clients:
                await cl.close()
            raise
        return MultiPathClient(clients, Random(seed))

    def live(self) -> list[str]:
        """The brokers whose process runs (a killed one is out of every tree)."""
        return [n for n in self.config.brokers if n in self.procs and self.procs[n].poll() is None]

    async def wait_quiescent(self, timeout: float = 30.0, settle: int = 2) -> None:
        """Until no live broker has queued or unprocessed messages on any tree, ``settle``
        polls in a row (killed brokers are skipped: their links stay parked for catch-up)."""
        deadline = time.monotonic() + timeout
        calm = 0
        while calm < settle:
            busy = {}
            for k in range(self.ind):
                view = self.view(k)
                for n in self.live():
                    q = (await view.status(n, timeout=max(deadline - time.monotonic(), 0)))["queue"]
                    if q:
                        busy[f"{n}@T{k}"] = q
            calm = 0 if busy else calm + 1
            if time.monotonic() > deadline:
                raise TransportError(f"network not quiescent after {timeout}s: {busy}")
            await asyncio.sleep(0.02)


async def _tree_port(sub: LocalCluster, name: str, deadline: float) -> int:
    """The port broker ``name`` listens on for ``sub``'s tree (it writes it once listening)."""
    while (port := read_port(sub.broker_dir(name))) is None:
        if time.monotonic() > deadline:
            raise TransportError(f"broker {name} did not listen on {sub.state_dir.name}")
        await asyncio.sleep(0.02)
    return port


class MultiPathSubscription:
    """One filter on several trees; yields each event id once (subscriber-side dedup)."""

    def __init__(self, subs: Sequence[Subscription]) -> None:
        self.subs = list(subs)
        self.duplicates = 0
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._tasks = [asyncio.get_running_loop().create_task(self._pump(s)) for s in self.subs]

    async def _pump(self, sub: Subscription) -> None:
        async for d in sub:
            eid = d.event.id or ""
            if eid in self._seen:
                self.duplicates += 1
                continue
            self._seen[eid] = None
            if len(self._seen) > DEDUP_WINDOW:
                self._seen.popitem(last=False)
            self._queue.put_nowait(d)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def next(self, timeout: float | None = None) -> Delivery:
        return await asyncio.wait_for(self._queue.get(), timeout)

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


class MultiPathClient:
    """A client with one connection per tree (see the module docstring)."""

    def __init__(self, clients: Sequence[Client], rng: Random) -> None:
        self.clients = list(clients)
        self.rng = rng
        self.subscriptions: list[MultiPathSubscription] = []

    def _trees(self, paths: int | None) -> range:
        n = len(self.clients) if paths is None else paths
        if not 1 <= n <= len(self.clients):
            raise ValidationError(f"paths must be in 1 .. {len(self.clients)}")
        return range(n)

    async def subscribe(
        self, f: Filter | str, *, paths: int | None = None
    ) -> MultiPathSubscription:
        """Set ``f`` up on the first ``paths`` trees (all by default)."""
        subs = [await self.clients[k].subscribe(f) for k in self._trees(paths)]
        s = MultiPathSubscription(subs)
        self.subscriptions.append(s)
        return s

    async def advertise(self, f: Filter | str, *, paths: int | None = None) -> None:
        for k in self._trees(paths):
            await self.clients[k].advertise(f)

    async def publish(
        self, event: Event | Mapping[str, Any], *, paths: int | None = None
    ) -> list[int]:
        """``paths=None``: on every tree (eventguard). Else on one of the first ``paths``
        trees, chosen uniformly (psguard.txt §4.2). Returns the trees used."""
        if paths is None:
            trees = list(self._trees(None))
        else:
            trees = [self._trees(paths)[self.rng.randrange(paths)]]
        for k in trees:
            await self.clients[k].publish(event)
        return trees

    async def flush(self) -> None:
        for c in self.clients:
            await c.flush()

    async def close(self) -> None:
        for s in self.subscriptions:
            await s.close()
        for c in self.clients:
            await c.close()
