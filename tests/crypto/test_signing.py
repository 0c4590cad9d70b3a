"""Ed25519 and X25519 key wrapping: RFC vectors, tampering, key hygiene."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pubguard.crypto import KemPrivateKey, KemPublicKey, SigningKey, VerifyKey, unwrap, wrap
from pubguard.errors import InvalidToken, ValidationError

KAT = json.loads((Path(__file__).parent / "kat_vectors.json").read_text())


@pytest.mark.parametrize("v", KAT["ed25519"])
def test_ed25519_rfc8032(v: dict[str, str]) -> None:
    sk = SigningKey.from_private_bytes(bytes.fromhex(v["secret"]))
    assert sk.public.to_bytes().hex() == v["public"]
    sig = sk.sign(bytes.fromhex(v["msg"]))
    assert sig.hex() == v["sig"]
    VerifyKey.from_bytes(bytes.fromhex(v["public"])).verify(sig, bytes.fromhex(v["msg"]))


@pytest.mark.parametrize("v", KAT["x25519"])
def test_x25519_rfc7748_public(v: dict[str, str]) -> None:
    assert (
        KemPrivateKey.from_private_bytes(bytes.fromhex(v["private"])).public.to_bytes().hex()
        == v["public"]
    )


def test_verify_rejects_tampering() -> None:
    sk = SigningKey.from_seed(b"s" * 32)
    sig = sk.sign(b"message")
    pk = sk.public
    pk.verify(sig, b"message")
    for bad_sig, msg in [
        (sig, b"messagf"),
        (sig[:-1] + bytes([sig[-1] ^ 1]), b"message"),
        (b"", b"message"),
    ]:
        with pytest.raises(InvalidToken):
            pk.verify(bad_sig, msg)
        assert not pk.is_valid(bad_sig, msg)
    assert not SigningKey.from_seed(b"t" * 32).public.is_valid(sig, b"message")


def test_from_seed_is_deterministic() -> None:
    assert SigningKey.from_seed(b"a" * 32).public == SigningKey.from_seed(b"a" * 32).public
    assert SigningKey.from_seed(b"a" * 32).public != SigningKey.from_seed(b"b" * 32).public


def test_bad_key_bytes_are_typed_errors() -> None:
    with pytest.raises(ValidationError):
        SigningKey.from_private_bytes(b"short")
    with pytest.raises(ValidationError):
        KemPrivateKey.from_private_bytes(b"short")
    with pytest.raises(InvalidToken):
        VerifyKey.from_bytes(b"short")
    with pytest.raises(InvalidToken):
        KemPublicKey.from_bytes(b"short")


def test_wrap_roundtrip_and_binding() -> None:
    alice = KemPrivateKey.generate()
    blob = wrap(alice.public, b"topic key", info=b"topic:news")
    assert unwrap(alice, blob, info=b"topic:news") == b"topic key"
    with pytest.raises(InvalidToken):
        unwrap(alice, blob, info=b"topic:other")
    with pytest.raises(InvalidToken):
        unwrap(KemPrivateKey.generate(), blob, info=b"topic:news")
    with pytest.raises(InvalidToken):
        unwrap(alice, blob[:20], info=b"topic:news")
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(InvalidToken):
        unwrap(alice, tampered, info=b"topic:news")


def test_wrap_with_rng_is_deterministic() -> None:
    bob = KemPrivateKey.from_private_bytes(bytes(range(32)))
    a = wrap(bob.public, b"k", info=b"i", rng=random.Random(3))
    assert a == wrap(bob.public, b"k", info=b"i", rng=random.Random(3))
    assert unwrap(bob, a, info=b"i") == b"k"


def test_private_keys_never_in_repr() -> None:
    sk = SigningKey.from_private_bytes(bytes(range(32)))
    kem = KemPrivateKey.from_private_bytes(bytes(range(32)))
    for obj, priv in [(sk, sk.private_bytes()), (kem, kem.private_bytes())]:
        assert priv.hex() not in repr(obj)
        assert priv.hex()[:16] not in repr(obj)
