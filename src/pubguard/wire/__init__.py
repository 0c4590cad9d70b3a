"""Pure wire codecs, below every shell: broker messages, the link envelope, frames.

Nothing here does I/O. ``framing`` turns envelopes into length-prefixed MessagePack frames and
back (``FrameDecoder`` is sans-IO, bounded and strict), ``envelope`` builds and checks the
link-level envelopes (hello, message, batch, ack, heartbeat, status, bye), and ``messages``
holds the broker protocol's frozen message classes with their strict decoders. ``reliable``
is the one reliable channel (sequence numbers, cumulative acks, window, credit, resend on
resume) that both the broker's links and the client drive, as h11 drives one ``Connection``
from either role.
"""

from pubguard.wire.framing import MAX_FRAME_SIZE, WIRE_VERSION, FrameDecoder, encode_frame
from pubguard.wire.messages import (
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
)
from pubguard.wire.reliable import ReliableChannel

__all__ = [
    "MAX_FRAME_SIZE",
    "WIRE_VERSION",
    "Ack",
    "Advertise",
    "Deliver",
    "Error",
    "FrameDecoder",
    "Heartbeat",
    "Message",
    "MsgOp",
    "Publish",
    "ReliableChannel",
    "Subscribe",
    "Unadvertise",
    "Unsubscribe",
    "decode_message",
    "encode_frame",
]
