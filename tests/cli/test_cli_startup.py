"""The ``pubguard`` command starts fast: importing the CLI loads no heavy library.

Every command module is imported to build the command tree (even for ``pubguard --help``), so
heavy imports live inside the command functions and the package ``__init__`` files re-export
their heavy modules lazily (PEP 562). The check is on ``sys.modules`` in a fresh interpreter
(run with ``-X importtime`` as a start-up audit would), never on wall-clock time.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("networkx", "pyspark", "matplotlib", "numpy", "pyarrow", "cryptography")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "import time:" in out.stderr  # the audit ran with -X importtime
    return set(json.loads(out.stdout.splitlines()[-1]))


def _heavy(modules: set[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def test_importing_the_cli_loads_no_heavy_library() -> None:
    loaded = _loaded_after("import pubguard.cli.main")
    assert "pubguard.cli.main" in loaded
    assert _heavy(loaded) == []
    # nor the parts of pubguard that pull them in
    assert (
        not {
            "pubguard.sim.engine",
            "pubguard.schemes.registry",
            "pubguard.overlay.resilient",
            "pubguard.matching.index",
            "pubguard.broker.core",
        }
        & loaded
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], ["bench", "--help"], ["experiments", "--help"], ["workload", "--help"]],
)
def test_help_loads_no_heavy_library(args: list[str]) -> None:
    code = (
        "import sys\nfrom pubguard.cli.main import cli\n"
        f"try:\n    cli({args!r}, prog_name='pubguard')\nexcept SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
    )
    assert _heavy(_loaded_after(code)) == []


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("pubguard.overlay", ["Tree", "ary_tree", "resilient_graph", "MAX_TREE_NODES"]),
        ("pubguard.sim", ["Simulator", "SHAPES", "run_scaling", "generate", "MeasuredCost"]),
        ("pubguard.matching", ["IndexedMatcher", "ReferenceMatcher", "CoveringPoset"]),
    ],
)
def test_lazy_packages_keep_every_public_name(package: str, names: list[str]) -> None:
    import importlib

    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name
        assert name in dir(mod)
    for name in names:
        assert name in mod.__all__
    with pytest.raises(AttributeError):
        mod.no_such_name  # noqa: B018


def test_lazy_packages_import_their_heavy_modules_on_use() -> None:
    loaded = _loaded_after("import pubguard.overlay, pubguard.sim, pubguard.matching")
    assert _heavy(loaded) == []
    loaded = _loaded_after("from pubguard.overlay import resilient_graph")
    assert "networkx" in loaded  # the name still brings its module in
    loaded = _loaded_after("from pubguard.matching import IndexedMatcher")
    assert "numpy" in loaded


def test_spelled_out_choices_agree_with_their_sources() -> None:
    from pubguard.cli import scaling_cmds, security_cmds, workload_cmds
    from pubguard.sim.flood import VARIANTS
    from pubguard.sim.scaling import PROFILES
    from pubguard.sim.workloads import SHAPES

    assert scaling_cmds.SCALING_PROFILES == PROFILES
    assert security_cmds.VARIANTS == VARIANTS
    assert workload_cmds.SHAPE_NAMES == tuple(SHAPES)
