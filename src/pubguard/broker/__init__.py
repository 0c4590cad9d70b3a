"""The sans-IO broker core: one routing state machine, its actions and state (ARCHITECTURE.md).

Messages in (from :mod:`pubguard.wire.messages`), actions out: forward, deliver, reply, drop
with a machine-readable reason. The same core runs over TCP (``net/server``) and in the
simulator (``sim``).
"""

from pubguard.broker.actions import Action, DeliverTo, Drop, Forward, Reply, SendAction
from pubguard.broker.core import Broker
from pubguard.broker.covering import ForwardSet
from pubguard.broker.dedup import DEDUP_MAX_IDS, DEDUP_WINDOW_S, DedupWindow
from pubguard.broker.state import BrokerState, MemoryState
from pubguard.schemes.base import LinkInfo, LinkKind

__all__ = [
    "DEDUP_MAX_IDS",
    "DEDUP_WINDOW_S",
    "Action",
    "Broker",
    "BrokerState",
    "DedupWindow",
    "DeliverTo",
    "Drop",
    "ForwardSet",
    "Forward",
    "LinkInfo",
    "LinkKind",
    "MemoryState",
    "Reply",
    "SendAction",
]
