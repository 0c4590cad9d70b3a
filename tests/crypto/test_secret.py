"""SecretBytes: never shows its bytes; constant-time equality; explicit reveal."""

from __future__ import annotations

import logging
import pickle

import pytest

from pubguard.crypto import SecretBytes, random_bytes

CANARY = bytes.fromhex("c0ffee00" * 8)


def test_repr_str_format_hide_bytes(caplog: pytest.LogCaptureFixture) -> None:
    s = SecretBytes(CANARY)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("pubguard.test").debug("key %s %r", s, s)
        logging.getLogger("pubguard.test").debug(f"key {s} {s!r} {s:x}")
    texts = [repr(s), str(s), f"{s}", f"{s:>40}", caplog.text]
    for t in texts:
        assert "c0ffee" not in t
        assert str(CANARY) not in t
    assert "len=32" in repr(s)


def test_reveal_equality_hash_immutability() -> None:
    s = SecretBytes(CANARY)
    assert s.reveal() == CANARY
    assert s == SecretBytes(bytearray(CANARY)) == SecretBytes(memoryview(CANARY)) == SecretBytes(s)
    assert s != SecretBytes(bytes(32))
    assert s != CANARY  # never equal to raw bytes (no accidental comparisons)
    assert len({s, SecretBytes(CANARY)}) == 1
    with pytest.raises(AttributeError):
        s._b = b""  # type: ignore[misc]
    with pytest.raises(TypeError):
        SecretBytes("text")  # type: ignore[arg-type]


def test_pickle_roundtrip_for_spark() -> None:
    s = SecretBytes(CANARY)
    assert pickle.loads(pickle.dumps(s)) == s


def test_random_bytes() -> None:
    import random

    assert len(random_bytes(16)) == 16
    assert random_bytes(16) != random_bytes(16)
    assert random_bytes(8, random.Random(5)) == random_bytes(8, random.Random(5))
