"""One broker link as the server sees it: the asyncio-facing shell around a reliable channel.

Theory of operation
-------------------
A :class:`Link` outlives its TCP/TLS connections. Its sequence numbers, unacknowledged
frames, window and receive-side acceptance are a :class:`~pubguard.wire.reliable.ReliableChannel`
(the same one a client drives); the link adds what only a broker needs around it: the
encoded frames kept per message (``outq``, also the durable outbox), the frames enqueued in
the current batch (``new_frames``, persisted before they are written), the ``inbox`` of
reliable messages the server has not processed yet, the connection (``writer``) and the
liveness clocks. At most ``window`` frames are written ahead of the peer's ack, so a peer
never has more than ``window`` unprocessed frames from us; the peer's window bounds the
inbox too (a peer that overruns it is cut off as a flooder). On (re)attachment the frames the
peer has not processed (above its ``rx``) are written again; duplicates are dropped by
sequence number on the other side (``envelope.py``).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Any, Final

from pubguard.net.conn import FrameConnection
from pubguard.wire import envelope
from pubguard.wire.framing import coalesce_pieces, encode_frame, encode_message_frame
from pubguard.wire.reliable import ReliableChannel

__all__ = ["BROKER_WINDOW", "Link"]

BROKER_WINDOW: Final = 4096  # reliable frames in flight per link before we wait for acks


class Link:
    """Per-peer state: a reliable channel of encoded frames, unprocessed input, the
    connection."""

    __slots__ = (
        "chan",
        "durable",
        "inbox",
        "kind",
        "last_rx",
        "last_tx",
        "link_id",
        "new_frames",
        "peer",
        "role",
        "session",
        "slow",
        "writer",
    )

    def __init__(
        self,
        link_id: str,
        kind: str,
        peer: str,
        *,
        role: str,
        durable: bool,
        session: str = "",
        rx_seq: int = 0,
        tx_next: int = 1,
        window: int = BROKER_WINDOW,
    ) -> None:
        self.link_id, self.kind, self.peer, self.role = link_id, kind, peer, role
        self.durable = durable
        self.session = session
        #: sequence numbers, the unacked frames (the outbox) and acceptance of what arrives
        self.chan: ReliableChannel[bytes] = ReliableChannel(
            window=window, tx_next=tx_next, rx_seq=rx_seq, label=link_id
        )
        self.new_frames: list[tuple[int, bytes]] = []  # enqueued in the current batch
        self.inbox: deque[dict[str, Any]] = deque()
        self.writer: FrameConnection | None = None
        self.last_rx = self.last_tx = time.monotonic()
        self.slow = False

    # -- the channel's numbers, as the server and its store read and set them --------------

    @property
    def outq(self) -> OrderedDict[int, bytes]:
        """Encoded frames not yet acknowledged, by sequence number (a store's outbox is
        put back here after a restart)."""
        return self.chan.unacked

    @property
    def rx_seq(self) -> int:
        return self.chan.rx_seq

    @rx_seq.setter
    def rx_seq(self, seq: int) -> None:
        self.chan.rx_seq = seq

    @property
    def tx_next(self) -> int:
        return self.chan.tx_next

    @property
    def window(self) -> int:
        return self.chan.window

    @property
    def connected(self) -> bool:
        return self.writer is not None

    @property
    def depth(self) -> int:
        """Outgoing frames not yet acknowledged (the link's queue)."""
        return self.chan.in_flight

    # -- sending ---------------------------------------------------------------------------

    def enqueue(self, wire: dict[str, Any]) -> None:
        frame = encode_frame(envelope.message(self.chan.tx_next, wire))
        self.new_frames.append((self.chan.send(frame), frame))

    def enqueue_packed(self, packed_msg: bytes) -> None:
        """``enqueue(msg)`` from ``pack(msg)`` (a broker packs a publication once and
        splices it into the frame of every link it goes to)."""
        frame = encode_message_frame(self.chan.tx_next, packed_msg)
        self.new_frames.append((self.chan.send(frame), frame))

    def take_new(self) -> list[tuple[int, bytes]]:
        new, self.new_frames = self.new_frames, []
        return new

    def pump(self) -> int:
        """Write queued frames while the window allows, with one write; returns the bytes
        written (0: nothing was due)."""
        w = self.writer
        if w is None:
            return 0
        items = self.chan.take_writable()
        if not items:
            return 0
        # a run of messages goes as batch frames (envelope.py, ``mb``): one decode per
        # burst at the peer; the stored frames stay one per message (resends, outbox)
        data = b"".join(coalesce_pieces(items, envelope.MAX_BATCH))
        w.write(data)
        self.last_tx = time.monotonic()
        return len(data)

    def on_ack(self, upto: int) -> int:
        """Drop frames up to ``upto`` and write more if the window allows; returns how many
        frames were released."""
        n = self.chan.on_ack(upto)
        self.pump()
        return n

    def send_control(self, env: dict[str, Any]) -> None:
        """An unsequenced envelope (ack, heartbeat, status reply, bye)."""
        w = self.writer
        if w is not None:
            w.write(encode_frame(env))
            self.last_tx = time.monotonic()

    # -- receiving -------------------------------------------------------------------------

    def accept(self, seq: int) -> bool:
        """Receiver side: True for the next message, False for a duplicate; a gap is a
        protocol error (the peer reconnects and resends from our ``rx_seq``). After a reset
        (``rx_seq == 0``) the first sequence seen is the baseline."""
        return self.chan.accept(seq)

    # -- connections -----------------------------------------------------------------------

    def attach(self, writer: FrameConnection, peer_rx: int) -> None:
        """A new connection: the peer has processed everything up to ``peer_rx``."""
        self.writer = writer
        self.last_rx = self.last_tx = time.monotonic()
        self.slow = False
        self.chan.resume(peer_rx)  # everything after it is (re)sent, in order
        self.pump()

    def detach(self) -> FrameConnection | None:
        w, self.writer = self.writer, None
        self.inbox.clear()  # unprocessed and unacknowledged: the peer resends them
        return w

    def info(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "peer": self.peer,
            "connected": self.connected,
            "durable": self.durable,
            "queue": self.depth,
            "inbox": len(self.inbox),
            "rx_seq": self.rx_seq,
            "tx_next": self.tx_next,
        }
