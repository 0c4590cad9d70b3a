"""Two faults of the network commands a new-user audit found: a failed ``cluster up`` left its
half-made broker folders behind, and ``subscribe --count -3`` was accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli

# one broker that cannot listen: 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this host,
# so the broker process exits after the CLI made the PKI and the broker's folder
UNBINDABLE = 'host = "192.0.2.1"\n[topology]\nkind = "tree"\narity = 2\ndepth = 0\n'


def _failed_up(config: Path, state: Path) -> str:
    res = CliRunner().invoke(cli, ["cluster", "up", "--config", str(config), "--state", str(state)])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    return res.stderr.strip()


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text() if p.is_file() else "/"
        for p in sorted(root.rglob("*"))
    }


def test_failed_cluster_up_removes_what_it_created_and_only_that(tmp_path: Path) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(UNBINDABLE)
    fresh = tmp_path / "fresh"
    err = _failed_up(config, fresh)
    assert err.startswith("pubguard: error: broker b0 exited with 1")
    assert "192.0.2.1" in err
    assert not fresh.exists()  # the folder this invocation made, PKI and b0/ inside, is gone

    # a state folder that was there keeps what it held; only the new entries go
    kept = tmp_path / "kept"
    (kept / "notes").mkdir(parents=True)
    (kept / "notes" / "mine.txt").write_text("mine")
    (kept / "b0.txt").write_text("not a broker folder")
    before = _tree(kept)
    _failed_up(config, kept)
    assert _tree(kept) == before


def test_subscribe_refuses_a_negative_count(tmp_path: Path) -> None:
    state = tmp_path / "net"
    res = CliRunner().invoke(cli, ["subscribe", "--state", str(state), "--count", "-3", "x > 1"])
    assert res.exit_code == 2  # a usage error, as click reports it
    assert "Invalid value for '--count'" in res.stderr
    assert "-3 is not in the range x>=0" in res.stderr
    assert not state.exists()
    # 0 (never stop) is still accepted: it gets as far as looking for the cluster
    res = CliRunner().invoke(cli, ["subscribe", "--state", str(state), "--count", "0", "x > 1"])
    assert res.exit_code == 1
    assert "no cluster is running" in res.stderr


def test_cluster_up_keeps_its_state_where_the_config_file_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third fault of the same audit: the cluster file's documented ``state_dir`` was
    ignored for ./pubguard-cluster. It is used now unless --state is given, relative to the
    file's folder, and the output says where status and down must look."""
    conf_dir, cwd = tmp_path / "conf", tmp_path / "elsewhere"
    conf_dir.mkdir()
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    config = conf_dir / "cluster.toml"
    config.write_text('state_dir = "net"\n[topology]\nkind = "tree"\narity = 2\ndepth = 0\n')
    runner = CliRunner()
    state = conf_dir / "net"
    res = runner.invoke(cli, ["cluster", "up", "--config", str(config)])
    try:
        assert res.exit_code == 0, res.output
        assert f"1 brokers up; state in {state} (--state {state} for status" in res.output
        assert (state / "cluster.json").exists()
        assert not (cwd / "pubguard-cluster").exists()
    finally:
        down = runner.invoke(cli, ["cluster", "down", "--state", str(state)])
    assert "stopped 1 brokers" in down.output
    # --state still wins over the file
    other = tmp_path / "other"
    res = runner.invoke(cli, ["cluster", "up", "--config", str(config), "--state", str(other)])
    try:
        assert res.exit_code == 0, res.output
        assert (other / "cluster.json").exists() and not (state / "cluster.json").exists()
    finally:
        runner.invoke(cli, ["cluster", "down", "--state", str(other)])
