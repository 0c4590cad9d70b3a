"""Filter matching: reference matcher (oracle), indexed counting matcher, covering poset.

Public names are imported on first use (PEP 562 module ``__getattr__``), so that importing one
submodule, or the command line, does not load every heavy module of the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubguard.lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
