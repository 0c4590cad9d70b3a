"""TOML configuration: valid files parse, every mistake names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pubguard.errors import ConfigError
from pubguard.net.config import (
    load_broker_config,
    load_cluster_config,
    parse_broker_config,
    parse_cluster_config,
    tree_edges,
)

GOOD = """
name = "b1"
port = 7002
state_dir = "st/b1"
max_queue = 50
[tls]
ca = "ca.pem"
cert = "b1.pem"
key = "b1.key"
[parent]
name = "b0"
port = 7001
"""


def test_broker_config_parses(tmp_path: Path) -> None:
    p = tmp_path / "broker.toml"
    p.write_text(GOOD)
    cfg = load_broker_config(p)
    assert cfg.name == "b1" and cfg.port == 7002 and cfg.max_queue == 50
    assert cfg.state_dir == tmp_path / "st/b1"
    assert cfg.tls is not None and cfg.tls.ca == tmp_path / "ca.pem"
    assert cfg.parent is not None and (cfg.parent.name, cfg.parent.port) == ("b0", 7001)
    assert cfg.no_catch_up == ()  # every child is caught up unless the operator says
    p.write_text('no_catch_up = ["b3", "nurse-7"]\n' + GOOD)
    assert load_broker_config(p).no_catch_up == ("b3", "nurse-7")


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"tls_enabled": False}, "name"),
        ({"name": "b 1", "tls_enabled": False}, "name"),
        ({"name": "b1", "tls_enabled": False, "port": 70000}, "port"),
        ({"name": "b1", "tls_enabled": False, "port": "7"}, "port"),
        ({"name": "b1"}, "tls"),
        ({"name": "b1", "tls": {"ca": "a", "cert": "b"}}, "tls.key"),
        ({"name": "b1", "tls_enabled": False, "max_queue": 0}, "max_queue"),
        ({"name": "b1", "tls_enabled": False, "durable": 1}, "durable"),
        ({"name": "b1", "tls_enabled": False, "colour": "red"}, "colour"),
        ({"name": "b1", "tls_enabled": False, "parent": {"name": "b0"}}, "parent.port"),
        ({"name": "b1", "tls_enabled": False, "profile": "nope"}, "profile"),
        ({"name": "b1", "tls_enabled": False, "no_catch_up": "b3"}, "no_catch_up"),
        ({"name": "b1", "tls_enabled": False, "no_catch_up": ["b3", ""]}, "no_catch_up[1]"),
        (
            {"name": "b1", "tls_enabled": False, "heartbeat_interval": 5, "heartbeat_timeout": 1},
            "heartbeat_timeout",
        ),
    ],
)
def test_broker_config_errors_name_the_key(data: dict, key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_broker_config(data, path="x.toml")
    assert ei.value.key == key
    assert key in str(ei.value) and "x.toml" in str(ei.value)


def test_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_broker_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_broker_config(bad)


def test_default_cluster_is_a_7_broker_binary_tree(tmp_path: Path) -> None:
    c = load_cluster_config(None, state_dir=tmp_path)
    assert c.brokers == ("b0", "b1", "b2", "b3", "b4", "b5", "b6")
    assert c.parent_of("b3") == "b1" and c.children_of("b0") == ("b1", "b2")
    assert c.parent_of("b0") is None
    assert tree_edges(2, 0) == []


def test_cluster_edges_and_errors() -> None:
    c = parse_cluster_config({"topology": {"kind": "edges", "edges": [["r", "a"], ["a", "b"]]}})
    assert c.brokers == ("r", "a", "b")
    for edges, msg in [
        ([["r", "a"], ["s", "a"]], "two parents"),
        ([["a", "b"], ["b", "a"]], "root"),
        ([["r", "a"], ["a", "b"], ["b", "a"]], "two parents"),
        ([["r"]], "edges\\[0\\]"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            parse_cluster_config({"topology": {"kind": "edges", "edges": edges}})
    with pytest.raises(ConfigError) as ei:
        parse_cluster_config({"topology": {"kind": "tree"}, "broker": {"max_queue": -1}})
    assert ei.value.key == "broker.max_queue"
    c = parse_cluster_config(
        {"topology": {"kind": "tree"}, "brokers": {"b0": {"no_catch_up": ["b2"]}}}
    )
    assert c.settings("b0")["no_catch_up"] == ["b2"] and "no_catch_up" not in c.settings("b1")
    with pytest.raises(ConfigError) as ei:
        parse_cluster_config({"topology": {"kind": "tree"}, "broker": {"no_catch_up": [7]}})
    assert ei.value.key == "broker.no_catch_up[0]"
    with pytest.raises(ConfigError) as ei:
        parse_cluster_config({"topology": {"kind": "ring"}})
    assert ei.value.key == "topology.kind"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "*", "0000:0::0"])
def test_a_wildcard_host_is_refused_where_it_is_set(host: str) -> None:
    """Listening on every interface gives clients no address the broker's certificate
    names: refused in the broker's, the parent link's and the cluster's ``host``."""
    broker = {"name": "b1", "state_dir": "s", "tls_enabled": False}
    with pytest.raises(ConfigError) as e:
        parse_broker_config({**broker, "host": host}, path="b.toml")
    assert e.value.key == "host"
    assert str(e.value) == (
        f"b.toml: host: {host!r} would listen on every interface, but clients verify the "
        "broker's certificate against the address they dial; set host to that address "
        '(e.g. "127.0.0.1")'
    )
    with pytest.raises(ConfigError) as e:
        parse_broker_config({**broker, "parent": {"name": "b0", "host": host, "port": 7001}})
    assert e.value.key == "parent.host"
    with pytest.raises(ConfigError) as e:
        parse_cluster_config({"host": host, "topology": {"kind": "tree", "depth": 0}})
    assert e.value.key == "host" and "every interface" in str(e.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "broker.example", "10.0.0.7"])
def test_a_host_that_names_one_address_is_kept(host: str) -> None:
    cfg = parse_broker_config({"name": "b1", "state_dir": "s", "tls_enabled": False, "host": host})
    assert cfg.host == host


def test_an_empty_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="host: is empty"):
        parse_broker_config({"name": "b1", "state_dir": "s", "tls_enabled": False, "host": " "})
