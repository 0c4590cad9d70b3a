"""Profile wiring without sockets: broker / cluster TOML keys and the broker-side registry."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest

from pubguard.errors import ConfigError
from pubguard.net.config import PROFILES, parse_broker_config, parse_cluster_config
from pubguard.net.server.server import schemes_for
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.registry import PROFILES as REGISTRY_PROFILES
from pubguard.schemes.registry import KeyBundle


def test_config_knows_every_registry_profile() -> None:
    assert PROFILES == REGISTRY_PROFILES


def test_broker_config_profiles_keys_domain_record(tmp_path: Path) -> None:
    cfg = parse_broker_config(
        {
            "name": "b1",
            "tls_enabled": False,
            "profiles": ["default", "psguard"],
            "keys": "k.json",
            "domain": "cloud",
            "record": "seen.msgpack",
        },
        base=tmp_path,
    )
    assert cfg.served == ("default", "psguard") and cfg.profile == "default"
    assert cfg.keys == tmp_path / "k.json" and cfg.record == tmp_path / "seen.msgpack"
    assert cfg.domain == "cloud"
    assert parse_broker_config({"name": "b", "tls_enabled": False}).served == ("plain",)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"profiles": ["default"]}, "keys"),  # a secure profile needs public key material
        ({"profile": "psguard"}, "keys"),
        ({"profiles": ["default", "nope"], "keys": "k"}, "profiles[1]"),
        ({"profiles": "default", "keys": "k"}, "profiles"),
        ({"profile": "plain", "profiles": ["default"], "keys": "k"}, "profile"),
        ({"domain": "a b"}, "domain"),
    ],
)
def test_broker_profile_errors_name_the_key(data: dict, key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        parse_broker_config({"name": "b1", "tls_enabled": False, **data}, path="x.toml")
    assert ei.value.key == key and "x.toml" in str(ei.value)


def test_cluster_overrides_and_errors(tmp_path: Path) -> None:
    text = """
publishers = ["hosp"]
[topology]
kind = "edges"
edges = [["h0", "cloud"]]
[broker]
profiles = ["default"]
[brokers.cloud]
domain = "cloud"
record = true
"""
    cfg = parse_cluster_config(tomllib.loads(text), base=tmp_path)
    assert cfg.settings("cloud") == {"profiles": ["default"], "domain": "cloud", "record": True}
    assert cfg.served == ("default",) and cfg.publishers == ("hosp",)
    for bad, key in (
        ({"brokers": {"nope": {}}}, "brokers.nope"),
        ({"brokers": {"cloud": {"record": "yes"}}}, "brokers.cloud.record"),
        ({"broker": {"record": True}}, "broker.record"),
        ({"broker": {"keys": "k.json"}}, "broker.keys"),
        ({"broker": {"profiles": ["nope"]}}, "broker.profiles[0]"),
    ):
        data = tomllib.loads(text)
        data.pop("brokers")
        data.update(bad)
        with pytest.raises(ConfigError) as ei:
            parse_cluster_config(data, path="c.toml", base=tmp_path)
        assert ei.value.key == key, (bad, ei.value.key)


def test_cluster_writes_public_keys_and_broker_files(tmp_path: Path) -> None:
    text = '[topology]\nkind = "edges"\nedges = [["a", "b"]]\n[broker]\nprofiles = ["psguard"]\n'
    cfg = parse_cluster_config(tomllib.loads(text), base=tmp_path)
    c = LocalCluster(cfg)
    c.write_configs()
    for name in ("a", "b"):
        b = tomllib.loads(c.config_path(name).read_text())
        assert b["profiles"] == ["psguard"] and Path(b["keys"]) == c.keys_path
    reg = schemes_for(["psguard"], c.keys_path, state_dir=tmp_path / "a")
    assert reg.profiles == ("psguard",)
    assert "cli" in reg.get("psguard").publishers  # type: ignore[union-attr]


def test_schemes_for_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown profile"):
        schemes_for("nope")
    with pytest.raises(ConfigError) as ei:
        schemes_for(["default"])
    assert ei.value.key == "keys"
    with pytest.raises(ConfigError, match="cannot read"):
        schemes_for(["default"], tmp_path / "missing.json")
    bundle = KeyBundle(tmp_path, now=time.time())
    reg = schemes_for(["plain", "default", "eventguard"], bundle.broker_keys(), now=time.time())
    assert reg.profiles == ("default", "eventguard", "plain")
