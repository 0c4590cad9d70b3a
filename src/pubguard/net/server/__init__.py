"""The broker process: the asyncio server around the sans-IO broker core
(:class:`BrokerServer`), its collaborators (the batch processor, the parent connector, the
upkeep of leases and heartbeats, the revocation watcher) and the ``python -m
pubguard.net.server.main`` entry point (:func:`serve`).

Public names are imported on first use (PEP 562 module ``__getattr__``): importing one
submodule (``links``, ``revocation``) does not load the whole server, no submodule's import
can come back here half-initialised, and ``python -m pubguard.net.server.main`` does not find
its module already imported by the package (runpy would warn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubguard.lazy import lazy_exports

if TYPE_CHECKING:
    from pubguard.net.server.main import serve
    from pubguard.net.server.revocation import RevocationWatcher
    from pubguard.net.server.server import BrokerServer, read_port, run_broker, schemes_for

__all__ = [
    "BrokerServer",
    "RevocationWatcher",
    "read_port",
    "run_broker",
    "schemes_for",
    "serve",
]

_LAZY: dict[str, str] = {
    "BrokerServer": "pubguard.net.server.server",
    "read_port": "pubguard.net.server.server",
    "run_broker": "pubguard.net.server.server",
    "schemes_for": "pubguard.net.server.server",
    "RevocationWatcher": "pubguard.net.server.revocation",
    "serve": "pubguard.net.server.main",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
