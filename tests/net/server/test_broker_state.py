"""SQLite broker state (store/broker_state.py): survives reopen, outbox acks, dedup window."""

from __future__ import annotations

from pathlib import Path

from pubguard.store.broker_state import BrokerStore, LinkRow


def test_state_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    s = BrokerStore(path)
    with s.batch():
        s.put_link(LinkRow("p:b0", "parent", "", True, 0, 1))
        s.put("subscriptions", "c:alice\x00s1", {"link": "c:alice", "message": {"x": b"1"}})
        s.put("subscriptions", "c:bob\x00s2", {"link": "c:bob"})
        s.put("subscriptions", "c:alice\x00s3", {"link": "c:alice", "n": [1, 2.5, None]})
        s.delete("subscriptions", "c:bob\x00s2")
        s.put("subscriptions", "c:alice\x00s1", {"link": "c:alice", "v": 2})  # keeps position
        s.put("advertisements", "c:pub\x00a1", {"link": "c:pub"})
        s.outbox_add([("p:b0", 1, b"f1"), ("p:b0", 2, b"f2"), ("p:b0", 3, b"f3")])
        s.set_rx("p:b0", 7)
        s.set_tx("p:b0", 4)
        s.set_meta("port", "7001")
        s.dedup_add(["e1", "e2"])
    s.close()
    s = BrokerStore(path)
    assert s.items("subscriptions") == [
        ("c:alice\x00s1", {"link": "c:alice", "v": 2}),
        ("c:alice\x00s3", {"link": "c:alice", "n": [1, 2.5, None]}),
    ]
    assert s.items("advertisements") == [("c:pub\x00a1", {"link": "c:pub"})]
    assert s.count("subscriptions") == 2 and s.items("forwarded") == []
    assert s.link("p:b0") == LinkRow("p:b0", "parent", "", True, 7, 4)
    assert s.get_meta("port") == "7001" and s.get_meta("nope") is None
    assert s.outbox_ack("p:b0", 2) == 2
    assert s.outbox("p:b0") == [(3, b"f3")]
    assert s.outbox_depths() == {"p:b0": 1}
    assert s.dedup_recent() == ["e1", "e2"]
    s.close()


def test_rollback_leaves_state_untouched(tmp_path: Path) -> None:
    s = BrokerStore(tmp_path / "b.db")
    try:
        with s.batch():
            s.put("subscriptions", "k", {"a": 1})
            raise RuntimeError("crash mid-batch")
    except RuntimeError:
        pass
    assert s.items("subscriptions") == []
    s.close()


def test_forget_link_and_dedup_window() -> None:
    s = BrokerStore(None)
    s.put_link(LinkRow("c:a", "client", "x", False, 3, 2))
    s.outbox_add([("c:a", 1, b"f")])
    s.forget_link("c:a")
    assert s.link("c:a") is None and s.outbox("c:a") == []
    s.dedup_add([f"e{i}" for i in range(10)])
    assert s.dedup_recent(window=3) == ["e7", "e8", "e9"]
    s.close()
