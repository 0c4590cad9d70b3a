"""``pubguard demo`` as a reader sees it at 80 columns, not on a terminal (``| cat``, ``tee``):
no line wider than 80 cells, no Spark or JVM log line in the middle of it, each term a reader
may not know glossed once where it is first used, and the verdicts unchanged."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from pubguard.ops.demo.glossary import GLOSSES, gloss

WIDTH = 80
JVM_NOISE = re.compile(
    r"WARN|log4j|NativeCodeLoader|Setting default log level|Setting Spark log level|"
    r"incubator|setLogLevel"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_demo(tmp: Path, *args: str, timeout: float) -> str:
    env = dict(os.environ, COLUMNS=str(WIDTH), TMPDIR=str(tmp))
    for k in ("FORCE_COLOR", "TERM"):
        env.pop(k, None)
    r = subprocess.run(
        [sys.executable, "-m", "pubguard.cli.main", "demo", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # what a terminal (or tee 2>&1) shows: both streams
        text=True,
        timeout=timeout,  # bounds a hung run; never decides the result
    )
    out = _ANSI.sub("", r.stdout)
    assert r.returncode == 0, out
    return out


def flat(out: str) -> str:
    """The output's words in order, panel borders and line wrapping taken out."""
    return " ".join(out.replace("│", " ").split())


def check_reads_at_80_columns(out: str, terms: list[str]) -> None:
    lines = out.splitlines()
    wide = [(cell_len(x.rstrip()), x) for x in lines if cell_len(x.rstrip()) > WIDTH]
    assert not wide, wide
    noise = [x for x in lines if JVM_NOISE.search(x)]
    assert not noise, noise
    for term in terms:
        g = gloss(term)
        assert lines.count(g) == 1, (term, out)
        at = lines.index(g)
        first = next(i for i, x in enumerate(lines) if term in x)
        assert at - 3 <= first <= at, f"{term!r} used at line {first}, glossed at {at}"
    for term in set(GLOSSES) - set(terms):
        assert gloss(term) not in lines


def check_nothing_folded(out: str) -> None:
    """The layout reads: every filter on one line, every truncated hex value whole on its
    line (a table too wide for 80 columns folds them into narrow cells)."""
    from pubguard.ops.demo.hospital import UNITS

    lines = [x.strip() for x in out.splitlines()]
    for _, _, filters in UNITS:
        for f in filters:
            assert f in lines, f
    for key in ("r=", "F_T(r)=", "body: ", "sig: "):
        cells = [x for x in out.splitlines() if re.search(rf"(^|\s){re.escape(key)}", x)]
        assert len(cells) >= 8, (key, out)
        for x in cells:
            assert re.search(rf"{re.escape(key)}[0-9a-f]{{12}}…\(\d+ B\)", x), x


def check_network_verdicts(out: str) -> None:
    text = flat(out)
    for unit, n in (("paediatric-unit", 6), ("oncology-researcher", 3), ("geriatric-ward", 7)):
        assert re.search(rf"{unit} at \w+ \(\w+\): received {n}/{n} ✓", text), (unit, out)
    assert "cloud's view: 0 found of" in text
    assert "dropped at the first broker as revoked" in text
    assert "received by subscribers: 0 ✓" in text
    assert "what 'cloud' holds" in text and "F_T(r)=" in text and "MRN-" in text


SPARK_TEST = "test_demo_with_spark_reads_at_80_columns_without_jvm_lines"


@pytest.fixture(scope="module")
def demo_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """One demo run for the module: with its Spark part when the Spark test is selected (its
    network part is the same code, so the network test reads that run's output), with
    ``--no-spark`` otherwise (``-m "not slow"``). ``--no-spark`` itself is run by
    tests/cli/test_demo.py."""
    tmp = tmp_path_factory.mktemp("demo80")
    if any(item.name == SPARK_TEST for item in request.session.items):
        return run_demo(
            tmp, "--spark-events", "40", "--master", "local[2]", "--in-process", timeout=900
        )
    return run_demo(tmp, "--no-spark", "--in-process", timeout=300)


def test_demo_network_part_reads_at_80_columns(demo_run: str) -> None:
    check_reads_at_80_columns(demo_run, list(GLOSSES))
    check_nothing_folded(demo_run)
    check_network_verdicts(demo_run)


@pytest.mark.slow
def test_demo_with_spark_reads_at_80_columns_without_jvm_lines(demo_run: str) -> None:
    out = demo_run
    check_reads_at_80_columns(out, list(GLOSSES))
    check_nothing_folded(out)
    check_network_verdicts(out)
    text = flat(out)
    m = re.search(r"(\d+) deliveries, (\d+) opened, 0 refused; drops: none", text)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) > 0, out
    assert "opened by the subscriber | what the executors handled" in text
    assert "payload: " in text
