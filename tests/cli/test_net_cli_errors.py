"""A new user's mistakes with the network commands: each is one ``pubguard: error:`` line
and exit 1, with no traceback and nothing started."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from pubguard.cli.main import cli


def _one_line_error(args: list[str]) -> str:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubguard: error: "), res.stderr
    assert "Traceback" not in res.output
    return lines[0]


def test_broker_with_missing_tls_files_names_them(tmp_path: Path) -> None:
    cfg = tmp_path / "broker.toml"
    cert, key, ca = tmp_path / "b0.crt", tmp_path / "b0.key", tmp_path / "ca.pem"
    cfg.write_text(
        f'name = "b0"\nstate_dir = "{tmp_path / "s"}"\n'
        f'[tls]\nca = "{ca}"\ncert = "{cert}"\nkey = "{key}"\n'
    )
    line = _one_line_error(["broker", "--config", str(cfg)])
    assert line == (
        f"pubguard: error: cannot build TLS context: certificate {cert} / key {key}: "
        "No such file or directory"
    )


def test_broker_config_mistakes(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert _one_line_error(["broker", "--config", str(missing)]) == (
        f"pubguard: error: {missing}: cannot read: No such file or directory"
    )
    cfg = tmp_path / "b.toml"
    cfg.write_text('name = "x"\nport = 99999\ntls_enabled = false\n')
    assert _one_line_error(["broker", "--config", str(cfg)]).endswith(
        "port: 99999 is not a port number"
    )
    cfg.write_text('name = "x"\nprofile = "nosuch"\ntls_enabled = false\n')
    assert "unknown profile 'nosuch'" in _one_line_error(["broker", "--config", str(cfg)])


def test_client_commands_without_a_cluster_or_with_a_bad_filter(tmp_path: Path) -> None:
    state = str(tmp_path / "net")
    assert _one_line_error(["publish", "--state", state, '{"attrs": {"price": 12}}']) == (
        f"pubguard: error: no cluster is running from {state} (pubguard cluster up)"
    )
    line = _one_line_error(["subscribe", "--state", state, "price >"])
    assert line == (
        "pubguard: error: bad filter 'price >': expected a value, found end of input at column 8"
    )
    assert not (tmp_path / "net").exists()


def test_publish_with_no_events_says_so(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["publish", "--state", str(tmp_path / "net")], input="\n")
    assert res.exit_code == 1
    assert res.stderr.strip() == "pubguard: error: no events to publish (stdin was empty)"


def test_a_state_path_that_is_a_file_or_cannot_be_created(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    assert _one_line_error(["cluster", "up", "--state", str(f)]) == (
        f"pubguard: error: --state {f} is a file, not a folder"
    )
    # any OSError a command lets through is one line naming the path (main._Group)
    line = _one_line_error(["cluster", "up", "--state", str(f / "net")])
    assert line.startswith(f"pubguard: error: {f / 'net'}") and line.endswith(": Not a directory")
    assert f.read_text() == "x"


def test_broker_on_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = tmp_path / "b.toml"
        cfg.write_text(
            f'name = "x"\nport = {port}\ntls_enabled = false\nstate_dir = "{tmp_path / "s"}"\n'
        )
        line = _one_line_error(["broker", "--config", str(cfg)])
    assert line == (
        f"pubguard: error: broker x: listen address 127.0.0.1:{port}: Address already in use"
    )


def test_bench_network_help_lists_the_profiles_the_network_serves() -> None:
    from pubguard.cli.net_cmds import NETWORK_PROFILES
    from pubguard.net.config import PROFILES

    assert tuple(NETWORK_PROFILES) == tuple(PROFILES)
    out = " ".join(CliRunner().invoke(cli, ["bench", "network", "--help"]).output.split())
    out = out.replace("- ", "-")  # help text wraps at hyphens
    assert (
        "One of plain, psguard, psguard-paper, eventguard, narada, default, vcaps-rv, vcaps-srv,"
        " vcaps-srv-fast." in out
    )


def test_a_workload_path_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "events.jsonl"
    f.write_text("")
    for args in (["workload", "info", "--workload", str(f)], ["match", "--workload", str(f)]):
        assert (
            _one_line_error(args) == f"pubguard: error: {f}: not a workload folder (it is a file)"
        )


def test_publish_names_the_line_and_column_of_malformed_json(tmp_path: Path) -> None:
    state = str(tmp_path / "net")  # JSON is checked before any connection is tried
    bad = '{"attrs": {"a": 1, "b": 2, "c": 3, "d": 4, "eeeeee" 5}}'  # ':' missing at 53
    assert _one_line_error(["publish", "--state", state, '{"attrs": {}}', bad]) == (
        "pubguard: error: argument 2: malformed JSON: Expecting ':' delimiter (column 53)"
    )
    # stdin lines keep their real numbers: blank lines count
    res = CliRunner().invoke(
        cli, ["publish", "--state", state], input=f'\n{{"attrs": {{"a": 1}}}}\n\n{bad}\n'
    )
    assert res.exit_code == 1
    assert res.stderr.strip() == (
        "pubguard: error: <stdin>:4: malformed JSON: Expecting ':' delimiter (column 53)"
    )
    assert not (tmp_path / "net").exists()
