"""Each profile package's face exports its public names, and only names its own modules define
(STYLE.md: each package keeps its public names in ``__all__``; nothing re-exports what moved)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

PACKAGES = ("common", "eventguard", "psguard", "narada", "default")


@pytest.mark.parametrize("name", PACKAGES)
def test_face_exports_names_its_modules_define(name: str) -> None:
    face = importlib.import_module(f"pubguard.schemes.{name}")
    assert face.__doc__ and face.__all__
    assert len(set(face.__all__)) == len(face.__all__)
    for n in face.__all__:
        assert not n.startswith("_"), n
        obj = getattr(face, n)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert obj.__module__.startswith(f"pubguard.schemes.{name}."), (n, obj.__module__)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_module_all_resolves(name: str) -> None:
    face = importlib.import_module(f"pubguard.schemes.{name}")
    for info in pkgutil.iter_modules(face.__path__):
        mod = importlib.import_module(f"pubguard.schemes.{name}.{info.name}")
        for n in getattr(mod, "__all__", ()):
            assert hasattr(mod, n), (mod.__name__, n)
