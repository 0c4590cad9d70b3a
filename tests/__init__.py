"""The test suite. pytest imports this package before ``tests/conftest.py``, so the bytecode
cache is switched on here, for the test process and for every process the tests start
(broker processes, CLI commands, the key service, Spark's Python workers): the suite starts
hundreds of them, and with ``PYTHONDONTWRITEBYTECODE`` set each one compiled every pubguard
module it imports again (about 0.5 s of CPU per broker process, 8 s in collection). The
compiled files go under the interpreter's prefix (the venv), never into the source tree;
Python checks each against its source's mtime and size, so an edited module is compiled
again."""

from __future__ import annotations

import os
import sys
from pathlib import Path

if sys.dont_write_bytecode or "PYTHONDONTWRITEBYTECODE" in os.environ:
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    if sys.pycache_prefix is None:
        sys.pycache_prefix = str(Path(sys.prefix) / "pycache")
    os.environ.setdefault("PYTHONPYCACHEPREFIX", sys.pycache_prefix)
