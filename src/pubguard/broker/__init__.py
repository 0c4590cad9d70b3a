"""The sans-IO broker core: messages, actions, routing state machine (ARCHITECTURE.md)."""

from pubguard.broker.actions import Action, DeliverTo, Drop, Forward, Reply, SendAction
from pubguard.broker.core import Broker
from pubguard.broker.covering import ForwardSet
from pubguard.broker.dedup import DEDUP_MAX_IDS, DEDUP_WINDOW_S, DedupWindow
from pubguard.broker.state import BrokerState, MemoryState
from pubguard.schemes.base import LinkInfo, LinkKind
from pubguard.wire.messages import (
    KNOWN_OPS,
    MAX_BODY_BYTES,
    MAX_ID_LEN,
    Ack,
    Advertise,
    Deliver,
    Error,
    Heartbeat,
    Message,
    MsgOp,
    Publish,
    Subscribe,
    Unadvertise,
    Unsubscribe,
    decode_message,
    freeze_wire,
    thaw_wire,
)

__all__ = [
    "DEDUP_MAX_IDS",
    "DEDUP_WINDOW_S",
    "KNOWN_OPS",
    "MAX_BODY_BYTES",
    "MAX_ID_LEN",
    "Ack",
    "Action",
    "Advertise",
    "Broker",
    "BrokerState",
    "DedupWindow",
    "Deliver",
    "DeliverTo",
    "Drop",
    "Error",
    "ForwardSet",
    "Forward",
    "Heartbeat",
    "LinkInfo",
    "LinkKind",
    "MemoryState",
    "Message",
    "MsgOp",
    "Publish",
    "Reply",
    "SendAction",
    "Subscribe",
    "Unadvertise",
    "Unsubscribe",
    "decode_message",
    "freeze_wire",
    "thaw_wire",
]
