"""AEAD: mandatory associated data, algorithm choice, opaque failures, a published vector."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.crypto import ALGORITHMS, DEFAULT_AEAD, SecretBytes, aad_for, open_, seal
from pubguard.errors import InvalidToken, ValidationError

KAT = json.loads((Path(__file__).parent / "kat_vectors.json").read_text())
KEY = SecretBytes(bytes(range(32)))
AAD = aad_for("quote", "price", 7)


@pytest.mark.parametrize("v", KAT["aes256_gcm"])
def test_gcm_kat_opens(v: dict[str, str]) -> None:
    """A blob assembled from the GCM spec's test case 16 opens with our ``open_``."""
    blob = bytes([ALGORITHMS["AES-256-GCM"][0]]) + bytes.fromhex(v["iv"] + v["ct"] + v["tag"])
    assert open_(bytes.fromhex(v["key"]), blob, aad=bytes.fromhex(v["aad"])).hex() == v["pt"]


@pytest.mark.parametrize("alg", list(ALGORITHMS))
def test_roundtrip_every_algorithm(alg: str) -> None:
    blob = seal(KEY, b"secret payload", aad=AAD, alg=alg)
    assert blob[0] == ALGORITHMS[alg][0]
    assert open_(KEY, blob, aad=AAD) == b"secret payload"


def test_default_is_aes_256_gcm() -> None:
    assert DEFAULT_AEAD == "AES-256-GCM"
    assert seal(KEY, b"x", aad=AAD)[0] == ALGORITHMS["AES-256-GCM"][0]


def test_deterministic_with_rng_and_fresh_without() -> None:
    a = seal(KEY, b"m", aad=AAD, rng=random.Random(1))
    assert a == seal(KEY, b"m", aad=AAD, rng=random.Random(1))
    assert seal(KEY, b"m", aad=AAD) != seal(KEY, b"m", aad=AAD)


def test_aad_is_mandatory() -> None:
    with pytest.raises(ValidationError, match="associated data is required"):
        seal(KEY, b"m", aad=b"")


def test_unknown_algorithm() -> None:
    with pytest.raises(ValidationError, match="unknown AEAD algorithm"):
        seal(KEY, b"m", aad=AAD, alg="DES")


def test_ciphertext_bound_to_type_attribute_and_epoch() -> None:
    blob = seal(KEY, b"m", aad=AAD)
    for other in (
        aad_for("quote", "price", 8),
        aad_for("quote", "size", 7),
        aad_for("q", "price", 7),
    ):
        with pytest.raises(InvalidToken):
            open_(KEY, blob, aad=other)


def test_aad_for_is_unambiguous() -> None:
    assert aad_for("ab", "c", 0) != aad_for("a", "bc", 0)
    assert aad_for(b"t", "", 1, b"x") != aad_for(b"t", "", 1, b"", b"x")
    with pytest.raises(ValidationError):
        aad_for("t", "a", -1)


@given(pos=st.integers(min_value=0, max_value=60), bit=st.integers(min_value=0, max_value=7))
def test_any_bit_flip_is_invalid_token(pos: int, bit: int) -> None:
    blob = bytearray(seal(KEY, b"0123456789abcdef", aad=AAD, rng=random.Random(0)))
    pos %= len(blob)
    blob[pos] ^= 1 << bit
    with pytest.raises(InvalidToken) as exc:
        open_(KEY, bytes(blob), aad=AAD)
    assert str(exc.value) == "invalid token"  # opaque: never says which check failed


@pytest.mark.parametrize("blob", [b"", b"\x02", b"\x09" + bytes(40), b"\x02" + bytes(20)])
def test_malformed_blobs(blob: bytes) -> None:
    with pytest.raises(InvalidToken):
        open_(KEY, blob, aad=AAD)


def test_wrong_key() -> None:
    blob = seal(KEY, b"m", aad=AAD)
    with pytest.raises(InvalidToken):
        open_(SecretBytes(bytes(32)), blob, aad=AAD)


def test_key_tree_keys_of_any_length_work() -> None:
    """Keys of other lengths are stretched by HKDF per algorithm (e.g. AES-128 from 32 bytes)."""
    for alg in ALGORITHMS:
        blob = seal(b"k" * 20, b"m", aad=AAD, alg=alg)
        assert open_(b"k" * 20, blob, aad=AAD) == b"m"
