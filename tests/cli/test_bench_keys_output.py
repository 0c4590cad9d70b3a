"""``pubguard bench keys`` (table form) states each goal as met or missed, not as a Python
dict repr."""

from __future__ import annotations

import re

from click.testing import CliRunner

from pubguard.cli.main import cli


def test_goals_line_reads_as_words() -> None:
    res = CliRunner().invoke(cli, ["bench", "keys", "--quick"])
    assert res.exit_code == 0, res.output
    goals = " ".join(res.stdout.split("goals: ", 1)[1].split())  # rich wraps at 80 columns
    assert "{" not in goals and "True" not in goals and "False" not in goals
    assert re.fullmatch(r"(\S+ (met|missed))(, \S+ (met|missed))*", goals), goals
