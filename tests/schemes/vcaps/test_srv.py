"""SRV (vcaps.txt §5): Song-Wagner-Perrig searchable encryption of the routing vector, the §5
attack scenarios under RV and SRV, and SRV-fast's codewords."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import KeyedHash
from pubguard.model.events import Event
from pubguard.schemes.vcaps import FAST, RV, SRV, SwpKeys, bucket
from pubguard.schemes.vcaps.swp import swp_match_any
from pubguard.schemes.vcaps.tokens import FastRouting, decode_routing, decode_token
from tests.schemes.vcaps.helpers import MASTER
from tests.schemes.vcaps.test_stage import FIG2, fig2

ids16 = st.binary(min_size=16, max_size=16)


@settings(max_examples=50)
@given(words=st.lists(ids16, min_size=1, max_size=6, unique=True), probe=ids16)
def test_swp_finds_exactly_the_words_of_the_document(words: list[bytes], probe: bytes) -> None:
    keys = SwpKeys(MASTER)
    doc = keys.encrypt(words)
    for w in [*words, probe]:
        q = keys.query(w)
        found = swp_match_any(doc, int.from_bytes(q.x, "big"), KeyedHash(q.k))
        assert found == (w in words)


def test_swp_stream_is_fresh_per_document_and_keys_differ_per_publisher() -> None:
    keys = SwpKeys(MASTER)
    w = [os.urandom(16) for _ in range(4)]
    assert not set(keys.encrypt(w)) & set(keys.encrypt(w))
    other = SwpKeys(b"o" * 32)
    q = other.query(w[0])
    assert not swp_match_any(keys.encrypt(w), int.from_bytes(q.x, "big"), KeyedHash(q.k))
    assert "secret" in repr(keys) and q.k.hex() not in repr(q)


N = Event({"a": 30, "d": 1})  # matches F1, F2, F3 (not F4, F5): RV = {1, 2, 3}


def test_under_rv_s2_identifies_s6_and_b2_learns_f3() -> None:
    tree, pub, h = fig2(RV)
    tree.subscribe("B8", "S6", decode_token(RV, pub.register(FIG2["F2"], subscriber="S6")))
    routing = pub.publish(N, now=0.0).routing
    rv = decode_routing(RV, routing)
    assert rv == {h["F1"], h["F2"], h["F3"]}
    assert "S2" in tree.route(rv)
    # scenario 1: S2 knows (externally) that S6 subscribed to F2, whose ID is in its own token
    assert h["F2"] in rv  # -> S6 is a recipient of this notification
    # scenario 2: B2 knows that B3 subscribed to F3 (an ID B2 does not hold) and sees it
    assert h["F3"] not in tree.posets["B2"].nodes() and h["F3"] in rv


def test_under_srv_neither_succeeds_and_cipher_ids_never_repeat() -> None:
    tree, pub, h = fig2(SRV)
    tree.subscribe("B8", "S6", decode_token(SRV, pub.register(FIG2["F2"], subscriber="S6")))
    srv1 = decode_routing(SRV, pub.publish(N, now=0.0).routing)
    srv2 = decode_routing(SRV, pub.publish(N, now=0.0).routing)
    assert len(srv1) == 3 and not set(srv1) & set(srv2)  # same filters, no shared cipher ID
    assert {"S1", "S2", "S3", "S6"} == tree.route(srv1) == tree.route(srv2)
    # scenario 1: what S2 saw of F2 in N1 (its cipher ID, and F2's x_ID) finds nothing in N2
    for c in srv1:
        assert c not in srv2
    x_f2 = int.from_bytes(h["F2"], "big")
    wrong = KeyedHash(os.urandom(16))  # x_ID without k_ID: no test possible
    assert not swp_match_any(srv2, x_f2, wrong)
    # scenario 2: B2 can test its own filters only; F3's cipher ID matches none of them
    b2 = tree.posets["B2"]
    own = [b2.tokens[x] for x in b2.tokens]
    hits = [c for c in srv2 if any(swp_match_any([c], t.xi, t.fk) for t in own)]  # type: ignore[union-attr]
    assert len(hits) == 2 and h["F3"] not in b2.tokens
    assert b2.match(srv2) == {"B4", "B5"}


def test_srv_broker_sees_only_encrypted_relations() -> None:
    tree, pub, h = fig2(SRV)
    wire = pub.register(FIG2["F2"], subscriber="S6")
    tok = decode_token(SRV, wire)
    ids = {pub.filter_id(flt) for flt in FIG2.values()}  # the plaintext IDs
    assert not (set(tok.pred) | set(tok.succ)) & ids and tok.handle not in ids
    # yet B3 finds F3 as F2's parent and F5 as its child (§5.3 Stage II i-ii)
    tree.subscribe("B8", "S6", tok)
    b3 = tree.posets["B3"]
    assert b3.up[tok.handle] == {h["F3"]} and h["F5"] not in b3.nodes()


def test_srv_fast_pads_to_a_bucket_and_never_repeats_a_codeword() -> None:
    tree, pub, h = fig2(FAST)
    v1 = decode_routing(FAST, pub.publish(N, now=0.0).routing)
    v2 = decode_routing(FAST, pub.publish(N, now=0.0).routing)
    assert isinstance(v1, FastRouting) and len(v1.v) == bucket(3) == 8
    assert not v1.v & v2.v and v1.nonce != v2.nonce
    assert tree.route(v1) == {"S1", "S2", "S3"}
    # B2 tests each held filter with one PRF: it finds its two and nothing else
    b2 = tree.posets["B2"]
    found = [x for x, t in b2.tokens.items() if t.prf(v1.nonce) in v1.v]  # type: ignore[union-attr]
    assert sorted(found) == sorted([h["F1"], h["F2"]])
    assert bucket(0) == 8 and bucket(9) == 16 and bucket(200) == 256
