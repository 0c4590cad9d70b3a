"""Which backend runs the hot paths: the Rust extension ``pubguard._native`` or pure Python.

Theory of operation. The Python implementations are the reference and the fallback; the
extension (built from ``native/`` by ``make native``) is a narrow accelerator under the same
API. The backend is chosen once, at import: native when the module imports and the
environment variable ``PUBGUARD_NATIVE`` is not ``0``, Python otherwise. Dispatch sites
(``keys.nakt``, ``keys.kdc``, ``keys.cache``, ``keys.ms``, ``schemes.psguard.tokens`` /
``match``, the pipeline's match stage) read :data:`NATIVE` at each call, so tests can run one
code path on both backends with :func:`use`.

``describe()`` is what ``pubguard --version`` and ``pubguard status`` print.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, Final, Literal

from pubguard.errors import ConfigError

__all__ = ["ENV_VAR", "NATIVE", "Backend", "available", "backend", "describe", "use"]

#: ``PUBGUARD_NATIVE=0`` forces the Python backend (any other value, or unset: native if built)
ENV_VAR: Final = "PUBGUARD_NATIVE"

Backend = Literal["native", "python"]


def _load() -> ModuleType | None:
    try:
        return importlib.import_module("pubguard._native")
    except ImportError:
        return None


_MODULE: Final = _load()

#: The extension module when the native backend is active, else None. Typed ``Any``: the
#: extension has no stubs, and every call site wraps it in a typed Python function.
NATIVE: Any = _MODULE if os.environ.get(ENV_VAR, "1") != "0" else None


def available() -> bool:
    """Whether the extension is built and importable (whatever the active backend)."""
    return _MODULE is not None


def backend() -> Backend:
    """The active backend."""
    return "native" if NATIVE is not None else "python"


def describe() -> str:
    """One line: the active backend and why (``native (pubguard._native 0.1.0)``)."""
    if NATIVE is not None:
        return f"native (pubguard._native {NATIVE.version()})"
    if _MODULE is not None:
        return f"python ({ENV_VAR}=0; pubguard._native {_MODULE.version()} is built)"
    return "python (pubguard._native is not built: make native)"


@contextmanager
def use(which: Backend) -> Iterator[None]:
    """Run a block on one backend (tests, benchmarks): ``with native.use("python"): ...``.

    ``ConfigError`` for ``"native"`` when the extension is not built. Not thread-safe: it
    switches the process-wide backend, so use it only where nothing else runs concurrently."""
    global NATIVE
    if which == "native":
        if _MODULE is None:
            raise ConfigError("the native backend is not built (make native)")
        new: Any = _MODULE
    elif which == "python":
        new = None
    else:
        raise ConfigError(f"unknown backend {which!r} (native or python)")
    old, NATIVE = NATIVE, new
    try:
        yield
    finally:
        NATIVE = old
