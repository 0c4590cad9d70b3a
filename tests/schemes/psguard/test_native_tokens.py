"""Differential tests: randomized-token matching (psguard.txt §4.1 ``<r, F_T(r)>``) gives the
same hits on both backends, for one micro-batch against a token set (TokenSet) and through the
broker's two-stage token index (TokenMatcher)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import SigningKey, prf_aes_blocks
from pubguard.errors import ValidationError
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.psguard.broker import PSGuardBroker
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import PSGuardKeyService
from pubguard.schemes.psguard.match import TokenMatcher
from pubguard.schemes.psguard.record import Schema
from pubguard.schemes.psguard.tokens import TokenSet, match_randomized, tok64
from tests.native_backends import requires_native
from tests.schemes.psguard.test_psguard_match_dense import batches, reference

NOW = 1_000.0
PATIENT = EventType(
    "patient",
    (
        AttributeSpec("topic", "str", kind="topic"),
        AttributeSpec("age", "int", range_size=128, least_count=1),
        AttributeSpec("ward", "str", kind="prefix"),
    ),
)


def on(backend: str, fn):  # type: ignore[no-untyped-def]
    with native.use(backend):  # type: ignore[arg-type]
        return fn()


@requires_native
@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from([16, 32, 20]))
def test_token_set_agrees_with_the_reference(batch, key_len: int) -> None:  # type: ignore[no-untyped-def]
    """Same (event, token) hits in the same order (by token, then event); token lengths other
    than 16 and 32 go through H(k)[:16] on both sides."""
    nonces, tags, toks = batch
    toks = [(t * 2)[:key_len] for t in toks]
    tags = [
        tuple(
            x if i % 2 else tok64(prf_aes_blocks(toks[i % len(toks)], nonces[16 * e : 16 * e + 16]))
            for i, x in enumerate(t)
        )
        for e, t in enumerate(tags)
    ]
    want = match_randomized(nonces, tags, toks)  # the reference, no kept contexts
    py = on("python", lambda: TokenSet(toks).match_batch(nonces, tags))
    nat = on("native", lambda: TokenSet(toks).match_batch(nonces, tags))
    assert py == nat == want
    assert set(nat) == reference(nonces, tags, toks)


def test_token_set_checks_its_input(backend: str) -> None:
    ts = TokenSet([bytes(16)])
    assert ts.is_native == (backend == "native") and "tokens=1" in repr(ts)
    with pytest.raises(ValidationError):
        ts.match_batch(b"x" * 17, [(1,), (2,)])
    with pytest.raises(ValidationError):
        ts.match_batch(b"x" * 32, [(1,)])  # a tag list short
    r = bytes(range(16))
    tag = tok64(prf_aes_blocks(bytes(16), r))
    assert ts.match_batch(r, [np.array([5, tag], dtype=np.int64)]) == [(0, 0)]  # numpy tags
    assert ts.match_batch(b"", []) == [] and TokenSet([]).match_batch(r, [(tag,)]) == []


@pytest.fixture(scope="module")
def world():  # type: ignore[no-untyped-def]
    svc = PSGuardKeyService(KDC(bytes(range(32))), Schema([PATIENT]))
    pub = PSGuardClient("hospital", svc, signing_key=SigningKey.from_seed(bytes(range(1, 33))))
    return svc, pub, PSGuardClient("s", svc), PSGuardBroker()


@requires_native
@settings(max_examples=15, deadline=None)
@given(
    events=st.lists(
        st.tuples(
            st.integers(0, 127),
            st.sampled_from(["cardio", "onco"]),
            st.sampled_from(["a", "ab", "b"]),
        ),
        min_size=1,
        max_size=20,
    ),
    filters=st.lists(
        st.tuples(
            st.integers(0, 127),
            st.integers(0, 127),
            st.sampled_from(["cardio", "onco"]),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_token_matcher_agrees_on_both_backends(world, events, filters) -> None:  # type: ignore[no-untyped-def]
    """The broker's index, one event at a time and in micro-batches (two stages: anchors,
    then the other groups), gives the filters' own answers on both backends."""
    _, pub, sub, b = world
    want_f = {}
    pfs = {}
    for i, (lo, hi, topic, ward) in enumerate(filters):
        text = f'topic = "{topic}" && age >= {min(lo, hi)} && age <= {max(lo, hi)}'
        f = Filter.parse(text + (' && ward prefix "a"' if ward else ""))
        pfs[i] = b.decode_filter(sub.protect_filter(f, now=NOW).filter)
        want_f[i] = f
    evs = [
        Event({"topic": t, "age": a, "ward": w}, id=f"e{j}", type="patient", payload=b"x")
        for j, (a, t, w) in enumerate(events)
    ]
    pes = [
        b.decode_event(pe.routing) for pe in pub.protect_events(evs, now=NOW, rng=random.Random(3))
    ]
    want = [{k for k, f in want_f.items() if f.matches(e)} for e in evs]

    def run() -> tuple[list[set[object]], list[set[object]]]:
        m = TokenMatcher()
        for k, pf in pfs.items():
            m.add(k, pf)
        return [m.match(pe) for pe in pes], m.match_batch(pes)

    assert on("python", run) == on("native", run) == (want, want)
