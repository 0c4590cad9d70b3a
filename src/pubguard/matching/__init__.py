"""Filter matching: reference matcher (oracle), indexed counting matcher, covering poset.

Public names are imported on first use (PEP 562 module ``__getattr__``), so that importing one
submodule, or the command line, does not load every heavy module of the package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pubguard.matching.index import IndexedMatcher
    from pubguard.matching.poset import CoveringPoset
    from pubguard.matching.reference import ReferenceMatcher

__all__ = ["CoveringPoset", "IndexedMatcher", "ReferenceMatcher"]

_LAZY: dict[str, str] = {
    "CoveringPoset": "pubguard.matching.poset",
    "IndexedMatcher": "pubguard.matching.index",
    "ReferenceMatcher": "pubguard.matching.reference",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup does not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
