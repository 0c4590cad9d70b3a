"""Filter matching: reference matcher (oracle), indexed counting matcher, covering poset."""

from pubguard.matching.index import IndexedMatcher
from pubguard.matching.poset import CoveringPoset
from pubguard.matching.reference import ReferenceMatcher

__all__ = ["CoveringPoset", "IndexedMatcher", "ReferenceMatcher"]
