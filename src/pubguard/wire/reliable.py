"""One end of a reliable, windowed, resumable link: the sequence and ack logic, without I/O.

Theory of operation
-------------------
Both ends of a link (a broker's :class:`~pubguard.net.server.links.Link`, a client's session)
drive one :class:`ReliableChannel` each, as h11 drives one ``Connection`` for both roles. The
channel never touches a socket or a clock: the shell asks it what to write and tells it what
arrived. It carries an opaque payload per message (the broker keeps encoded frames, the
client its messages and their packed bytes), so it makes no wire bytes itself; the envelopes
are ``envelope.py``'s (``m``/``mb``, ``a``, ``hello``'s ``rx``).

*Send side.* :meth:`~ReliableChannel.send` gives a message the next sequence number (from
``FIRST_SEQ``, consecutive) and keeps it in the *unacked window* until the peer's cumulative
ack covers it (:meth:`~ReliableChannel.on_ack`, envelope ``a``: all ``s <= u`` processed). An
ack at or below one already seen changes nothing (duplicate and stale acks are harmless); an
ack for a number never sent is the peer's protocol error (:class:`~pubguard.errors.FrameError`).
At most ``window`` messages are written ahead of the ack (:meth:`~ReliableChannel.take_writable`:
credit-based flow control, so a peer never holds more than ``window`` unprocessed messages
from us), and :attr:`~ReliableChannel.credit` tells a producer who should wait how many more
fit. Nothing is ever resent on a live connection (TCP/TLS does not lose or reorder frames);
a message is resent only after a reconnection:

*Resumption.* Each ``hello`` carries ``rx``, the highest sequence number its sender has
processed from the peer. :meth:`~ReliableChannel.resume` takes the peer's ``rx``: what it
covers is released, and everything after it is written again, in order (the unacked tail).
A peer that lost the session (a fresh one: ``resumed`` false) knows none of our numbers: the
shell then :meth:`~ReliableChannel.restart`\\ s the channel with the messages that still
matter, numbered again from ``FIRST_SEQ``.

*Receive side.* :meth:`~ReliableChannel.receive` classifies each arriving sequence number:
the next one in order is accepted (``rx_seq`` advances), one at or below ``rx_seq`` is a
duplicate resent after a reconnection (dropped: each hop hands each message on once), and a
gap is a protocol error (the shell closes the connection; the peer reconnects and resends
from our ``rx``). After :meth:`~ReliableChannel.reset_receiver` (a fresh session: the peer's
numbers restarted) the first number seen is the baseline. The receiver owes the peer a
cumulative ack for what it has processed: :meth:`~ReliableChannel.ack_owed` returns the
number to acknowledge (at most a cap, for messages handed over later) once, or None when
the last ack sent already covers it. Reliability is per hop (eventguard.txt §2.1 assumes
reliable links between neighbours; this makes them reliable across reconnections).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Final, Generic, TypeVar

from pubguard.errors import FrameError, ValidationError

__all__ = ["FIRST_SEQ", "SEQ_MAX", "ReliableChannel"]

#: the first sequence number of a session (``envelope.py``: ``s >= 1``); ``rx = 0`` in a hello
#: then means "nothing processed yet", so no number needs a separate flag
FIRST_SEQ: Final = 1
#: the largest sequence number (msgpack's largest signed int, what ``check_envelope`` accepts):
#: at a million messages a second a session would need 290,000 years to run out
SEQ_MAX: Final = 2**63 - 1

T = TypeVar("T")


class ReliableChannel(Generic[T]):
    """Sequence numbers, the unacked window and credit for what we send; acceptance and the
    owed ack for what we receive (see the module docstring). ``label`` names the link in
    errors."""

    __slots__ = (
        "acked",
        "acked_rx",
        "label",
        "rx_seq",
        "sent_upto",
        "tx_next",
        "unacked",
        "window",
    )

    def __init__(
        self, *, window: int, tx_next: int = FIRST_SEQ, rx_seq: int = 0, label: str = ""
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValidationError(f"a reliable channel's window must be >= 1, got {window!r}")
        self.window = window
        self.label = label
        #: messages sent and not yet acknowledged, in sequence order (consecutive numbers)
        self.unacked: OrderedDict[int, T] = OrderedDict()
        self.tx_next = tx_next  # the number the next message sent gets
        self.acked = tx_next - 1  # the highest number the peer acknowledged
        self.sent_upto = tx_next - 1  # the highest number handed out by take_writable
        self.rx_seq = rx_seq  # the highest number received in order
        self.acked_rx = rx_seq  # the highest number we acknowledged (or announced in a hello)

    # -- send side -------------------------------------------------------------------------

    def send(self, payload: T) -> int:
        """Keep ``payload`` as the next message until it is acknowledged; its number."""
        seq = self.tx_next
        if seq > SEQ_MAX:
            raise FrameError("a link ran out of sequence numbers", link=self.label or None)
        self.tx_next = seq + 1
        self.unacked[seq] = payload
        return seq

    def restore(self, seq: int, payload: T) -> None:
        """Put back a message kept across a restart (a durable link's outbox), in order."""
        self.unacked[seq] = payload

    def replace(self, seq: int, payload: T) -> None:
        """Carry ``payload`` under an unacknowledged message's number instead (a withdrawn
        message becomes a no-op: the numbers stay consecutive, the stream gapless)."""
        if seq not in self.unacked:
            raise KeyError(seq)
        self.unacked[seq] = payload

    def pending(self) -> Iterator[tuple[int, T]]:
        """The unacknowledged messages, in order."""
        return iter(self.unacked.items())

    @property
    def in_flight(self) -> int:
        """Messages sent and not yet acknowledged."""
        return len(self.unacked)

    @property
    def credit(self) -> int:
        """How many more messages fit in the window beside those in flight."""
        return max(0, self.window - len(self.unacked))

    @property
    def unsent(self) -> int:
        """Messages numbered but not yet handed out by :meth:`take_writable`."""
        return self.tx_next - 1 - self.sent_upto

    def acked_through(self, seq: int) -> bool:
        """Whether every message up to ``seq`` is acknowledged."""
        un = self.unacked
        return not un or next(iter(un)) > seq

    def take_writable(self) -> list[tuple[int, T]]:
        """The messages to write now: those after the last written, up to ``window`` past
        the peer's ack. They count as written (a lost connection is repaired by
        :meth:`resume`, never by resending on the same one)."""
        un = self.unacked
        if not un:
            return []
        # numbers are consecutive and unacked is in order: the frames to write are looked up
        # directly instead of walking past those written but not yet acknowledged
        limit = min(self.acked + self.window, next(reversed(un)))
        start = self.sent_upto + 1
        if start > limit:
            return []
        self.sent_upto = limit
        return [(s, p) for s in range(start, limit + 1) if (p := un.get(s)) is not None]

    def on_ack(self, upto: int) -> int:
        """The peer processed every message up to ``upto``: release them; how many were
        released. A duplicate or stale ack releases nothing; one for a number never sent is
        a :class:`~pubguard.errors.FrameError`."""
        if upto >= self.tx_next:
            where = f" on {self.label}" if self.label else ""
            raise FrameError(f"ack {upto} for a frame never sent{where}", link=self.label or None)
        return self._release(upto)

    def _release(self, upto: int) -> int:
        un = self.unacked
        n = 0
        while un:
            seq = next(iter(un))
            if seq > upto:
                break
            del un[seq]
            n += 1
        if upto > self.acked:
            self.acked = upto
        return n

    def resume(self, peer_rx: int) -> None:
        """A new connection to a peer that processed everything up to ``peer_rx`` (its
        hello's ``rx``): release that, and write the rest again from there, in order."""
        self._release(peer_rx)
        self.acked = peer_rx
        self.sent_upto = peer_rx

    def restart(self, payloads: Iterable[T]) -> None:
        """The peer started a fresh session: forget the old numbers and send ``payloads``
        as its messages ``FIRST_SEQ, FIRST_SEQ + 1, ...``."""
        self.unacked.clear()
        self.tx_next = FIRST_SEQ
        self.acked = self.sent_upto = FIRST_SEQ - 1
        for p in payloads:
            self.send(p)

    # -- receive side ----------------------------------------------------------------------

    def accept(self, seq: int) -> bool:
        """True for the next message in order, False for a duplicate; a gap is a
        :class:`~pubguard.errors.FrameError`. After a reset (``rx_seq == 0``) the first
        number seen is the baseline. Does not advance ``rx_seq`` (:meth:`receive` does)."""
        rx = self.rx_seq
        if seq <= rx:
            return False
        if rx and seq != rx + 1:
            where = f" on {self.label}" if self.label else ""
            raise FrameError(f"sequence gap{where}: {seq} after {rx}", link=self.label or None)
        return True

    def receive(self, seq: int) -> bool:
        """:meth:`accept` ``seq`` and, if it is new, count it received."""
        if not self.accept(seq):
            return False
        self.rx_seq = seq
        return True

    def reset_receiver(self) -> None:
        """The peer's numbers restarted (a fresh session): take the next as the baseline."""
        self.rx_seq = self.acked_rx = 0

    def announce_rx(self) -> int:
        """``rx_seq`` as a hello tells it: the peer resends what follows, so it counts as
        acknowledged."""
        self.acked_rx = self.rx_seq
        return self.rx_seq

    @property
    def unacked_rx(self) -> int:
        """Messages received since the last ack we sent."""
        return self.rx_seq - self.acked_rx

    def ack_owed(self, cap: int | None = None) -> int | None:
        """The cumulative ack to send now (at most ``cap``: messages after it are not yet
        handed over), counted as sent; None when the last ack already covers it."""
        upto = self.rx_seq if cap is None else min(cap, self.rx_seq)
        if upto <= self.acked_rx:
            return None
        self.acked_rx = upto
        return upto
