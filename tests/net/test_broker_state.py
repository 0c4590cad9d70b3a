"""SQLite broker state (store/broker_state.py): survives reopen, outbox acks, dedup window."""

from __future__ import annotations

from pathlib import Path

from pubguard.store.broker_state import BrokerState, LinkRow


def test_state_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    s = BrokerState(path)
    with s.batch():
        s.put_link(LinkRow("p:b0", "parent", "", True, 0, 1))
        s.put_subscription("c:alice", "s1", b"m1")
        s.put_subscription("c:bob", "s2", b"m2")
        s.put_subscription("c:alice", "s3", b"m3")
        s.delete_subscription("c:bob", "s2")
        s.put_advertisement("c:pub", "a1", b"adv")
        s.outbox_add([("p:b0", 1, b"f1"), ("p:b0", 2, b"f2"), ("p:b0", 3, b"f3")])
        s.set_rx("p:b0", 7)
        s.set_tx("p:b0", 4)
        s.set_meta("port", "7001")
        s.dedup_add(["e1", "e2"])
    s.close()
    s = BrokerState(path)
    assert s.subscriptions() == [("c:alice", "s1", b"m1"), ("c:alice", "s3", b"m3")]
    assert s.advertisements() == [("c:pub", "a1", b"adv")]
    assert s.link("p:b0") == LinkRow("p:b0", "parent", "", True, 7, 4)
    assert s.get_meta("port") == "7001" and s.get_meta("nope") is None
    assert s.outbox_ack("p:b0", 2) == 2
    assert s.outbox("p:b0") == [(3, b"f3")]
    assert s.outbox_depths() == {"p:b0": 1}
    assert s.dedup_recent() == ["e1", "e2"]
    s.close()


def test_rollback_leaves_state_untouched(tmp_path: Path) -> None:
    s = BrokerState(tmp_path / "b.db")
    try:
        with s.batch():
            s.put_subscription("c:a", "s1", b"m")
            raise RuntimeError("crash mid-batch")
    except RuntimeError:
        pass
    assert s.subscriptions() == []
    s.close()


def test_forget_link_and_dedup_window() -> None:
    s = BrokerState(None)
    s.put_link(LinkRow("c:a", "client", "x", False, 3, 2))
    s.put_subscription("c:a", "s1", b"m")
    s.outbox_add([("c:a", 1, b"f")])
    s.forget_link("c:a")
    assert s.link("c:a") is None and s.subscriptions() == [] and s.outbox("c:a") == []
    s.dedup_add([f"e{i}" for i in range(10)])
    assert s.dedup_recent(window=3) == ["e7", "e8", "e9"]
    s.close()
