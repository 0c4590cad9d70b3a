"""The ``[revocation]`` section of a broker's configuration (net/config.py) and the watcher's
sans-IO part (net/server/revocation.py): bad sections are one precise ConfigError; a kept list is
restored on start; a failed fetch keeps the last good list."""

from __future__ import annotations

import asyncio
import random

import pytest

from pubguard.crypto import SigningKey
from pubguard.errors import ConfigError
from pubguard.net.config import parse_broker_config
from pubguard.net.server.revocation import STATE_FILE, RevocationWatcher
from pubguard.schemes.common.revocation_list import RevocationFeed, SignedRevocations
from pubguard.schemes.default.broker import DefaultBroker

AUTH = SigningKey.from_seed(random.Random(3).randbytes(32))
K = random.Random(4).randbytes(32)
BASE = {"name": "b1", "tls_enabled": False, "profile": "default", "keys": "k.json"}


def test_revocation_section_parses(tmp_path):
    c = parse_broker_config(
        {**BASE, "revocation": {"keyservice": "10.0.0.1:7443", "poll": 1}}, base=tmp_path
    )
    assert c.revocation is not None
    assert (c.revocation.host, c.revocation.port, c.revocation.poll) == ("10.0.0.1", 7443, 1.0)
    c = parse_broker_config(
        {**BASE, "revocation": {"keyservice_file": "ms-key.json"}}, base=tmp_path
    )
    assert c.revocation is not None and c.revocation.endpoint_file == tmp_path / "ms-key.json"
    assert parse_broker_config(BASE, base=tmp_path).revocation is None


@pytest.mark.parametrize(
    ("section", "extra", "key"),
    [
        ({}, {}, "revocation.keyservice"),
        ({"keyservice": "a:1", "keyservice_file": "f"}, {}, "revocation.keyservice"),
        ({"keyservice": "nohost"}, {}, "revocation.keyservice"),
        ({"keyservice": "h:99999"}, {}, "revocation.keyservice"),
        ({"keyservice": "h:1", "poll": 0}, {}, "revocation.poll"),
        ({"keyservice": "h:1", "poll": 5, "max_age": 5}, {}, "revocation.max_age"),
        ({"keyservice": "h:1", "every": 5}, {}, "revocation.every"),
        ({"keyservice": "h:1"}, {"profile": "plain", "keys": None}, "revocation"),
    ],
)
def test_bad_revocation_sections_name_their_key(tmp_path, section, extra, key):
    data = {**BASE, **extra, "revocation": section}
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(ConfigError) as exc:
        parse_broker_config(data, path="broker.toml", base=tmp_path)
    assert exc.value.key == key and str(exc.value).startswith("broker.toml: ")


def _watcher(tmp_path, scheme, t):
    c = parse_broker_config({**BASE, "revocation": {"keyservice_file": "none.json"}}, base=tmp_path)
    assert c.revocation is not None
    return RevocationWatcher(
        "b1",
        c.revocation,
        RevocationFeed(AUTH.public, max_age=60),
        [scheme],
        None,
        state_dir=tmp_path,
        clock=lambda: t[0],
    )


def test_a_kept_list_is_restored_and_a_failed_fetch_keeps_the_last_good_one(tmp_path):
    t = [100.0]
    scheme = DefaultBroker(AUTH.public)
    w = _watcher(tmp_path, scheme, t)
    blob = SignedRevocations.sign(AUTH, serial=3, issued=99.0, identities=["x"], keys=[K]).encode()
    assert w.take(blob).outcome == "applied" and K in scheme.revoked
    assert (tmp_path / STATE_FILE).read_bytes() == blob
    # the endpoint file is missing: the fetch fails, the list stays, the state says why
    assert asyncio.run(w.poll_once()) is None
    st = w.status()
    assert st["serial"] == 3 and st["state"] == "unreachable: TransportError" and not st["stale"]
    t[0] = 200.0
    assert w.status()["stale"] and w.check_stale()
    # a restarted broker applies the kept list before its first fetch
    fresh = DefaultBroker(AUTH.public)
    w2 = _watcher(tmp_path, fresh, t)
    w2.restore()
    assert K in fresh.revoked and w2.feed.serial == 3
    older = SignedRevocations.sign(AUTH, serial=2, issued=150.0, identities=[], keys=[]).encode()
    assert w2.take(older).outcome == "rollback" and w2.feed.serial == 3


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ([], "exactly one of --identity and --key"),
        (["--identity", "x", "--key", "00" * 32], "exactly one of --identity and --key"),
        (["--key", "zz"], "64-hex-digit"),
        (["--identity", "x"], "no running key service recorded"),
        (["--identity", "x", "--keyservice", "nohost"], "is not host:port"),
        (["--identity", "x", "--keyservice", "127.0.0.1:9", "--as", "nobody"], "no certificate"),
    ],
)
def test_keyservice_revoke_bad_input_is_a_one_line_error(tmp_path, args, why):
    from click.testing import CliRunner

    from pubguard.cli.main import cli

    r = CliRunner().invoke(cli, ["keyservice", "revoke", "--state", str(tmp_path), *args])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and why in r.stderr, r.output
    assert list(tmp_path.iterdir()) == []  # nothing created
