"""The authority's signed revocation list and the broker-side feed (schemes/common/revocation_list.py):
only the authority's signature counts, the serial only grows, a same-serial list must carry the
same entries, nothing is ever un-revoked, and a list can be applied to the broker schemes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.errors import ValidationError
from pubguard.schemes.common.revocation_list import (
    MAX_SKEW,
    RevocationFeed,
    SignedRevocations,
    apply_revocations,
)
from pubguard.schemes.default.broker import DefaultBroker
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.plain import PlainScheme

rng = random.Random(5)
AUTH = SigningKey.from_seed(rng.randbytes(32))
OTHER = SigningKey.from_seed(rng.randbytes(32))
K1, K2, K3 = (rng.randbytes(32) for _ in range(3))


def rl(serial: int, issued: float, ids=("thief",), keys=(K1,), signer=AUTH) -> bytes:
    return SignedRevocations.sign(
        signer, serial=serial, issued=issued, identities=ids, keys=keys
    ).encode()


def test_round_trip_and_signature():
    blob = rl(3, 10.0, ids=("b", "a", "a"), keys=(K2, K1))
    got = SignedRevocations.decode(blob)
    assert got.serial == 3 and got.issued == 10.0
    assert got.identities == ("a", "b") and got.keys == tuple(sorted((K1, K2)))
    got.verify(AUTH.public)


def test_feed_applies_a_growing_serial_and_yields_only_new_keys():
    f = RevocationFeed(AUTH.public, max_age=30.0)
    assert f.stale(0.0)
    v = f.offer(rl(1, 100.0), now=100.0)
    assert v.outcome == "applied" and v.new_keys == (K1,) and f.serial == 1
    v = f.offer(rl(2, 101.0, keys=(K1, K2)), now=101.0)
    assert v.outcome == "applied" and v.new_keys == (K2,)
    v = f.offer(rl(2, 120.0, keys=(K1, K2)), now=120.0)  # same list, fresher
    assert v.outcome == "current" and f.issued == 120.0 and not f.stale(149.0)
    assert f.stale(151.0)


@pytest.mark.parametrize(
    ("blob", "outcome"),
    [
        (rl(5, 100.0, keys=(K3,), signer=OTHER), "forged"),  # not the authority's
        (rl(1, 100.0, keys=(K3,)), "rollback"),  # lower serial
        (rl(2, 100.0, keys=(K3,)), "conflict"),  # same serial, other entries
        (rl(3, 10.0, keys=(K3,)), "rollback"),  # higher serial, but issued earlier
        (rl(3, 200.0 + MAX_SKEW + 1, keys=(K3,)), "future"),
        (b"\x93\x01\x02\x03", "malformed"),
        (b"", "malformed"),
    ],
)
def test_refused_lists_change_nothing(blob, outcome):
    f = RevocationFeed(AUTH.public)
    f.offer(rl(2, 50.0, keys=(K1, K2)), now=50.0)
    before = (f.current, set(f.revoked))
    v = f.offer(blob, now=200.0)
    assert v.outcome == outcome and not v.accepted and v.new_keys == ()
    assert (f.current, f.revoked) == before and f.refused == 1


def test_a_tampered_list_is_forged():
    blob = bytearray(rl(4, 10.0, keys=(K1, K2)))
    i = blob.index(K2)
    blob[i] ^= 1
    assert RevocationFeed(AUTH.public).offer(bytes(blob), now=10.0).outcome == "forged"


def test_the_signature_does_not_pass_for_another_domain():
    # the list tag separates it from permits signed by the same key
    body = SignedRevocations.decode(rl(1, 1.0))
    assert body.signed_bytes().startswith(b"pubguard/authority/revocations/v1")


def test_bad_entries_are_validation_errors():
    with pytest.raises(ValidationError):
        SignedRevocations(1, 1.0, ("b", "a"), ())
    with pytest.raises(ValidationError):
        SignedRevocations(1, 1.0, (), (b"short",))
    with pytest.raises(ValidationError):
        SignedRevocations(-1, 1.0, (), ())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.sets(st.sampled_from([K1, K2, K3]))), max_size=12))
def test_nothing_is_ever_unrevoked_and_the_serial_never_falls(offers):
    f = RevocationFeed(AUTH.public)
    seen: set[bytes] = set()
    last = -1
    for i, (serial, keys) in enumerate(offers):
        v = f.offer(rl(serial, float(i), keys=tuple(keys)), now=float(i))
        if v.outcome == "applied":
            seen |= keys
        assert f.revoked == seen
        assert (f.serial if f.serial is not None else -1) >= last
        last = f.serial if f.serial is not None else -1


def test_apply_revocations_reaches_the_schemes_that_revoke():
    auth = SigningKey.from_seed(rng.randbytes(32)).public
    d, e = DefaultBroker(auth), EventGuardBroker(auth)
    assert apply_revocations([d, e, PlainScheme()], [K1, K2]) == 2
    assert {K1, K2} <= d.revoked and {K1, K2} <= e.revoked
