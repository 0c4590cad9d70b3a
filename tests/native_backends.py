"""Run a test on both backends (pubguard.native): the Python reference and the Rust extension.

``backend`` (registered in conftest.py) is a fixture parametrized over ``python`` and ``native``;
the native case is skipped when the extension is not built or ``PUBGUARD_NATIVE=0``, so the
Python path always runs. ``BACKENDS`` is the same list for ``pytest.mark.parametrize`` where a
fixture does not fit (module-scoped fixtures: switch with ``native.use(b)`` inside).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pubguard import native

__all__ = ["BACKENDS", "NATIVE_SKIP", "backend", "requires_native"]

#: why the native case is skipped here, or None when it runs
NATIVE_SKIP: str | None = (
    f"{native.ENV_VAR}=0"
    if os.environ.get(native.ENV_VAR, "1") == "0"
    else None
    if native.available()
    else "pubguard._native is not built (make native)"
)

#: mark for tests that compare the two backends directly (differential tests)
requires_native = pytest.mark.skipif(NATIVE_SKIP is not None, reason=NATIVE_SKIP or "")

BACKENDS = [
    pytest.param("python", id="python"),
    pytest.param("native", id="native", marks=requires_native),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test body runs with this backend active (``native.use``)."""
    with native.use(request.param):
        yield request.param
