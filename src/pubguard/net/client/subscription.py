"""Subscriptions of the asyncio client: bounded queues, async iteration, handlers.

A :class:`Subscription` buffers at most ``max_pending`` deliveries; beyond that it drops them
and the next read raises :class:`~pubguard.errors.SlowConsumerError` once (nats-py's slow
consumer). With a ``handler`` a task feeds each delivery to it instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from pubguard.errors import PubguardError, SlowConsumerError
from pubguard.model.events import Event
from pubguard.model.filters import Filter

__all__ = ["Delivery", "Handler", "Subscription", "Withdraw"]

log = logging.getLogger("pubguard.net.client")

Handler = Callable[["Delivery"], Awaitable[None] | None]
#: how a subscription withdraws itself (its client's ``unsubscribe``)
Withdraw = Callable[["Subscription"], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event handed to one subscription."""

    event: Event
    sub_id: str


_CLOSED: Final = object()


class Subscription:
    """A live subscription: ``async for delivery in sub``, ``await sub.unsubscribe()``
    (``withdraw``: the client's unsubscribe)."""

    def __init__(
        self,
        withdraw: Withdraw,
        sub_id: str,
        filter: Filter,
        handler: Handler | None,
        max_pending: int,
    ) -> None:
        self._withdraw, self.id, self.filter = withdraw, sub_id, filter
        # key-epoch renewal (pubguard.net.client.renewal): the current generation's id at the brokers,
        # the time it was built for, the epoch end it was renewed past, and the old
        # generations (id, end of their epoch) not yet retired
        self.wire_id = sub_id
        self.generation = 0
        self.built_at = 0.0
        self.renewed_for = float("-inf")
        self.old: list[tuple[str, float]] = []
        self.max_pending = max_pending
        self.received = 0
        self.dropped = 0
        self._items: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._slow = False
        self._closed = False
        self._error: PubguardError | None = None  # why it ended, if not by the caller
        self._task: asyncio.Task[None] | None = None
        if handler is not None:
            self._task = asyncio.get_running_loop().create_task(self._run_handler(handler))

    @property
    def pending(self) -> int:
        return len(self._items)

    def _push(self, item: Any) -> None:
        if item is not _CLOSED:
            if len(self._items) >= self.max_pending:
                self.dropped += 1
                if not self._slow:
                    log.warning("subscription %s: slow consumer, dropping deliveries", self.id)
                self._slow = True
                return
            self.received += 1
        self._items.append(item)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _close(self, error: PubguardError | None = None) -> None:
        """End the iteration: StopAsyncIteration after the buffered deliveries, or ``error``
        (the link ended for good, e.g. :class:`~pubguard.errors.ReplacedError`)."""
        if not self._closed:
            self._closed = True
            self._error = error
            self._push(_CLOSED)

    async def next(self, timeout: float | None = None) -> Delivery:
        """The next delivery; TimeoutError after ``timeout``; StopAsyncIteration when closed,
        or the error that ended the client's link for good (ReplacedError)."""
        if self._slow:
            self._slow = False
            raise SlowConsumerError(
                f"subscription {self.id} dropped {self.dropped} deliveries",
                capacity=self.max_pending,
            )
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, timeout)
            finally:
                self._waiter = None
        item = self._items[0]
        if item is _CLOSED:
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        self._items.popleft()
        return item  # type: ignore[no-any-return]

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Delivery:
        return await self.next()

    async def _run_handler(self, handler: Handler) -> None:
        while True:
            try:
                d = await self.next()
            except StopAsyncIteration:
                return
            except SlowConsumerError as exc:
                log.warning("%s", exc)
                continue
            except PubguardError as exc:  # the link ended for good
                log.warning("subscription %s ended: %s", self.id, exc)
                return
            try:
                r = handler(d)
                if r is not None:
                    await r
            except Exception:  # a handler bug must not kill the subscription
                log.exception("subscription %s: handler failed", self.id)

    async def unsubscribe(self) -> None:
        await self._withdraw(self)
