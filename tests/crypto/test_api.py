"""The public names of pubguard.crypto exist and stay importable (others code against them)."""

from __future__ import annotations

import pubguard.crypto as crypto


def test_all_is_complete_and_importable() -> None:
    for name in crypto.__all__:
        assert getattr(crypto, name) is not None, name
    assert len(set(crypto.__all__)) == len(crypto.__all__)
    # the recipes every other layer uses
    assert {
        "H",
        "KH",
        "KeyedHash",
        "seal",
        "open_",
        "aad_for",
        "SigningKey",
        "VerifyKey",
        "wrap",
        "unwrap",
        "SecretBytes",
        "random_bytes",
        "prf_aes_blocks",
        "hkdf",
    } <= set(crypto.__all__)
