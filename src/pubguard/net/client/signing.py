"""Batch signing of a client's publications without the caller batching (amortised signing).

Theory of operation
-------------------
With a scheme that signs Merkle roots (its ``merkle_batches`` hook: psguard, default,
eventguard) and ``batch_sign`` on, :meth:`~pubguard.net.client.client.Client.publish` protects
each event at once (``prepare_event``: encryption, tokens, typed errors for a bad event) and
leaves it unsigned in a :class:`BatchSigner`. The client signs the pending batch (``take``:
one Merkle root per run of one profile, ``sign_prepared``) when the event loop next runs its
callback, when the batch holds ``max_batch`` events, or before any other message is sent, so
messages keep their order. The signer does no I/O and sends nothing: it returns the wire
messages and the client queues them.
"""

from __future__ import annotations

import itertools
from typing import Any

from pubguard.schemes.base import ClientScheme
from pubguard.wire.messages import publish_wire

__all__ = ["BatchSigner"]


class BatchSigner:
    """Prepared, unsigned publications, and how they become signed wire messages."""

    def __init__(self, scheme: ClientScheme, max_batch: int) -> None:
        self.scheme, self.max_batch = scheme, max_batch
        self.pending: list[tuple[Any, str]] = []  # (prepared event, profile), unsigned
        #: a callback to sign the batch is due in this loop iteration
        self.scheduled = False
        self.batches = 0  # Merkle batches signed

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, prepared: Any, profile: str) -> bool:
        """Hold ``prepared`` for the next batch; True when the batch is full."""
        self.pending.append((prepared, profile))
        return len(self.pending) >= self.max_batch

    def take(self, now: float) -> list[tuple[str, dict[str, Any]]]:
        """Sign the pending publications, in order, one Merkle root per run of one profile:
        ``(event id, publish message)`` each."""
        if not self.pending:
            return []
        self.scheduled = False
        pending, self.pending = self.pending, []
        out: list[tuple[str, dict[str, Any]]] = []
        for prof, run in itertools.groupby(pending, key=lambda p: p[1]):
            self.batches += 1
            for pe in self.scheme.sign_prepared([p for p, _ in run], now=now):
                out.append(
                    (pe.event_id, publish_wire(pe.event_id, prof, pe.routing, pe.body, pe.meta))
                )
        return out
