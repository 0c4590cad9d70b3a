"""The ``[hermes]`` table of a cluster configuration (pubguard.schemes.hermes.deployment):
what it accepts, and one precise line for what it does not."""

from __future__ import annotations

import tomllib

import pytest

from pubguard.errors import ConfigError
from pubguard.net.config import parse_cluster_config
from pubguard.ops.demo.police import police_rendezvous, police_toml

BASE = """
[topology]
kind = "edges"
edges = [["isp1", "met1"], ["isp1", "ccs1"]]
[broker]
profiles = ["hermes-attribute"]
[hermes]
owner = "PITO"
type = "Numberplate"
attributes = [["numberplate", "str"], ["location", "str"]]
"""


def test_the_police_toml_parses_into_its_grants() -> None:
    cfg = parse_cluster_config(tomllib.loads(police_toml(police_rendezvous())))
    h = cfg.hermes
    assert h is not None and h.owner == "PITO" and h.etype.name == "Numberplate"
    assert h.readable("ccs1") == ("numberplate",)  # Fig. 1: the CCS reads the plate only
    assert h.readable("met-cam") == ("numberplate", "location", "camera")
    assert h.readable("isp1") == ()  # granted nothing: routes by type id
    assert cfg.brokers[0] == police_rendezvous() == "isp1"  # the tree is rooted there


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('[hermes.grants]\nmet9 = ["*"]', "hermes.grants.met9"),  # no such broker
        ('[hermes.grants]\nmet1 = ["speed"]', "hermes.grants.met1"),  # no such attribute
        ("[hermes.grants]\nmet1 = []", "hermes.grants.met1"),
        ('owner_env = "NOT A NAME"', "hermes.owner_env"),
        ("grace = -1", "hermes.grace"),
        ("colour = 1", "hermes.colour"),
    ],
)
def test_a_bad_hermes_table_names_its_key(extra: str, key: str) -> None:
    text = BASE.replace('type = "Numberplate"', 'type = "Numberplate"\n' + extra)
    if extra.startswith("[hermes.grants]"):
        text = BASE + extra
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(tomllib.loads(text))
    assert exc.value.key == key


def test_attributes_need_a_model_type() -> None:
    bad = BASE.replace('["location", "str"]', '["location", "bytes"]')
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(tomllib.loads(bad))
    assert exc.value.key == "hermes.attributes[1]"
