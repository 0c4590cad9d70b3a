"""Lower layers never import higher ones (ARCHITECTURE.md, STYLE.md convention 4)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "pubguard"

# lowest first; a module may import only its own layer and those before it
ORDER = [
    "errors",
    "model",
    "wire",
    "crypto",
    "matching",
    "store",
    "keys",
    "schemes",
    "overlay",
    "broker",
    "sim",
    "pipeline",
    "net",
    "ops",
    "cli",
]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "pubguard" or len(parts) < 2:
        return None
    return parts[1]


def test_imports_point_downward() -> None:
    bad: list[str] = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        own = rel.parts[0].removesuffix(".py")
        if own not in ORDER:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                target = _layer(n)
                if target in ORDER and ORDER.index(target) > ORDER.index(own):
                    bad.append(f"{rel}: imports {n}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_only_crypto_touches_hazmat() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if p.relative_to(SRC).parts[0] != "crypto" and "hazmat" in p.read_text()
    ]
    assert offenders == []


def test_every_package_declares_all() -> None:
    missing = [
        str(p.relative_to(SRC)) for p in SRC.rglob("__init__.py") if "__all__" not in p.read_text()
    ]
    assert missing == []
