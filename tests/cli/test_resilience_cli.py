"""``pubguard experiments resilience / psguard-entropy``: refusals are one line, no Spark."""

from __future__ import annotations

from click.testing import CliRunner

from pubguard.cli.main import cli


def test_psguard_entropy_refuses_ind_max_above_arity(tmp_path: object) -> None:
    r = CliRunner().invoke(
        cli,
        [
            "experiments",
            "psguard-entropy",
            "--arity",
            "2",
            "--ind-max",
            "3",
            "--out",
            str(tmp_path),
        ],
    )
    assert r.exit_code == 1
    assert r.output.strip().splitlines() == [
        "pubguard: error: --ind-max must be in 1 .. --arity (G^ind needs ind <= a)"
    ]


def test_commands_are_registered() -> None:
    r = CliRunner().invoke(cli, ["experiments", "--help"])
    assert "resilience" in r.output and "psguard-entropy" in r.output
