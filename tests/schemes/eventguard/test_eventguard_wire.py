"""EventGuard's packed wire values: tokens, wrapped keys, permits and the
Merkle path each travel as one bytes value, so routing and meta are flat maps the broker core
freezes on its fast path. Packing round-trips; anything malformed is a ValidationError
(MALFORMED at the broker), never a crash or a silent truncation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.schemes.eventguard.wire import (
    MAX_TOPICS,
    TOKEN_BYTES,
    pack_items,
    pack_tokens,
    parse_tokens,
    unpack_items,
)
from pubguard.wire.messages import Publish


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8))
def test_items_round_trip(items):
    assert unpack_items(pack_items(items), "x", len(items)) == tuple(items)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5), st.data())
def test_truncated_or_extended_items_are_refused(items, data):
    blob = pack_items(items)
    cut = data.draw(st.integers(1, len(blob)))
    with pytest.raises(ValidationError):
        unpack_items(blob[:-cut], "x", len(items))
    with pytest.raises(ValidationError):
        unpack_items(blob + pack_items([b"extra"]), "x", len(items))


@pytest.mark.parametrize("blob", [[b"abc"], "abc", None, 3])
def test_items_must_be_one_bytes_value(blob):
    with pytest.raises(ValidationError):
        unpack_items(blob, "x", 1)


def test_tokens_round_trip_and_strictness():
    toks = [bytes([i]) * TOKEN_BYTES for i in range(3)]
    assert parse_tokens({"tokens": pack_tokens(toks)}) == tuple(toks)
    for bad in (
        {"tokens": b""},
        {"tokens": b"x" * (TOKEN_BYTES + 1)},
        {"tokens": toks},
        {"tokens": b"x" * TOKEN_BYTES * (MAX_TOPICS + 1)},
        {"tokens": pack_tokens(toks), "extra": 1},
        {},
    ):
        with pytest.raises(ValidationError):
            parse_tokens(bad)


def test_packed_publication_is_a_flat_wire_message():
    """The point of packing: every value in routing and meta is a scalar."""
    routing = {"tokens": pack_tokens([b"t" * TOKEN_BYTES])}
    meta = {
        "p": "pub",
        "e": 1,
        "ts": 1.0,
        "wk": pack_items([b"k"]),
        "ad": pack_items([b"a"]),
        "sig": b"s",
        "mi": 0,
        "mn": 2,
        "mp": b"h" * 32,
    }
    m = Publish("e1", "eventguard", routing, b"body", meta)
    assert all(
        isinstance(v, bytes | str | int | float) for v in (*m.routing.values(), *m.meta.values())
    )
