"""Filter matching: reference matcher (oracle), indexed counting matcher, covering poset."""

from pubguard.matching.reference import ReferenceMatcher

__all__ = ["ReferenceMatcher"]
