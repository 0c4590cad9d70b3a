"""The native attribute sealing and opening of a micro-batch (``native/src/hermes.rs``)
against the Python reference (``content._seal_attribute_run`` / ``_open_attribute_run``):
the same sealed bytes for the same keys and counters, the same opened values and
application ids, tampered and truncated input rejected the same way, and whatever the
extension does not take handed back to the reference (hermes §3.2, §3.5)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.errors import ValidationError
from pubguard.schemes.hermes import content
from pubguard.schemes.hermes.content import Sealed, open_attribute_run, seal_attribute_run
from tests.native_backends import requires_native
from tests.schemes.hermes.sealing import attribute_keys
from tests.schemes.hermes.sealing import values as attribute_values

NAMES, BY_NAME, BY_AID = attribute_keys(6)

values = attribute_values(70)
events = st.tuples(
    st.binary(min_size=32, max_size=32),  # type id
    st.integers(-(2**63), 2**63 - 1),  # ts (ms)
    st.integers(0, 2**64 - 8),  # first counter
    st.text(min_size=1, max_size=12).map(str.encode),  # PHB id
    st.text(max_size=40),  # the application's id
    st.dictionaries(st.sampled_from(NAMES), values, max_size=6),
)


def _seal_jobs(evs: list[Any]) -> list[Any]:
    return [(t, ts, n, phb, app, attrs, BY_NAME) for t, ts, n, phb, app, attrs in evs]


def _open_jobs(evs: list[Any], blobs: list[bytes], keys: dict[bytes, Any]) -> list[Any]:
    out = []
    for (tid, *_), blob in zip(evs, blobs, strict=True):
        s = Sealed.parse(blob)
        out.append((tid, s.ts, s.n, s.body, keys))
    return out


@requires_native
@settings(max_examples=60, deadline=None)
@given(evs=st.lists(events, max_size=5), keep=st.sets(st.sampled_from(NAMES)))
def test_native_seals_and_opens_as_the_reference(evs: list[Any], keep: set[str]) -> None:
    jobs = _seal_jobs(evs)
    want = content._seal_attribute_run(jobs)
    assert native.NATIVE.hermes_seal_run(jobs) == want
    keys = {a: v for a, v in BY_AID.items() if v[0] in keep}  # a broker holding some keys
    ojobs = _open_jobs(evs, want, keys)
    opened = content._open_attribute_run(ojobs)
    assert native.NATIVE.hermes_open_run(ojobs) == opened
    for (_, _, _, _, app, attrs), got in zip(evs, opened, strict=True):
        assert got is not None
        assert got[0] == {k: v for k, v in attrs.items() if k in keep}
        assert got[1] == (app or None if got[0] else None)


@requires_native
@settings(max_examples=60, deadline=None)
@given(ev=events, at=st.integers(0, 10_000), cut=st.integers(0, 10_000), flip=st.integers(1, 255))
def test_tampered_and_truncated_bodies_are_rejected_alike(
    ev: Any, at: int, cut: int, flip: int
) -> None:
    (blob,) = content._seal_attribute_run(_seal_jobs([ev]))
    body = Sealed.parse(blob).body
    tid, ts, n = ev[0], ev[1], ev[2]
    bodies = [body[: cut % (len(body) + 1)]]
    if body:
        i = at % len(body)
        bodies.append(body[:i] + bytes([body[i] ^ flip]) + body[i + 1 :])
    for b in bodies:
        jobs = [(tid, ts, n, b, BY_AID)]
        ref = content._open_attribute_run(jobs)
        assert native.NATIVE.hermes_open_run(jobs) == ref
        if ref[0] is not None:  # still well-formed: only what authenticates is read
            assert set(ref[0][0].items()) <= set(ev[5].items())


def test_the_python_backend_and_the_dispatcher_give_the_same_bytes() -> None:
    ev = (b"\x07" * 32, 1_700_000_000_000, 5, b"met1", "e-1", {"a0": "AB12CDE", "a1": 7})
    jobs = _seal_jobs([ev])
    with native.use("python"):
        py = seal_attribute_run(jobs)
        py_open = open_attribute_run(_open_jobs([ev], py, BY_AID))
    assert py == content._seal_attribute_run(jobs) == seal_attribute_run(jobs)
    assert py_open == [({"a0": "AB12CDE", "a1": 7}, "e-1")]
    assert open_attribute_run(_open_jobs([ev], py, BY_AID)) == py_open


def test_what_the_extension_does_not_take_goes_to_the_reference() -> None:
    """A value outside the model's types, or a counter run past 2**64: the reference
    decides (and words the refusal), whichever backend is active."""
    odd = (b"\x07" * 32, 1, 0, b"met1", "", {"a0": [1, 2]})
    (blob,) = seal_attribute_run(_seal_jobs([odd]))
    assert blob == content._seal_attribute_run(_seal_jobs([odd]))[0]
    s = Sealed.parse(blob)
    assert open_attribute_run([(odd[0], s.ts, s.n, s.body, BY_AID)]) == [({"a0": [1, 2]}, None)]
    late = (b"\x07" * 32, 1, 2**64 - 1, b"met1", "", {"a0": "x", "a1": "y"})
    with pytest.raises(ValidationError):
        seal_attribute_run(_seal_jobs([late]))


# -- the PHB's one call per micro-batch: sealing and wire ids (``seal_attribute_publish_run``)

WIRE_SECRET = bytes(range(32))


def _crypter() -> content.Crypter:
    """A PHB's crypter: only its wire-id key is used here (the seal jobs carry their keys)."""
    from pubguard.schemes.hermes.keygroups import BrokerKeyring
    from pubguard.schemes.hermes.nonces import NonceCounter

    return content.Crypter(
        "met1", "attribute", BrokerKeyring("met1"), NonceCounter("met1"), WIRE_SECRET
    )


def _wire_id_ref(c: content.Crypter, tid: bytes, app: str) -> str:
    """``Crypter.wire_id``'s formula, written out: KH under HKDF(S, info), first 16 bytes."""
    from pubguard.crypto import KeyedHash, hkdf

    key = hkdf(WIRE_SECRET, info=b"pubguard-hermes-wire-id\x00attribute\x00met1")
    return KeyedHash(key)(tid + app.encode())[:16].hex()


@requires_native
@settings(max_examples=60, deadline=None)
@given(evs=st.lists(events, max_size=5))
def test_native_seals_a_run_with_its_wire_ids_as_the_reference(evs: list[Any]) -> None:
    with native.use("native"):
        c = _crypter()  # made with the extension active: it holds the native wire-id key
    jobs = _seal_jobs(evs)
    want = list(
        zip(
            content._seal_attribute_run(jobs),
            [_wire_id_ref(c, e[0], e[4]) for e in evs],
            strict=True,
        )
    )
    key = c.native_wire_key()
    assert key is not None
    assert repr(key) == "HermesWireIdKey(<secret>)"  # the key stays in the extension
    with pytest.raises(TypeError):
        pickle.dumps(key)
    assert native.NATIVE.hermes_seal_publish_run(jobs, key) == want
    assert content.seal_attribute_publish_run(jobs, c) == want
    with native.use("python"):
        assert content.seal_attribute_publish_run(jobs, c) == want
    ids = [(e[0], e[4]) for e in evs]
    assert native.NATIVE.hermes_wire_ids(key, ids) == [w for _, w in want]
