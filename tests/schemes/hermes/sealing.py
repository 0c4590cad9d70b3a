"""What the native sealing tests share: attribute keys for a handful of attribute names (one
counter-nonce AEAD and one 32-byte attribute id each, hermes §3.2, §3.5) and the attribute
values a sealed event may carry."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pubguard.crypto.counter_aead import CounterAead, broker_subkey


def attribute_keys(n: int) -> tuple[list[str], dict[str, Any], dict[bytes, Any]]:
    """``(names, by_name, by_aid)`` for attributes ``a0 .. a<n-1>``: name -> (attribute id,
    cipher) and attribute id -> (name, cipher)."""
    names = [f"a{i}" for i in range(n)]
    ciphers = [CounterAead(broker_subkey(bytes([i + 1]) * 32, "met1")) for i in range(n)]
    aids = [bytes([0xA0 + i]) * 32 for i in range(n)]
    by_name = {a: (i, c) for a, i, c in zip(names, aids, ciphers, strict=True)}
    by_aid = {i: (a, c) for a, i, c in zip(names, aids, ciphers, strict=True)}
    return names, by_name, by_aid


def values(max_text: int) -> st.SearchStrategy[Any]:
    """Attribute values of every wire scalar kind a secure type declares."""
    return st.one_of(
        st.text(max_size=max_text),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False),
        st.booleans(),
    )
