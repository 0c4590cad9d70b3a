"""pubguard: secure content-based publish/subscribe.

::

    import pubguard

    async with pubguard.connect(url, identity="alice", profile="default",
                                keyservice=ks_url, ssl=ctx) as nc:
        sub = await nc.subscribe("age > 20")
        await nc.publish(pubguard.Event({"age": 30}))
        async for delivery in sub:
            print(delivery.event)

The public API (docs/api.md) is what ``__all__`` names. The client, the model and the TLS
helpers are imported on first use (PEP 562, :mod:`pubguard.lazy`), so ``import pubguard`` (and
the CLI, which imports it first) stays cheap; the errors are light and imported at once.
``__all__`` is complete (tests/test_public_api.py).

Layers (dependencies point downward only, see ARCHITECTURE.md):
cli > ops > net > pipeline > sim > broker > overlay > schemes > keys > store > matching >
crypto > wire > model
"""

import typing

from pubguard.errors import (
    ConfigError,
    DropError,
    DropReason,
    FilterRefusedError,
    FrameError,
    InputError,
    InvalidToken,
    KeyError_,
    LocalError,
    ParseError,
    ProfileNotServedError,
    PubguardError,
    RefusedError,
    RemoteError,
    ReplacedError,
    RevokedError,
    SlowConsumerError,
    StateError,
    TransportError,
    ValidationError,
)
from pubguard.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from pubguard.crypto.x509 import client_ssl_context
    from pubguard.model.events import Event
    from pubguard.model.filters import Filter
    from pubguard.net.client.client import Client
    from pubguard.net.client.profiles import Connecting, connect
    from pubguard.net.client.subscription import Delivery, Subscription

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "connect": "pubguard.net.client.profiles",
    "Connecting": "pubguard.net.client.profiles",
    "Client": "pubguard.net.client.client",
    "Delivery": "pubguard.net.client.subscription",
    "Subscription": "pubguard.net.client.subscription",
    "Event": "pubguard.model.events",
    "Filter": "pubguard.model.filters",
    "client_ssl_context": "pubguard.crypto.x509",
}

__all__ = [
    "Client",
    "ConfigError",
    "Connecting",
    "Delivery",
    "DropError",
    "DropReason",
    "Event",
    "Filter",
    "FilterRefusedError",
    "FrameError",
    "InputError",
    "InvalidToken",
    "KeyError_",
    "LocalError",
    "ParseError",
    "ProfileNotServedError",
    "PubguardError",
    "RefusedError",
    "RemoteError",
    "ReplacedError",
    "RevokedError",
    "SlowConsumerError",
    "StateError",
    "Subscription",
    "TransportError",
    "ValidationError",
    "__version__",
    "client_ssl_context",
    "connect",
]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, __all__)
