"""``Publish.trusted``: a publication a broker scheme builds itself (a rewritten routing)
without decoding a wire dict again. It must be the publication the decoder gives for the
same fields (equal, read-only, packed from the same wire dict), on either backend, and
refuse what is not of the common shape with ValidationError (the caller then takes the
constructor, which words the error)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.errors import ValidationError
from pubguard.wire.framing import pack
from pubguard.wire.messages import MAX_BODY_BYTES, MAX_ID_LEN, Publish, decode_publish
from tests.wire.test_messages import odd_maps

ids = st.sampled_from(["e", "x" * MAX_ID_LEN, "", "x" * (MAX_ID_LEN + 1)])


@settings(max_examples=80, deadline=None)
@given(routing=odd_maps, event_id=ids, body=st.sampled_from([b"", b"x"]))
def test_trusted_equals_the_decoded_publication_or_refuses(
    routing: dict, event_id: str, body: bytes
) -> None:
    wire = {"op": "publish", "event_id": event_id, "profile": "p", "routing": dict(routing)}
    if body:
        wire["body"] = body
    want = decode_publish(wire)  # None: not of the common shape
    if want is None:
        with pytest.raises(ValidationError):
            Publish.trusted(event_id, "p", dict(routing), body)
        return
    got = Publish.trusted(event_id, "p", dict(routing), body)
    assert got == want and got.to_wire() == want.to_wire()
    assert got.wire is not None and pack(got.wire) == pack(want.to_wire())
    with pytest.raises(TypeError):
        got.routing["new"] = 1  # type: ignore[index]


def test_trusted_on_both_backends(backend: str) -> None:
    r = {"t": b"\x01" * 32, "s": b"sealed", "n": 3}
    p = Publish.trusted("e1", "hermes-attribute", r)
    assert p == Publish("e1", "hermes-attribute", r)
    with pytest.raises(ValidationError):
        Publish.trusted("e1", "hermes-attribute", {"nested": {"a": 1}})
    with pytest.raises(ValidationError):
        Publish.trusted("e1", "p", {"a": 1}, b"x" * (MAX_BODY_BYTES + 1))
