"""A cluster's key service: the ``[keyservice]`` table, its master secret (from the
environment or an encrypted file, never random), and the publisher keys derived from it."""

from __future__ import annotations

import base64
import tomllib
from pathlib import Path

import pytest

from pubguard.crypto.keyfile import save_secret
from pubguard.errors import ConfigError
from pubguard.net.config import KEYSERVICE_MASTER_ENV, KeyServiceSettings, parse_cluster_config
from pubguard.ops.cluster_keys import keyservice_profiles, master_secret, publisher_key

TOPOLOGY = '[topology]\nkind = "tree"\narity = 2\ndepth = 1\n[broker]\nprofiles = {p}\n'


def _cfg(extra: str, profiles: str = '["default", "narada"]') -> KeyServiceSettings | None:
    data = tomllib.loads(TOPOLOGY.format(p=profiles) + extra)
    return parse_cluster_config(data, path="c.toml", base=Path("/x")).keyservice


def test_keyservice_table_defaults_and_paths() -> None:
    assert _cfg("") is None
    ks = _cfg('[keyservice]\npolicy = "p.json"\n')
    assert ks == KeyServiceSettings((), Path("/x/p.json"), KEYSERVICE_MASTER_ENV, None, 0)
    ks = _cfg('[keyservice]\nmaster_file = "m.pem"\nprofiles = ["psguard"]\nport = 7400\n')
    assert ks is not None and ks.master_env is None and ks.master_file == Path("/x/m.pem")
    assert ks.profiles == ("psguard",) and ks.port == 7400


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ('profiles = ["vcaps-rv"]', "keyservice.profiles[0]"),
        ('master_env = "A"\nmaster_file = "m"', "keyservice.master_env"),
        ('master_env = "not a name"', "keyservice.master_env"),
        ("colour = 1", "keyservice.colour"),
    ],
)
def test_keyservice_table_errors_name_the_key(table: str, key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        _cfg(f"[keyservice]\n{table}\n")
    assert exc.value.key == key


def test_no_broker_may_be_called_keyservice() -> None:
    data = tomllib.loads(
        '[topology]\nkind = "edges"\nedges = [["b0", "keyservice"]]\n[keyservice]\n'
    )
    with pytest.raises(ConfigError, match="names the key service"):
        parse_cluster_config(data)


def test_served_profiles_default_to_what_the_brokers_serve_and_a_key_service_can() -> None:
    data = tomllib.loads(TOPOLOGY.format(p='["plain", "default", "narada", "eventguard"]'))
    cfg = parse_cluster_config({**data, "keyservice": {}})
    assert keyservice_profiles(cfg) == ("default", "narada", "eventguard")


def test_master_secret_comes_from_its_source_never_random(tmp_path: Path) -> None:
    ks = KeyServiceSettings()
    with pytest.raises(ConfigError, match=f"^{KEYSERVICE_MASTER_ENV} is not set") as exc:
        master_secret(ks, environ={})
    assert exc.value.key == KEYSERVICE_MASTER_ENV
    with pytest.raises(ConfigError, match="not base64"):
        master_secret(ks, environ={KEYSERVICE_MASTER_ENV: "%%%"})
    with pytest.raises(ConfigError, match="fewer than 16"):
        master_secret(ks, environ={KEYSERVICE_MASTER_ENV: base64.b64encode(b"short").decode()})
    m = bytes(range(32))
    got = master_secret(ks, environ={KEYSERVICE_MASTER_ENV: base64.b64encode(m).decode()})
    assert got.reveal() == m and "00010203" not in repr(got)


def test_master_secret_file_needs_the_tls_passphrase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = bytes(range(32, 64))
    save_secret(tmp_path / "m.pem", m, b"pass")
    ks = KeyServiceSettings(master_env=None, master_file=tmp_path / "m.pem")
    monkeypatch.setenv("PUBGUARD_TLS_PASSPHRASE", "pass")
    assert master_secret(ks).reveal() == m
    monkeypatch.delenv("PUBGUARD_TLS_PASSPHRASE")
    with pytest.raises(ConfigError, match="no passphrase"):
        master_secret(ks)


def test_publisher_keys_are_deterministic_per_master_and_name() -> None:
    from pubguard.crypto import SecretBytes

    a, b = SecretBytes(b"a" * 32), SecretBytes(b"b" * 32)
    assert publisher_key(a, "cli").public == publisher_key(a, "cli").public
    assert publisher_key(a, "cli").public != publisher_key(a, "ward").public
    assert publisher_key(a, "cli").public != publisher_key(b, "cli").public


def test_external_children_are_accepted_by_their_parent_and_never_started() -> None:
    data = tomllib.loads(
        '[topology]\nkind = "edges"\nedges = [["b0", "b1"]]\nexternal = [["b0", "h1"]]\n'
    )
    cfg = parse_cluster_config(data)
    assert cfg.brokers == ("b0", "b1") and cfg.children_of("b0") == ("b1", "h1")
    for bad, why in (('[["b9", "h1"]]', "no broker 'b9'"), ('[["b0", "b1"]]', "already a name")):
        data = tomllib.loads(
            f'[topology]\nkind = "edges"\nedges = [["b0", "b1"]]\nexternal = {bad}\n'
        )
        with pytest.raises(ConfigError, match=why) as exc:
            parse_cluster_config(data)
        assert exc.value.key == "topology.external[0]"


def test_publisher_key_known_answer() -> None:
    """The derivation is part of the deployment's contract: replicas and restores agree."""
    from pubguard.crypto import SecretBytes

    pk = publisher_key(SecretBytes(bytes(range(32))), "cli").public.to_bytes().hex()
    assert pk == "5a422802c502d3bca0273c4edaec364803fcbed900a935fb77a365ecc37a80cf"


def test_kmc_secret_known_answer() -> None:
    """The hosted KMC's secret: HKDF-SHA256(M, info = "pubguard/cluster/narada-kmc")."""
    from pubguard.crypto import SecretBytes
    from pubguard.ops.cluster_keys import kmc_secret

    got = kmc_secret(SecretBytes(bytes(range(32)))).reveal().hex()
    assert got == "e986ccf625357b27bff4c70658dabf17bf7c8ae690b0e39e58347f98556821b4"
