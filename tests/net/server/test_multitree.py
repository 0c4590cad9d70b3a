"""The multi-tree host's configuration: ``[topology] ind`` and a node's ``trees`` (the
processes themselves run in tests/ops/test_multipath.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from pubguard.errors import ConfigError
from pubguard.net.config import load_broker_config, parse_cluster_config
from pubguard.net.server.multitree import MultiTreeHost, load_tree_configs
from pubguard.ops.multipath import MultiPathCluster, cluster_for


def _cluster(topology: str, tmp_path: Path) -> object:
    return parse_cluster_config(tomllib.loads(f"[topology]\n{topology}"), base=tmp_path)


def test_ind_is_read_and_checked(tmp_path: Path) -> None:
    cfg = parse_cluster_config(
        tomllib.loads('[topology]\nkind = "tree"\narity = 3\ndepth = 1\nind = 3\n'),
        base=tmp_path,
    )
    assert cfg.ind == 3
    assert isinstance(cluster_for(cfg), MultiPathCluster)
    with pytest.raises(ConfigError, match="ind") as e:
        _cluster('kind = "tree"\narity = 2\ndepth = 2\nind = 3\n', tmp_path)
    assert e.value.key == "topology.ind"
    with pytest.raises(ConfigError) as e:
        _cluster('kind = "tree"\nind = 0\n', tmp_path)
    assert e.value.key == "topology.ind"
    edges = 'kind = "edges"\nind = 3\nedges = [["b0", "b1"], ["b1", "b2"], ["b1", "b3"]]\n'
    with pytest.raises(ConfigError, match="needs every inner node") as e:
        MultiPathCluster(parse_cluster_config(tomllib.loads(f"[topology]\n{edges}"), base=tmp_path))
    assert e.value.key == "topology.ind"
    with pytest.raises(ConfigError, match="per broker by the cluster"):
        parse_cluster_config(
            tomllib.loads('[topology]\nkind = "tree"\n[broker]\ntrees = ["x.toml"]\n'),
            base=tmp_path,
        )


def _broker(path: Path, name: str, state: str, trees: list[str] | None = None) -> Path:
    extra = f"trees = {trees!r}\n".replace("'", '"') if trees is not None else ""
    path.write_text(f'{extra}name = "{name}"\nstate_dir = "{state}"\ntls_enabled = false\n')
    return path


def test_a_nodes_trees_must_be_the_same_broker(tmp_path: Path) -> None:
    t1 = _broker(tmp_path / "t1.toml", "b1", "s1")
    t0 = _broker(tmp_path / "t0.toml", "b1", "s0", [str(t1)])
    assert [c.state_dir.name for c in load_tree_configs(load_broker_config(t0))] == ["s0", "s1"]
    other = _broker(tmp_path / "o.toml", "b2", "s2")
    bad = _broker(tmp_path / "bad.toml", "b1", "s0", [str(other)])
    with pytest.raises(ConfigError, match="not 'b1'"):
        load_tree_configs(load_broker_config(bad))
    same = _broker(tmp_path / "same.toml", "b1", "s0", [str(t0)])
    with pytest.raises(ConfigError, match="must not list trees"):
        load_tree_configs(load_broker_config(same))
    shared = _broker(tmp_path / "shared.toml", "b1", "s1", [str(t1)])
    with pytest.raises(ConfigError, match="share a state_dir"):
        load_tree_configs(load_broker_config(shared))
    with pytest.raises(ConfigError):
        MultiTreeHost([])
    with pytest.raises(ConfigError) as e:
        load_broker_config(_broker(tmp_path / "n.toml", "b1", "s0", [""]))
    assert e.value.key == "trees[0]"
