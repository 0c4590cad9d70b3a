"""Multi-path routing on the network: one broker tree per independent path of G^ind.

Theory of operation
-------------------
eventguard.txt §5.2 and psguard.txt §4.2.1 add edges to the broker tree so that every
subscriber has ``ind`` independent paths from the publisher (Claims 5.3 / 4.3). Routing on them
uses the ``ind`` relabelled spanning trees ``T_0 .. T_{ind-1}`` of G^ind
(:mod:`pubguard.overlay.multipath`), and each tree keeps its *own* subscription and
advertisement state (a subscription set up on ``T_1`` must not pull events sent on ``T_0``).
:class:`MultiPathCluster` realises that with unchanged brokers: tree ``T_k`` is a
:class:`~pubguard.ops.cluster.LocalCluster` of its own (state under ``<state>/tree<k>``, its
own broker processes or in-process servers, mutual TLS as every cluster), so broker ``n`` runs
one routing core per tree it is in (all of them), and the extra G^ind edges are exactly the
tree links of ``T_1 ..``. Covering, durability and catch-up work per tree because each tree is
an ordinary cluster. All trees share one key bundle, so a secure profile's keys are valid on
every path.

Clients (:class:`MultiPathClient`) hold one connection per tree: to the publisher's broker
(the root) on every tree, and for a subscriber whose home is the leaf position ``L`` to
``sigma_k(L)`` on ``T_k`` (the subscriber's own ``ind`` edges):

- *eventguard* (§5.2, "each message is multicast along all ind independent paths"):
  :meth:`MultiPathClient.publish` with ``paths=None`` sends on every tree, and the subscriber
  keeps the first copy of each event id (:class:`MultiPathSubscription`);
- *psguard / default* (psguard.txt §4.2): token ``t`` is set up on ``ind_t`` trees
  (``subscribe(..., paths=ind_t)``), and each event of ``t`` takes one of them, chosen
  uniformly (``publish(..., paths=ind_t)``). Setting up on the extra trees is the
  construction cost of psguard.txt Fig. 8; routing an event costs one tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from random import Random
from typing import Any, Final

from pubguard.errors import StateError, ValidationError
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.net.client.client import Client
from pubguard.net.client.subscription import Delivery, Subscription
from pubguard.net.config import ClusterConfig
from pubguard.ops.cluster import LocalCluster
from pubguard.overlay.multipath import relabel_map, spanning_trees
from pubguard.overlay.tree import Tree, tree_from_edges
from pubguard.schemes.registry import KeyBundle

__all__ = ["DEDUP_WINDOW", "MultiPathClient", "MultiPathCluster", "MultiPathSubscription"]

#: event ids a multi-path subscription remembers to drop later copies (oldest forgotten first);
#: copies of one event arrive within one dissemination, far fewer than this apart
DEDUP_WINDOW: Final = 65_536


class MultiPathCluster:
    """``ind`` clusters, one per relabelled spanning tree of the configured tree's G^ind."""

    def __init__(
        self,
        config: ClusterConfig,
        ind: int,
        *,
        in_process: bool = False,
        bundle: KeyBundle | None = None,
    ) -> None:
        self.tree: Tree = tree_from_edges(config.edges, nodes=config.brokers)
        self.ind = ind
        self.trees = spanning_trees(self.tree, ind)  # validates ind <= arity
        self.sigma = [relabel_map(self.tree, k) for k in range(ind)]
        self.clusters = [
            LocalCluster(
                dataclasses.replace(
                    config,
                    state_dir=config.state_dir / f"tree{k}",
                    edges=tuple(tk.edges),
                    brokers=tk.nodes,
                ),
                in_process=in_process,
                bundle=bundle,
            )
            for k, tk in enumerate(self.trees)
        ]

    async def start(self) -> None:
        try:
            for c in self.clusters:
                await c.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for c in self.clusters:
            await c.stop()

    async def blackhole(self, k: int, broker: str) -> None:
        """Take ``broker`` out of tree ``T_k`` only (kill its process, or close its server)."""
        c = self.clusters[k]
        if broker in c.procs:
            c.kill(broker)
        elif broker in c.servers:
            await c.servers.pop(broker).close()
        else:
            raise StateError(f"broker {broker} is not running in tree {k}")

    def paths_of(self, leaf: str) -> list[list[str]]:
        """The brokers from the root to the subscriber at ``leaf`` on each tree (Q_k)."""
        return [tk.path_from_root(self.sigma[k][leaf]) for k, tk in enumerate(self.trees)]

    async def connect(
        self, identity: str, *, home: str | None = None, seed: int = 0, **kw: Any
    ) -> MultiPathClient:
        """One connection per tree: at ``sigma_k(home)`` (default: the root, a publisher)."""
        home = home or self.tree.root
        if home not in self.sigma[0]:
            raise ValidationError(f"no broker {home!r}")
        clients: list[Client] = []
        try:
            for k, c in enumerate(self.clusters):
                clients.append(await c.connect(self.sigma[k][home], identity, **kw))
        except BaseException:
            for cl in clients:
                await cl.close()
            raise
        return MultiPathClient(clients, Random(seed))

    async def wait_quiescent(self) -> None:
        for c in self.clusters:
            await c.wait_quiescent()


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
