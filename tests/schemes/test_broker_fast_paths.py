"""The brokers' inlined encodings agree with the reference ones they replace."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import H
from pubguard.schemes.common.guards import pack_fields
from pubguard.schemes.default.broker import _leaf_of
from pubguard.schemes.eventguard.wire import leaf_digest
from pubguard.schemes.eventguard.wire import leaf_digest_fast as _leaf_fast

text = st.text(max_size=12)
blobs = st.lists(st.binary(max_size=40), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    text,
    text,
    text,
    st.integers(0, 2**63 - 1),
    st.floats(allow_nan=False),
    blobs,
    st.binary(max_size=64),
)
def test_eventguard_leaf_fast_is_leaf_digest(eid, profile, pub, epoch, ts, toks, body):
    wrapped = [t[::-1] for t in toks]
    assert _leaf_fast(eid, profile, pub, epoch, ts, toks, wrapped, body) == leaf_digest(
        eid, profile, pub, epoch, ts, toks, wrapped, body
    )


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 2**63 - 1), st.binary(min_size=32, max_size=32))
def test_default_leaf_of_is_the_packed_leaf(signed, seq, pd):
    want = H(pack_fields(b"pubguard/default/leaf/v1\x00", "default", signed, seq, pd))
    assert _leaf_of(signed, seq, pd) == want
