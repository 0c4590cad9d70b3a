"""The reliable channel on its own, without sockets: two channel instances and a network that
loses and reorders frames, loses, repeats and delays acks, and reconnects between them. A gap
at the receiver closes the connection (what is in flight is lost) and the hellos' ``rx``
resume it, as the broker's links and the client do."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import FrameError, ValidationError
from pubguard.wire.reliable import FIRST_SEQ, ReliableChannel


def test_sequence_numbers_start_at_one_and_are_consecutive() -> None:
    ch: ReliableChannel[str] = ReliableChannel(window=4)
    assert [ch.send(x) for x in "abc"] == [FIRST_SEQ, FIRST_SEQ + 1, FIRST_SEQ + 2]
    assert ch.in_flight == 3 and ch.credit == 1 and ch.unsent == 3


def test_window_limits_what_is_written_ahead_of_the_ack() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=2)
    for i in range(5):
        ch.send(i)
    assert ch.take_writable() == [(1, 0), (2, 1)]
    assert ch.take_writable() == []  # nothing more until an ack
    assert ch.on_ack(1) == 1
    assert ch.take_writable() == [(3, 2)]
    assert ch.on_ack(3) == 2 and ch.take_writable() == [(4, 3), (5, 4)]


def test_duplicate_and_stale_acks_are_harmless() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=8)
    for i in range(4):
        ch.send(i)
    ch.take_writable()
    assert ch.on_ack(3) == 3
    assert ch.on_ack(3) == 0 and ch.on_ack(1) == 0 and ch.on_ack(0) == 0
    assert list(ch.unacked) == [4] and ch.acked == 3


def test_an_ack_for_a_number_never_sent_is_a_frame_error() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=8, label="c:x")
    ch.send(0)
    with pytest.raises(FrameError, match="never sent") as info:
        ch.on_ack(2)
    assert info.value.link == "c:x"


def test_receive_in_order_duplicate_and_gap() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=8, label="b:p")
    assert ch.receive(1) and ch.receive(2)
    assert not ch.receive(2) and not ch.receive(1)  # resent duplicates
    with pytest.raises(FrameError, match=r"sequence gap on b:p: 4 after 2"):
        ch.receive(4)
    assert ch.rx_seq == 2


def test_after_a_reset_the_first_number_is_the_baseline() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=8, rx_seq=9)
    ch.reset_receiver()
    assert ch.receive(40) and ch.receive(41) and ch.rx_seq == 41


def test_ack_owed_once_and_capped() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=8)
    assert ch.ack_owed() is None
    for s in (1, 2, 3):
        ch.receive(s)
    assert ch.unacked_rx == 3
    assert ch.ack_owed(cap=1) == 1  # the later ones are not handed over yet
    assert ch.ack_owed() == 3 and ch.ack_owed() is None and ch.unacked_rx == 0
    ch.receive(4)
    assert ch.announce_rx() == 4 and ch.ack_owed() is None  # a hello told the peer


def test_resume_writes_the_unacked_tail_again() -> None:
    ch: ReliableChannel[str] = ReliableChannel(window=8)
    for x in "abcd":
        ch.send(x)
    assert len(ch.take_writable()) == 4
    ch.resume(2)  # the peer processed a and b before the connection broke
    assert ch.take_writable() == [(3, "c"), (4, "d")]


def test_restart_numbers_a_fresh_session_from_one() -> None:
    ch: ReliableChannel[str] = ReliableChannel(window=8)
    for x in "abc":
        ch.send(x)
    ch.take_writable()
    ch.restart(["x", "c"])
    assert ch.take_writable() == [(1, "x"), (2, "c")] and ch.tx_next == 3


def test_replace_keeps_the_number() -> None:
    ch: ReliableChannel[str] = ReliableChannel(window=8)
    ch.send("a")
    ch.replace(1, "noop")
    assert list(ch.pending()) == [(1, "noop")]
    with pytest.raises(KeyError):
        ch.replace(2, "b")


def test_acked_through() -> None:
    ch: ReliableChannel[int] = ReliableChannel(window=8)
    assert ch.acked_through(0)
    ch.send(0)
    ch.send(1)
    assert not ch.acked_through(1)
    ch.on_ack(1)
    assert ch.acked_through(1) and not ch.acked_through(2)


@pytest.mark.parametrize("window", [0, -1, True, 1.5])
def test_window_must_be_a_positive_integer(window: object) -> None:
    with pytest.raises(ValidationError):
        ReliableChannel(window=window)  # type: ignore[arg-type]


# -- properties: loss, reordering, duplicate and stale acks, reconnect and resume -------------

OPS = st.sampled_from(["send", "write", "deliver", "lose", "ack", "ack_in", "reconnect"])


class _Net:
    """A sender channel, a receiver channel, the frames and acks in flight between them."""

    def __init__(self, window: int, n: int) -> None:
        self.tx: ReliableChannel[int] = ReliableChannel(window=window, label="tx")
        self.rx: ReliableChannel[int] = ReliableChannel(window=window, label="rx")
        self.window, self.n = window, n
        self.produced = 0
        self.wire: list[tuple[int, int]] = []  # frames from tx to rx
        self.acks: list[int] = []  # acks from rx to tx (kept: may arrive again, stale)
        self.consumed: list[int] = []
        self.reconnects = 0

    def check(self) -> None:
        tx = self.tx
        assert tx.in_flight <= self.window  # credit respected
        assert tx.sent_upto - tx.acked <= self.window  # never written past the window
        assert self.consumed == list(range(len(self.consumed)))  # once each, in order

    def send(self) -> None:
        if self.produced < self.n and self.tx.credit > 0:
            self.tx.send(self.produced)
            self.produced += 1

    def reconnect(self) -> None:
        """The connection broke: what was in flight is gone; hellos exchange ``rx``."""
        self.wire.clear()
        self.acks.clear()
        self.tx.resume(self.rx.announce_rx())
        self.reconnects += 1

    def arrive(self, i: int) -> None:
        seq, payload = self.wire.pop(i)
        try:
            fresh = self.rx.receive(seq)
        except FrameError:  # a gap: the receiver closes the connection
            self.reconnect()
            return
        if fresh:
            self.consumed.append(payload)

    def drain(self) -> None:
        """A last connection that loses nothing: everything gets through."""
        self.reconnect()
        for _ in range(10 * self.n + 10):
            self.send()
            self.wire += self.tx.take_writable()
            while self.wire:
                self.arrive(0)
            u = self.rx.ack_owed()
            if u is not None:
                self.tx.on_ack(u)
            self.check()
            if self.produced == self.n and not self.tx.in_flight:
                return
        raise AssertionError("the channel did not drain")


@settings(max_examples=150, deadline=None)
@given(
    window=st.integers(1, 6),
    n=st.integers(0, 25),
    data=st.data(),
)
def test_exactly_once_in_order_across_loss_reordering_and_reconnects(
    window: int, n: int, data: st.DataObject
) -> None:
    net = _Net(window, n)
    for op in data.draw(st.lists(OPS, max_size=120), label="ops"):
        if op == "send":
            net.send()
        elif op == "write":
            net.wire += net.tx.take_writable()
        elif op == "deliver" and net.wire:
            # any frame in flight (reordering) once the receiver has its baseline: until then
            # a connection's first frame is its first (rx 0 takes the first number it sees,
            # which a transport in order guarantees)
            last = len(net.wire) - 1 if net.rx.rx_seq else 0
            net.arrive(data.draw(st.integers(0, last), label="frame"))
        elif op == "lose" and net.wire:
            if net.rx.rx_seq:
                net.wire.pop(data.draw(st.integers(0, len(net.wire) - 1), label="lost"))
            else:  # (before the baseline a loss is a broken connection)
                net.reconnect()
        elif op == "ack":
            u = net.rx.ack_owed()
            if u is not None:
                net.acks.append(u)
        elif op == "ack_in" and net.acks:  # any ack seen, again or late: duplicate, stale
            net.tx.on_ack(net.acks[data.draw(st.integers(0, len(net.acks) - 1), label="ack")])
        elif op == "reconnect":
            net.reconnect()
        net.check()
    net.drain()
    assert net.consumed == list(range(n))
    assert not net.tx.unacked and net.tx.credit == window  # the window drained


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 10), min_size=1, max_size=6),
    window=st.integers(1, 5),
    data=st.data(),
)
def test_both_ends_send_and_receive_on_one_channel_each(
    sizes: list[int], window: int, data: st.DataObject
) -> None:
    """Two channels, each both sender and receiver (a client and a broker link): bursts
    each way, acks piggy-backed at random, a reconnection between bursts."""
    a: ReliableChannel[str] = ReliableChannel(window=window)
    b: ReliableChannel[str] = ReliableChannel(window=window)
    got: dict[str, list[str]] = {"a": [], "b": []}
    sent: dict[str, list[str]] = {"a": [], "b": []}
    for burst, size in enumerate(sizes):
        queue = {
            "a": [f"a{burst}.{i}" for i in range(size)],
            "b": [f"b{burst}.{i}" for i in range(size)],
        }
        for _ in range(20 * size + 20):
            for me, peer, name, other in ((a, b, "a", "b"), (b, a, "b", "a")):
                while queue[name] and me.credit:
                    x = queue[name].pop(0)
                    me.send(x)
                    sent[name].append(x)
                for seq, x in me.take_writable():
                    if peer.receive(seq):
                        got[other].append(x)
                if data.draw(st.booleans(), label="ack now"):
                    u = peer.ack_owed()
                    if u is not None:
                        me.on_ack(u)
            if not (queue["a"] or queue["b"] or a.unacked or b.unacked):
                break
            if not (a.unsent or b.unsent):  # stuck on acks: send the owed ones
                for me, peer in ((a, b), (b, a)):
                    u = peer.ack_owed()
                    if u is not None:
                        me.on_ack(u)
        a.resume(b.announce_rx())  # a reconnection: nothing was lost, nothing is resent
        b.resume(a.announce_rx())
        assert a.take_writable() == [] and b.take_writable() == []
    assert got["b"] == sent["a"] and got["a"] == sent["b"]
    assert not a.unacked and not b.unacked
