"""The asyncio shell around the sans-IO cores: mutual-TLS connections, the client library
(``net.client``), the broker process (``net.server``) and the key services
(``net.keyservice``). Wire codecs live below it in :mod:`pubguard.wire`; local clusters,
benches and demos above it in :mod:`pubguard.ops`. See docs/network.md.
"""

from pubguard.net.client.client import Client, Delivery, Subscription, connect, parse_url
from pubguard.net.config import (
    BrokerConfig,
    ClusterConfig,
    load_broker_config,
    load_cluster_config,
)

__all__ = [
    "BrokerConfig",
    "Client",
    "ClusterConfig",
    "Delivery",
    "Subscription",
    "connect",
    "load_broker_config",
    "load_cluster_config",
    "parse_url",
]
