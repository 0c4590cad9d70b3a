"""``pubguard.keys.derive_from`` on the native backend is one builtin call
(``pubguard._native.derive_from_api``) that must still follow the active backend, so the
differential tests that switch with ``native.use`` compare two real implementations: under
``use("python")`` the Python reference runs (its hashes are counted here), under
``use("native")`` none of them, with the same key and the same typed errors either way."""

from __future__ import annotations

from typing import Any

import pytest

from pubguard import native
from pubguard.crypto import SecretBytes
from pubguard.errors import KeyError_, ValidationError
from pubguard.keys import derive_from, nakt
from tests.native_backends import requires_native

KEY = SecretBytes(bytes(range(32)))


@requires_native
def test_the_api_follows_the_active_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = nakt.sha256_fast

    def counted(b: bytes) -> Any:
        calls.append(b)
        return real(b)

    monkeypatch.setattr(nakt, "sha256_fast", counted)
    with native.use("native"):
        nat = derive_from("01", KEY, "0110")
    assert calls == []
    with native.use("python"):
        ref = derive_from("01", KEY, "0110")
    assert len(calls) == 2  # psguard.txt §3.1: one H(K || b) per bit below the authorised node
    assert nat == ref and isinstance(nat, SecretBytes)


@pytest.mark.parametrize(
    ("auth", "target", "error"),
    [("1", "0110", KeyError_), ("0x", "0x1", ValidationError), ("01", "0", KeyError_)],
)
def test_refusals_raise_the_typed_error_on_both_backends(
    backend: str, auth: str, target: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        derive_from(auth, KEY, target)
