"""The top-level package's public API: ``__all__`` is complete and every name in it resolves
(as httpx checks its own), and importing ``pubguard`` stays cheap (the client is lazy)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import types

import pubguard
import pubguard.errors


def test_all_is_complete_and_every_name_resolves() -> None:
    public = {
        name
        for name in dir(pubguard)
        if not name.startswith("_") and not isinstance(getattr(pubguard, name), types.ModuleType)
    }
    assert public == set(pubguard.__all__) - {"__version__"}
    assert set(pubguard._LAZY) <= set(pubguard.__all__)  # lazy names are listed too
    for name in pubguard.__all__:
        assert getattr(pubguard, name) is not None, name


def test_every_error_a_user_can_catch_is_exported() -> None:
    errors = {
        n
        for n in pubguard.errors.__all__
        if inspect.isclass(getattr(pubguard.errors, n))
        and issubclass(getattr(pubguard.errors, n), pubguard.PubguardError)
    }
    assert errors <= set(pubguard.__all__)
    assert pubguard.FilterRefusedError is pubguard.errors.FilterRefusedError


def test_importing_pubguard_loads_neither_the_client_nor_cryptography() -> None:
    probe = "import json, sys, pubguard\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(out.stdout))
    assert "pubguard.net.client.client" not in loaded and "cryptography" not in loaded
