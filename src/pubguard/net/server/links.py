"""One broker link as the server sees it: a reliable, windowed, resumable channel.

Theory of operation
-------------------
A :class:`Link` outlives its TCP/TLS connections. Outgoing reliable messages get the link's
next sequence number and wait in ``outq`` (encoded frames) until the peer's cumulative ack
covers them; at most ``window`` of them are written ahead of the ack (credit-based flow
control), so a peer never has more than ``window`` unprocessed frames from us. Incoming
reliable messages wait in ``inbox`` until the server processes them; the peer's window bounds
that too (a peer that overruns it is cut off as a flooder). On (re)attachment the frames the
peer has not processed (above its ``rx``) are written again; duplicates are dropped by
sequence number on the other side (``envelope.py``).
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Any, Final

from pubguard.errors import FrameError
from pubguard.net.conn import FrameConnection
from pubguard.wire import envelope
from pubguard.wire.framing import coalesce_frames, encode_frame, encode_message_frame

__all__ = ["BROKER_WINDOW", "Link"]

BROKER_WINDOW: Final = 4096  # reliable frames in flight per link before we wait for acks


class Link:
    """Per-peer state: sequence numbers, unacknowledged frames, unprocessed input."""

    __slots__ = (
        "acked",
        "durable",
        "inbox",
        "kind",
        "last_rx",
        "last_tx",
        "link_id",
        "new_frames",
        "outq",
        "peer",
        "role",
        "rx_seq",
        "sent_upto",
        "session",
        "slow",
        "tx_next",
        "window",
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
        self.rx_seq = rx_seq
        self.tx_next = tx_next
        self.window = window
        self.outq: OrderedDict[int, bytes] = OrderedDict()
        self.new_frames: list[tuple[int, bytes]] = []  # enqueued in the current batch
        self.inbox: deque[dict[str, Any]] = deque()
        self.writer: FrameConnection | None = None
        self.sent_upto = 0
        self.acked = tx_next - 1
        self.last_rx = self.last_tx = time.monotonic()
        self.slow = False

    @property
    def connected(self) -> bool:
        return self.writer is not None

    @property
    def depth(self) -> int:
        """Outgoing frames not yet acknowledged (the link's queue)."""
        return len(self.outq)

    def enqueue(self, wire: dict[str, Any]) -> None:
        seq = self.tx_next
        self.tx_next += 1
        frame = encode_frame(envelope.message(seq, wire))
        self.outq[seq] = frame
        self.new_frames.append((seq, frame))

    def enqueue_packed(self, packed_msg: bytes) -> None:
        """``enqueue(msg)`` from ``pack(msg)`` (a broker packs a publication once and
        splices it into the frame of every link it goes to)."""
        seq = self.tx_next
        self.tx_next += 1
        frame = encode_message_frame(seq, packed_msg)
        self.outq[seq] = frame
        self.new_frames.append((seq, frame))

    def take_new(self) -> list[tuple[int, bytes]]:
        new, self.new_frames = self.new_frames, []
        return new

    def pump(self) -> None:
        """Write queued frames while the window allows."""
        w = self.writer
        outq = self.outq
        if w is None or not outq:
            return
        # sequence numbers are consecutive and outq is in order, so the frames to write are
        # looked up directly instead of walking past those written but not yet acknowledged
        limit = min(self.acked + self.window, next(reversed(outq)))
        start = self.sent_upto + 1
        if start > limit:
            return
        items = [(s, f) for s in range(start, limit + 1) if (f := outq.get(s)) is not None]
        self.sent_upto = limit
        if items:
            # a run of messages goes as batch frames (envelope.py, ``mb``): one decode per
            # burst at the peer; the stored frames stay one per message (resends, outbox)
            w.write(b"".join(coalesce_frames(items, envelope.MAX_BATCH)))
            self.last_tx = time.monotonic()

    def on_ack(self, upto: int) -> int:
        """Drop frames up to ``upto`` and write more if the window allows; returns how many
        frames were released."""
        n = self._release(upto)
        self.pump()
        return n

    def _release(self, upto: int) -> int:
        q = self.outq
        n = 0
        while q:
            seq = next(iter(q))
            if seq > upto:
                break
            del q[seq]
            n += 1
        if upto > self.acked:
            self.acked = upto
        return n

    def accept(self, seq: int) -> bool:
        """Receiver side: True for the next message, False for a duplicate; a gap is a
        protocol error (the peer reconnects and resends from our ``rx_seq``). After a reset
        (``rx_seq == 0``) the first sequence seen is the baseline."""
        if seq <= self.rx_seq:
            return False
        if self.rx_seq and seq != self.rx_seq + 1:
            raise FrameError(f"sequence gap on {self.link_id}: {seq} after {self.rx_seq}")
        return True

    def send_control(self, env: dict[str, Any]) -> None:
        """An unsequenced envelope (ack, heartbeat, status reply, bye)."""
        w = self.writer
        if w is not None:
            w.write(encode_frame(env))
            self.last_tx = time.monotonic()

    def attach(self, writer: FrameConnection, peer_rx: int) -> None:
        """A new connection: the peer has processed everything up to ``peer_rx``."""
        self.writer = writer
        self.last_rx = self.last_tx = time.monotonic()
        self.slow = False
        self._release(peer_rx)
        self.acked = peer_rx
        self.sent_upto = peer_rx  # everything after it is (re)sent, in order
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
