"""The import graph of ``src/pubguard``: no loops, and no private names across packages.

STYLE.md convention 9: split by collaborators, never by cutting a class into files that import
each other; a package boundary is where names stop being private. The graph is built with
``ast`` from every import statement, including those under ``TYPE_CHECKING`` and inside
functions (a lazy import hides a loop from the interpreter, not from a reader).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "pubguard"

# The one loop kept on purpose: ``Filter.parse`` and ``Filter.__str__`` (and ``Constraint``'s
# text form) call the parser, which builds filters; the parser is imported inside those
# methods so ``pubguard.model`` loads without it.
ALLOWED_LAZY_EDGES = {
    ("pubguard.model.filters", "pubguard.model.parser"),
    ("pubguard.model.constraints", "pubguard.model.parser"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _package_of(name: str) -> str:
    return name if _is_package(name) else name.rpartition(".")[0]


def _resolve(importer: str, node: ast.ImportFrom) -> str | None:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if node.level == 0:
        return node.module
    base = _package_of(importer).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str) -> Iterator[tuple[str, str, int, bool]]:
    """(target module, imported name or "", line, inside a function) for every import."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    in_function: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            in_function.update(id(n) for n in ast.walk(fn) if n is not fn)
    for node in ast.walk(tree):
        lazy = id(node) in in_function
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno, lazy
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(name, node)
            if module is None:
                continue
            for alias in node.names:
                yield module, alias.name, node.lineno, lazy


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    for name in MODULES:
        for module, imported, _line, lazy in _imports(name):
            if module not in MODULES:
                continue
            sub = f"{module}.{imported}"
            target = sub if imported and sub in MODULES else module
            if target == name or (lazy and (name, target) in ALLOWED_LAZY_EDGES):
                continue
            g.add_edge(name, target)
    return g


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    g = _graph()
    # imported inside a function (the broker process entry point is loaded on use)
    assert any(target.startswith("pubguard.") for _, target in g.out_edges("pubguard.cli.main"))
    assert len(g.edges) > 300


def test_no_import_loops() -> None:
    loops = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert not loops, "import loops:\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_the_allowed_model_loop_is_still_lazy() -> None:
    """If the parser ever became a top-level import of filters.py, the exemption would hide
    a real loop: keep it function-local."""
    for importer, target in ALLOWED_LAZY_EDGES:
        lazy = [lz for module, _, _, lz in _imports(importer) if module == target]
        assert lazy and all(lazy), f"{importer} must import {target} only inside functions"


def test_no_private_names_across_packages() -> None:
    """``from a.b import _x`` only within package ``a``'s own modules (STYLE.md 9)."""
    bad: list[str] = []
    for name in MODULES:
        own = _package_of(name)
        for module, imported, line, _lazy in _imports(name):
            if not module.startswith("pubguard") or module not in MODULES:
                continue
            private_name = imported.startswith("_") and not imported.startswith("__")
            private_module = any(
                p.startswith("_") and not p.startswith("__") for p in module.split(".")
            )
            if (private_name or private_module) and _package_of(module) != own:
                bad.append(f"{name}:{line} imports {imported or module} from {module}")
    assert not bad, "private names imported across packages:\n" + "\n".join(bad)
