"""The native check of a flat wire map (``pubguard._native.flat_ok``, native/src/wire.rs)
against its spec, :func:`pubguard.wire.messages._flat_ok`: the same answer on generated maps
of every msgpack value, subclasses of the scalar types, integers at msgpack's limits and NaN;
and ``freeze_wire`` gives the same frozen map or the same error on either backend."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.errors import ValidationError
from pubguard.wire import messages
from tests.native_backends import requires_native

pytestmark = requires_native


class Name(str):
    __slots__ = ()


class Blob(bytes):
    __slots__ = ()


class Count(int):
    __slots__ = ()


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**65),
    st.sampled_from([-(2**63), -(2**63) - 1, 2**63, 2**64 - 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.text(max_size=3).map(Name),
    st.binary(max_size=3).map(Blob),
    st.integers(0, 9).map(Count),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2),
)
KEYS = st.one_of(st.text(max_size=4), st.text(max_size=3).map(Name), st.integers(0, 3))


@given(st.dictionaries(KEYS, VALUES, max_size=12))
@settings(max_examples=60, deadline=None)
@example({"ts": 2**64 - 1, "nan": 1.0})
@example({"x": float("nan")})
@example({"x": True, "y": None, "z": b""})
def test_flat_ok_agrees_with_the_python_check(d: dict[Any, Any]) -> None:
    assert native.NATIVE is not None
    assert native.NATIVE.flat_ok(d) is messages._flat_ok(d)


def _freeze(backend: str, d: dict[str, Any]) -> Any:
    with native.use(backend):
        try:
            return dict(messages.freeze_wire(d, what="meta"))
        except ValidationError as exc:
            return str(exc)


@given(st.dictionaries(st.text(max_size=4), VALUES, max_size=8))
@settings(max_examples=30, deadline=None)
def test_freeze_wire_is_the_same_on_both_backends(d: dict[str, Any]) -> None:
    assert _freeze("native", d) == _freeze("python", d)


@pytest.mark.parametrize("n", [messages.MAX_WIRE_ITEMS - 1, messages.MAX_WIRE_ITEMS])
def test_the_item_limit_is_the_same(n: int) -> None:
    d = {str(i): i for i in range(n)}
    assert native.NATIVE is not None
    assert native.NATIVE.flat_ok(d) is messages._flat_ok(d)


def _publish(backend: str, routing: dict[Any, Any], meta: dict[Any, Any]) -> Any:
    with native.use(backend):
        try:
            return messages.publish_wire("e1", "p", routing, b"b", meta)
        except ValidationError as exc:
            return str(exc)


@given(
    st.dictionaries(KEYS, VALUES, max_size=6),
    st.dictionaries(st.text(max_size=4), VALUES, max_size=12),
)
@settings(max_examples=30, deadline=None)
def test_publish_wire_is_the_same_on_both_backends(
    routing: dict[Any, Any], meta: dict[Any, Any]
) -> None:
    """A publisher's wire dict (its flat check runs natively when the backend is on) is
    the same dict, or the same refusal, as on the Python reference."""
    assert _publish("native", routing, meta) == _publish("python", routing, meta)
