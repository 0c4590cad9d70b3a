"""The ``[malicious]`` table and the process-side malicious models (net/server/malicious.py):
the simulator's decisions (sim/malicious.py) applied to the actions of a real broker's batches.
The real-process behaviour is in tests/ops/test_multipath.py."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.broker.actions import DeliverTo, Forward, Reply
from pubguard.errors import ConfigError
from pubguard.net.config import parse_broker_config, parse_cluster_config
from pubguard.net.malicious_config import (
    MaliciousSettings,
    malicious_toml,
    parse_malicious,
    status_summary,
)
from pubguard.net.server.malicious import MaliciousModel
from pubguard.net.server.server import BrokerServer
from pubguard.wire.messages import Ack, Deliver, Publish


def _pub(i: int, topic: str = "t", **routing: object) -> Publish:
    return Publish(f"e{i}", "plain", {"topic": topic, **routing})


def _copies(pubs: list[Publish], links: int) -> list[object]:
    """What a broker's core returns for these publications: a forward per child link and a
    delivery, interleaved with a client ack (which no model touches)."""
    out: list[object] = []
    for p in pubs:
        out += [Forward(f"b:c{k}", p) for k in range(links)]
        out += [DeliverTo("c:s", Deliver(p, ("1",))), Reply("c:pub", Ack(p.event_id, "publish"))]
    return out


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('model = "worm"', "malicious.model"),
        ('model = "selective"', "malicious.topics"),
        ('model = "selective"\ntopics = [""]', "malicious.topics"),
        ('model = "selective"\ntopics = ["a"]\nprob = 0.5', "malicious.prob"),
        ('model = "random"\nprob = 1.5', "malicious.prob"),
        ('model = "random"\nseed = 1.5', "malicious.seed"),
        ('model = "eavesdrop"\ntopics = ["a"]', "malicious.topics"),
    ],
)
def test_bad_tables_name_their_key(table: str, key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_broker_config(
            tomllib.loads(f'name = "b1"\ntls_enabled = false\n[malicious]\n{table}')
        )
    assert ei.value.key == key


def test_cluster_sets_it_per_broker_and_writes_it_back() -> None:
    base = 'host = "127.0.0.1"\n[topology]\nkind = "tree"\narity = 2\ndepth = 1\n'
    with pytest.raises(ConfigError) as ei:  # never for every broker at once
        parse_cluster_config(tomllib.loads(base + '[broker.malicious]\nmodel = "eavesdrop"'))
    assert ei.value.key == "broker.malicious"
    with pytest.raises(ConfigError) as ei:
        parse_cluster_config(
            tomllib.loads(base + '[brokers.b1.malicious]\nmodel = "random"\nprob = -1')
        )
    assert ei.value.key == "brokers.b1.malicious.prob"
    cfg = parse_cluster_config(
        tomllib.loads(base + '[brokers.b1.malicious]\nmodel = "random"\nprob = 0.25\nseed = 9'),
        base=Path("/tmp"),
    )
    table = cfg.settings("b1")["malicious"]
    text = 'name = "b1"\ntls_enabled = false\n' + "\n".join(malicious_toml(table))
    assert parse_broker_config(tomllib.loads(text)).malicious == MaliciousSettings(
        "random", prob=0.25, seed=9
    )
    assert "malicious" not in cfg.settings("b2")


def test_selective_drops_listed_topics_and_tokens_only() -> None:
    s = parse_malicious({"model": "selective", "topics": ["x"], "tokens": ["abcd"]}, _fail)
    assert s is not None
    m = MaliciousModel("b1", s)
    pubs = [_pub(0, "x"), _pub(1, "y"), _pub(2, "y", tok=b"\xab\xcd"), _pub(3, "y", tok=["q"])]
    actions = _copies(pubs, 2)
    kept = m.filter(actions)  # type: ignore[arg-type]
    carried = {a.message.event_id for a in kept if isinstance(a, Forward)}
    assert carried == {"e1", "e3"}
    assert sum(isinstance(a, Reply) for a in kept) == 4  # acks are never touched
    assert m.status()["dropped"] == 2 and "dropped 2" in status_summary(m.status())


@given(
    st.integers(0, 2**32),
    st.lists(st.integers(1, 3), min_size=1, max_size=30),
    st.integers(1, 7),
)
def test_random_drop_decides_once_per_publication_however_chunked(
    seed: int, links: list[int], chunk: int
) -> None:
    """eventguard.txt §5: each publication is dropped with probability prob, all its copies
    together; the batch processor's chunking does not change which ones (one draw each)."""
    pubs = [_pub(i) for i in range(len(links))]
    whole = MaliciousModel("b", MaliciousSettings("random", prob=0.5, seed=seed))
    parts = MaliciousModel("b", MaliciousSettings("random", prob=0.5, seed=seed))
    one = whole.filter(_copies(pubs, 2))  # type: ignore[arg-type]
    many: list[object] = []
    for i in range(0, len(pubs), chunk):
        many += parts.filter(_copies(pubs[i : i + chunk], 2))  # type: ignore[arg-type]
    ids = {a.message.event_id for a in one if isinstance(a, Forward)}
    assert ids == {a.message.event_id for a in many if isinstance(a, Forward)}
    for p in pubs:  # all copies of an event, or none
        n = sum(isinstance(a, Forward | DeliverTo) and _eid(a) == p.event_id for a in one)
        assert n in (0, 3)
    assert whole.status()["dropped"] == len(pubs) - len(ids)


def test_eavesdrop_forwards_all_and_counts_distinct_publications() -> None:
    m = MaliciousModel("b", MaliciousSettings("eavesdrop"))
    pubs = [_pub(i, "a" if i % 3 else "b") for i in range(9)]
    actions = _copies(pubs, 2)
    assert m.filter(actions) == actions  # type: ignore[arg-type]
    m.filter(_copies(pubs[:2], 1))  # type: ignore[arg-type]  # the same events again
    st_ = m.status()
    assert st_["publications"] == 9 and st_["tokens"] == {"a": 6, "b": 3}


def test_server_warns_once_and_reports_in_status(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = parse_broker_config(
        tomllib.loads(
            f'name = "b1"\ntls_enabled = false\ndurable = false\nstate_dir = "{tmp_path}"\n'
            '[malicious]\nmodel = "selective"\ntopics = ["x"]'
        )
    )
    with caplog.at_level(logging.WARNING, logger="pubguard.net.server"):
        server = BrokerServer(cfg)
    lines = [r.getMessage() for r in caplog.records if "MALICIOUS" in r.getMessage()]
    assert len(lines) == 1 and "research/test use" in lines[0]
    assert server.status()["malicious"] == {
        "model": "selective",
        "research_use": True,
        "dropped": 0,
        "topics": ["x"],
        "tokens": 0,
    }
    honest = BrokerServer(cfg.with_(malicious=None))
    assert "malicious" not in honest.status()


def _eid(a: object) -> str:
    msg = a.message  # type: ignore[attr-defined]
    return str(msg.event.event_id if isinstance(msg, Deliver) else msg.event_id)


def _fail(key: str, msg: str) -> ConfigError:
    return ConfigError(f"{key}: {msg}", key=key)
