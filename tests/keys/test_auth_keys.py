"""The native cover object (``AuthKeys``) against the Python reference's dict.

psguard.txt §3.1 "Authorization Key": the native backend returns a cover's keys as one
read-only mapping whose raw keys stay inside it; it must be the reference's dict in every way a
caller can see (ktids in cover order, keys, Mapping behaviour, equality both ways, typed errors
for bad ranges), and no key may show in its repr, str, errors or pickling (canary).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import SecretBytes
from pubguard.errors import PubguardError
from pubguard.keys import KDC, TopicKeys
from tests.keys.test_kdc_canary import CANARY, _forms
from tests.native_backends import requires_native

pytestmark = requires_native

names = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), min_size=1, max_size=6)
odd = st.one_of(st.integers(-3, 70), st.booleans(), st.floats(0, 8), st.none(), st.just("4"))


def _cover(master: bytes, attr: object, *args: object, snap: object = False) -> object:
    try:
        got = TopicKeys(KDC(SecretBytes(master)).topic_key("w")).numeric_auth_keys(
            attr,  # type: ignore[arg-type]
            *args,  # type: ignore[arg-type]
            snap=snap,  # type: ignore[arg-type]
        )
    except PubguardError as exc:
        return type(exc)
    return [(k, v.reveal()) for k, v in got.items()]


@settings(max_examples=60)
@given(master=st.binary(min_size=16, max_size=40), attr=names, m=st.integers(0, 16), data=st.data())
def test_same_cover_as_the_reference(master: bytes, attr: str, m: int, data: st.DataObject) -> None:
    r, lc = 1 << m, data.draw(st.sampled_from([1, 2, 4]))
    lo = data.draw(st.integers(0, r * lc - 1))
    hi = data.draw(st.integers(lo, r * lc - 1))
    snap = data.draw(st.booleans())
    args = (lo, hi, r * lc, lc)
    with native.use("python"):
        ref = _cover(master, attr, *args, snap=snap)
    with native.use("native"):
        assert _cover(master, attr, *args, snap=snap) == ref


@settings(max_examples=60)
@given(
    attr=st.one_of(names, st.just(""), st.just("a\x00b"), st.none()),
    args=st.tuples(odd, odd, odd, odd),
)
def test_bad_input_gets_the_references_error(attr: object, args: tuple[object, ...]) -> None:
    """Bools, floats, strings, bad ranges and attribute names: the same error (or result)."""
    with native.use("python"):
        ref = _cover(CANARY, attr, *args)
    with native.use("native"):
        assert _cover(CANARY, attr, *args) == ref
        assert _cover(CANARY, attr, *args) == ref  # again: a memo hit must not change it


def test_a_mapping_equal_to_the_dict() -> None:
    with native.use("python"):
        ref = TopicKeys(SecretBytes(CANARY)).numeric_auth_keys("age", 1, 30, 32, 1)
    with native.use("native"):
        tk = TopicKeys(SecretBytes(CANARY))
        got = tk.numeric_auth_keys("age", 1, 30, 32, 1)
        assert tk.numeric_auth_keys("age", 1, 30, 32, 1) is got  # memoised per range
    assert type(got).__name__ == "AuthKeys" and isinstance(got, Mapping)
    assert got == ref and ref == got and dict(got.items()) == ref
    assert list(got) == list(ref) == list(got.keys())
    assert len(got) == len(ref) == 8
    first = next(iter(ref))
    assert first in got and "2" not in got and 3 not in got
    assert got[first] == ref[first] and got.get(first) == ref[first]
    assert got.get("nope") is None and got.get("nope", 1) == 1
    with pytest.raises(KeyError):
        got["0101010101"]
    other = TopicKeys(SecretBytes(bytes(32))).numeric_auth_keys("age", 1, 30, 32, 1)
    assert got != other and got != {} and got != {k: SecretBytes(bytes(32)) for k in ref}


def test_canary_no_key_in_repr_errors_or_pickle() -> None:
    with native.use("native"):
        got = TopicKeys(SecretBytes(CANARY)).numeric_auth_keys("age", 1, 30, 32, 1)
    secrets = [CANARY, *[v.reveal() for v in got.values()]]
    texts = [repr(got), str(got), f"{got}", repr(list(got)), repr(got.values()), repr(got.items())]
    for probe in (lambda: got["11111"], lambda: pickle.dumps(got), lambda: got[b"0"]):
        with pytest.raises(Exception) as info:
            probe()
        texts.append(repr(info.value) + str(info.value))
    blob = "\n".join(texts)
    for s in secrets:
        for form in _forms(s):
            assert form not in blob
