"""H, KH, KeyedHash, HKDF and the AES PRF against published known-answer vectors."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import (
    KH,
    AesPrf,
    H,
    KeyedHash,
    KH_verify,
    SecretBytes,
    hkdf,
    prf_aes_blocks,
    sha256_fast,
)
from pubguard.errors import ValidationError

KAT = json.loads((Path(__file__).parent / "kat_vectors.json").read_text())


def _x(s: str) -> bytes:
    return bytes.fromhex(s)


@pytest.mark.parametrize("v", KAT["sha256"])
def test_sha256_kat(v: dict[str, str]) -> None:
    assert H(_x(v["msg"])).hex() == v["digest"]
    assert sha256_fast(_x(v["msg"])).hexdigest() == v["digest"]


@pytest.mark.parametrize("v", KAT["hmac_sha256"])
def test_hmac_kat(v: dict[str, str]) -> None:
    key, data = _x(v["key"]), _x(v["data"])
    assert KH(key, data).hex() == v["mac"]
    assert KH(SecretBytes(key), data).hex() == v["mac"]
    assert KeyedHash(key)(data).hex() == v["mac"]
    assert KH_verify(key, data, _x(v["mac"]))
    assert not KH_verify(key, data + b"x", _x(v["mac"]))


@given(key=st.binary(max_size=150), data=st.binary(max_size=300))
def test_keyed_hash_is_hmac(key: bytes, data: bytes) -> None:
    kh = KeyedHash(key)
    expected = hmac.new(key, data, hashlib.sha256).digest()
    assert kh(data) == expected
    assert kh(data) == expected  # precomputed states are not consumed by a call


def test_keyed_hash_hides_key() -> None:
    key = bytes(range(32))
    kh = KeyedHash(key)
    assert key.hex() not in repr(kh)
    with pytest.raises(TypeError):
        __import__("pickle").dumps(kh)


@pytest.mark.parametrize("v", KAT["hkdf_sha256"])
def test_hkdf_kat(v: dict) -> None:
    okm = hkdf(_x(v["ikm"]), salt=_x(v["salt"]), info=_x(v["info"]), length=v["length"])
    assert okm.hex() == v["okm"]


@pytest.mark.parametrize("v", KAT["aes_block"])
def test_prf_aes_kat(v: dict[str, str]) -> None:
    assert prf_aes_blocks(_x(v["key"]), _x(v["pt"])).hex() == v["ct"]


def test_prf_blocks_are_independent() -> None:
    """psguard.txt §4.1 F_T(r): one call over many nonces = one call per nonce."""
    key = bytes(range(16))
    blocks = [bytes([i]) * 16 for i in range(5)]
    together = prf_aes_blocks(key, b"".join(blocks))
    assert together == b"".join(prf_aes_blocks(key, b) for b in blocks)
    # a 32-byte routing token selects AES-256; other lengths are hashed to an AES-128 key
    assert prf_aes_blocks(b"t" * 32, blocks[0]) != prf_aes_blocks(b"t" * 16, blocks[0])
    assert len(prf_aes_blocks(b"odd-length-key", blocks[0])) == 16


def test_prf_rejects_partial_blocks() -> None:
    with pytest.raises(ValidationError, match="16-byte blocks"):
        prf_aes_blocks(bytes(16), b"short")


@pytest.mark.parametrize("v", KAT["aes_block"])
def test_aes_prf_kat(v: dict[str, str]) -> None:
    assert AesPrf(_x(v["key"]))(_x(v["pt"])).hex() == v["ct"]


@settings(max_examples=40, deadline=None)
@given(
    key=st.binary(min_size=1, max_size=40),
    calls=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=8),
    data=st.data(),
)
def test_aes_prf_reused_context_equals_fresh_calls(key: bytes, calls: list[int], data) -> None:
    """A kept ECB context gives, call after call, exactly what a fresh context gives."""
    prf = AesPrf(key)
    for n in calls:
        blocks = data.draw(st.binary(min_size=16 * n, max_size=16 * n))
        assert prf(blocks) == prf_aes_blocks(key, blocks)


def test_aes_prf_refuses_partial_blocks_and_keeps_working() -> None:
    prf = AesPrf(bytes(16))
    with pytest.raises(ValidationError, match="16-byte blocks"):
        prf(b"x" * 17)
    assert prf(bytes(16)) == prf_aes_blocks(bytes(16), bytes(16))  # nothing left buffered
    assert bytes(16).hex() not in repr(prf)
    with pytest.raises(TypeError):
        __import__("pickle").dumps(prf)
