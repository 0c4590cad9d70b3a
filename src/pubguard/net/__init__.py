"""net layer: framing, mutual TLS links, the broker server, the client library, local clusters.

See docs/network.md. Heavier modules (server, cluster, bench) are imported on use.
"""

from pubguard.net.client.client import Client, Delivery, Subscription, connect, parse_url
from pubguard.net.config import (
    BrokerConfig,
    ClusterConfig,
    load_broker_config,
    load_cluster_config,
)
from pubguard.wire.framing import MAX_FRAME_SIZE, WIRE_VERSION, FrameDecoder, encode_frame

__all__ = [
    "MAX_FRAME_SIZE",
    "WIRE_VERSION",
    "BrokerConfig",
    "Client",
    "ClusterConfig",
    "Delivery",
    "FrameDecoder",
    "Subscription",
    "connect",
    "encode_frame",
    "load_broker_config",
    "load_cluster_config",
    "parse_url",
]
