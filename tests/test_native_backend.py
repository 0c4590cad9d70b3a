"""Backend selection (pubguard.native): chosen once at import, ``PUBGUARD_NATIVE=0`` forces
Python, ``pubguard --version`` and ``pubguard status`` name it, and the side-by-side benches
report both backends with agreeing results."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from pubguard import native
from pubguard.cli.main import cli
from pubguard.errors import ConfigError
from tests.native_backends import NATIVE_SKIP, requires_native


def test_env_var_forces_the_python_backend() -> None:
    code = "from pubguard import native; print(native.backend(), native.describe())"
    env = {**os.environ, native.ENV_VAR: "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("python ") and ("PUBGUARD_NATIVE=0" in out or "not built" in out)


def test_use_switches_and_restores(backend: str) -> None:
    assert native.backend() == backend
    with native.use("python"):
        assert native.NATIVE is None and native.describe().startswith("python")
    assert native.backend() == backend
    with pytest.raises(ConfigError):
        with native.use("fortran"):  # type: ignore[arg-type]
            pass


@pytest.mark.skipif(native.available(), reason="the extension is built here")
def test_native_refused_when_not_built() -> None:
    with pytest.raises(ConfigError, match="make native"):
        with native.use("native"):
            pass


def test_version_names_the_backend() -> None:
    res = CliRunner().invoke(cli, ["--version"])
    assert res.exit_code == 0
    assert res.output.strip() == f"pubguard 0.1.0, backend: {native.describe()}"
    want = "native" if NATIVE_SKIP is None else "python"
    assert f"backend: {want}" in res.output


def test_status_names_the_backend_even_without_a_cluster(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(cli, ["status", "--state", str(tmp_path / "none")])
    assert res.exit_code == 1  # no cluster: one line, no traceback
    assert f"backend: {native.describe()}" in res.stdout
    assert "Traceback" not in res.output


@requires_native
def test_bench_tokens_reports_both_backends() -> None:
    args = ["bench", "tokens", "--quick", "--json", "--tokens", "16", "--batch", "32"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["backends"] == ["python", "native"] and r["agree"] and r["hits"] == 32 * 2
    assert r["python_us_per_event"] > 0 and r["native_us_per_event"] > 0


def test_bench_tokens_refuses_impossible_shapes() -> None:
    res = CliRunner().invoke(cli, ["bench", "tokens", "--tags", "2", "--matching", "3"])
    assert res.exit_code == 1 and "exceeds" in res.output and "Traceback" not in res.output
