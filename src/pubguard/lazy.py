"""Lazy re-exports for package ``__init__`` files (PEP 562), so ``import pubguard.cli.main``
does not pull networkx, numpy or the schemes in before a command needs them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, str], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``table`` is imported from its
    module on first use and kept in the package's namespace; ``__dir__`` lists ``names``
    (the package's ``__all__``) beside what is already loaded."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # the next lookup does not come here
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the PEP 562 hook
        return sorted({*namespace, *names})

    return __getattr__, __dir__
