"""A client's withdrawal proofs, fetched without stalling the event loop.

Theory of operation
-------------------
A leaving subscriber or publisher proves its withdrawal with its scheme's hook
(:func:`~pubguard.schemes.base.withdrawal_meta`). EventGuard's hook asks the meta-service for
an unsubscription / unadvertisement permit (eventguard.txt §4.5-4.6: the usb / uab permit, in
exchange for the UST / UAT); with a remote MS that is a round trip through the *blocking*
:class:`~pubguard.net.keyservice.client.KeyServiceClient` (up to its ``CALL_TIMEOUT``). Run
on the loop, a dead MS would stall every coroutine, and ``Client.close()``'s
``asyncio.wait_for(..., WITHDRAW_TIMEOUT)`` could not cut it short (nothing is awaited).

:func:`withdrawal_meta_off_loop` therefore runs such a hook in a worker thread
(``asyncio.to_thread``) when the scheme's ``blocks_on_io`` hook says its key service is
remote: a dead MS stalls only that thread, and a cancelled wait abandons it
(the thread ends at the key service client's own timeout). Hooks run one at a time per scheme
(a ``threading.Lock``), because they pop the scheme's grant lists; the key service client is
itself thread-safe, one request at a time. Every other profile's hook is CPU only (a
signature) and draws on state the publish path updates on the loop thread (the default and
narada profiles' strictly increasing ``(ts, seq)`` stamps), so it stays on the loop: a second
thread there could stamp two messages alike.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Final

from pubguard.model.filters import Filter
from pubguard.schemes.base import ClientScheme, withdrawal_meta

__all__ = ["blocks_on_io", "withdrawal_meta_off_loop"]

#: one withdrawal hook at a time per scheme, when they run in worker threads
_LOCKS: Final[weakref.WeakKeyDictionary[object, threading.Lock]] = weakref.WeakKeyDictionary()


def blocks_on_io(scheme: ClientScheme) -> bool:
    """Whether ``scheme``'s withdrawal hooks make a blocking network call (its declared
    ``blocks_on_io`` hook: EventGuard with a remote meta-service)."""
    return scheme.blocks_on_io


async def withdrawal_meta_off_loop(
    scheme: ClientScheme, hook: str, f: Filter | None, *, now: float
) -> dict[str, Any]:
    """``withdrawal_meta(scheme, hook, f, now=now)``, in a worker thread when the hook blocks
    on the network (:func:`blocks_on_io`), else on the caller's thread."""
    if not blocks_on_io(scheme):
        return withdrawal_meta(scheme, hook, f, now=now)
    lock = _LOCKS.setdefault(scheme, threading.Lock())  # set on the loop thread only

    def fetch() -> dict[str, Any]:
        with lock:
            return withdrawal_meta(scheme, hook, f, now=now)

    return await asyncio.to_thread(fetch)
