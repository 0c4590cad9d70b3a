"""``pubguard keys ...`` and ``pubguard bench keys`` through the real click group."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pubguard.cli import keys_cmds
from pubguard.cli.main import cli

MASTER_HEX = bytes(range(32)).hex()
VECTORS = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "key_vectors.json").read_text()
)


@pytest.fixture(scope="module")
def root() -> click.Group:
    if "keys" not in cli.commands:  # until main.COMMAND_MODULES lists keys_cmds
        keys_cmds.register(cli)
    return cli


def run(root: click.Group, *args: str) -> object:
    return CliRunner().invoke(root, list(args), catch_exceptions=False)


def test_nakt_id_and_cover(root: click.Group) -> None:
    r = run(
        root,
        "keys",
        "nakt-id",
        "--range-size",
        "32",
        "--least-count",
        "4",
        "--value",
        "22",
        "--json",
    )
    assert r.exit_code == 0 and json.loads(r.stdout) == {"ktid": "101"}
    r = run(
        root,
        "keys",
        "nakt-cover",
        "--range-size",
        "32",
        "--least-count",
        "4",
        "--low",
        "8",
        "--high",
        "19",
        "--json",
    )
    assert r.exit_code == 0 and json.loads(r.stdout) == {"cover": ["01", "100"]}
    r = run(
        root,
        "keys",
        "nakt-cover",
        "--range-size",
        "32",
        "--least-count",
        "4",
        "--low",
        "16",
        "--high",
        "31",
    )
    assert r.exit_code == 0 and "1" in r.stdout


def test_derive_matches_the_vectors_and_hides_the_master(root: click.Group) -> None:
    (v,) = [
        v
        for v in VECTORS["psguard"]
        if v["name"] == "numeric_node" and v["inputs"]["ktid"] == "101"
    ]
    r = run(
        root,
        "keys",
        "derive",
        "--scheme",
        "psguard",
        "--master-hex",
        MASTER_HEX,
        "--topic",
        "cancerTrail",
        "--attribute",
        "age",
        "--ktid",
        "101",
        "--json",
    )
    assert r.exit_code == 0 and json.loads(r.stdout) == {"key_hex": v["hex"]}
    assert MASTER_HEX not in r.output
    (e,) = [
        v for v in VECTORS["eventguard"] if v["name"] == "epoch_key" and v["inputs"]["epoch"] == 12
    ]
    r = run(
        root,
        "keys",
        "derive",
        "--scheme",
        "eventguard",
        "--master-hex",
        MASTER_HEX,
        "--topic",
        "news",
        "--epoch",
        "12",
        "--json",
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["key_hex"] == e["hex"]
    (t,) = [v for v in VECTORS["psguard"] if v["name"] == "topic_key"]
    r = run(
        root,
        "keys",
        "derive",
        "--scheme",
        "psguard",
        "--master-hex",
        MASTER_HEX,
        "--topic",
        "cancerTrail",
    )
    assert r.exit_code == 0 and t["hex"] in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        [
            "keys",
            "derive",
            "--scheme",
            "psguard",
            "--topic",
            "w",
            "--attribute",
            "age",
            "--ktid",
            "1",
        ],
        [
            "keys",
            "derive",
            "--scheme",
            "psguard",
            "--master-hex",
            "zz" + MASTER_HEX,
            "--topic",
            "w",
        ],
        ["keys", "derive", "--scheme", "psguard", "--master-hex", "0011", "--topic", "w"],
        [
            "keys",
            "derive",
            "--scheme",
            "psguard",
            "--master-hex",
            MASTER_HEX,
            "--topic",
            "w",
            "--attribute",
            "a",
            "--ktid",
            "012",
        ],
        ["keys", "derive", "--scheme", "eventguard", "--master-hex", MASTER_HEX, "--topic", "w"],
        ["keys", "nakt-id", "--range-size", "24", "--least-count", "4", "--value", "3"],
        ["keys", "nakt-id", "--range-size", "32", "--least-count", "4", "--value", "40"],
        [
            "keys",
            "nakt-cover",
            "--range-size",
            "32",
            "--least-count",
            "4",
            "--low",
            "20",
            "--high",
            "8",
        ],
        [
            "keys",
            "nakt-cover",
            "--range-size",
            "32",
            "--least-count",
            "4",
            "--low",
            "9",
            "--high",
            "19",
        ],
    ],
)
def test_bad_input_is_one_line_and_nonzero(root: click.Group, args: list[str]) -> None:
    r = run(root, *args)
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pubguard: error: ")
    assert MASTER_HEX not in r.stderr and "zz" not in r.stderr
    assert r.stdout == ""


def test_bench_keys_quick_json(root: click.Group) -> None:
    """Runs the benchmark end to end (numbers are not asserted: benchmarks are not tests)."""
    r = run(root, "bench", "keys", "--quick", "--json")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    t1 = obj["psguard_table1_max"]
    assert [x["keys"] for x in t1] == [x["paper_keys"] for x in t1] == [12, 18, 26]
    assert {x["phi"] for x in obj["psguard_table2_avg"]} == {10, 100, 1000}
    assert {x["primitive"] for x in obj["eventguard_table1"]} == {
        "H",
        "KH",
        "AEAD encrypt",
        "sign",
        "verify",
    }
    assert set(obj["goals"]) >= {"keygen_warm_us<=20", "derive_max_us<=6", "cached_derive_us<=1"}
