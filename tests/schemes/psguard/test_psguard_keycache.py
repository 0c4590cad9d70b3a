"""psguard.txt §5.2.3 "with key caching": the publisher's and the subscriber's key caches
change costs, never results. With and without the caches the derived tokens and ``K(e)``
components are identical and every event opens to the same plaintext; a cached component
never opens an event the filter's keys alone would refuse; an epoch change starts empty."""

from __future__ import annotations

import dataclasses
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import AesPrf, SigningKey, prf_aes_blocks
from pubguard.errors import InvalidToken, ValidationError
from pubguard.keys.cache import LruCache
from pubguard.keys.kdc import KDC
from pubguard.model import AttributeSpec, Event, EventType, Filter
from pubguard.schemes.psguard.authority import Authority
from pubguard.schemes.psguard.publisher import Publisher
from pubguard.schemes.psguard.record import Schema
from pubguard.schemes.psguard.tokens import randomize

T = EventType(
    "ward",
    (
        AttributeSpec("topic", "str", True, kind="topic"),
        AttributeSpec("age", "int", True, 128, 1, kind="numeric"),
        AttributeSpec("unit", "str", True, kind="category"),
        AttributeSpec("name", "str", True, kind="prefix"),
        AttributeSpec("code", "str", True),
        AttributeSpec("record", "str", False),
    ),
)
SCHEMA = Schema([T])
KDC_ = KDC(b"m" * 32)
SK = SigningKey.from_seed(b"s" * 32)
UNITS = ("/icu/", "/icu/a/", "/icu/b/", "/ward/", "/ward/c/")
FILTERS = (
    'topic = "w0"',
    'topic = "w0" && age >= 20 && age <= 30',
    'topic = "w0" && unit prefix "/icu/"',
    'topic = "w0" && name prefix "ab"',
    'topic = "w0" && code = "x" && age < 64',
)

events = st.builds(
    lambda age, unit, name, code, rec, drop: Event(
        {
            k: v
            for k, v in {
                "topic": "w0",
                "age": age,
                "unit": unit,
                "name": name,
                "code": code,
                "record": rec,
            }.items()
            if k not in drop
        },
        type="ward",
        payload=rec.encode(),
    ),
    st.integers(0, 127),
    st.sampled_from(UNITS),
    st.text("abc", min_size=1, max_size=4),
    st.sampled_from(("x", "y")),
    st.text(max_size=12),
    st.frozensets(st.sampled_from(("age", "unit", "name", "code", "record"))),
)


def _pub(cache_size: int, epoch: int = 0) -> Publisher:
    return Publisher(KDC_, SCHEMA, name="p", signing_key=SK, epoch=epoch, cache_size=cache_size)


@settings(max_examples=40, deadline=None)
@given(st.lists(events, min_size=1, max_size=12), st.integers(0, 2**32))
def test_cache_changes_no_token_key_or_plaintext(evs: list[Event], seed: int) -> None:
    """Two publishers (cached / uncached) fed the same randomness produce byte-identical
    records; cached and uncached filter keys open each to the same event or both refuse."""
    cached, plain = _pub(4096), _pub(0)
    auth = Authority(KDC_, SCHEMA)
    fks = []
    for i, text in enumerate(FILTERS):
        fk = auth.authorise(Filter.parse(text, id=f"f{i}"))
        fks.append((fk, dataclasses.replace(fk, cache_size=0)))
    r1, r2 = random.Random(seed), random.Random(seed)
    for rep in range(2):  # the second pass hits every cache entry
        for j, e in enumerate(evs):
            e = Event(e.attrs, id=f"e{rep}.{j}", type=e.type, payload=e.payload)
            assert cached.event_tokens(e) == plain.event_tokens(e)
            a = cached.protect(e, now_ms=5, rng=r1)
            b = plain.protect(e, now_ms=5, rng=r2)
            assert a == b
            for fk, fk0 in fks:
                try:
                    want = fk0.open(b)
                except InvalidToken:
                    with pytest.raises(InvalidToken):
                        fk.open(a)
                    continue
                assert fk.open(a) == want == e
    assert cached.cache.hits > 0 and len(plain.cache) == 0


def test_cached_component_does_not_widen_authorisation() -> None:
    """A subscriber for ages 20-30 that has cached age 25's component still cannot open age
    35 (psguard.txt §1), and a refused value is never cached."""
    pub = _pub(4096)
    fk = Authority(KDC_, SCHEMA).authorise(
        Filter.parse('topic = "w0" && age >= 20 && age <= 30', id="f")
    )
    ok = pub.protect(Event({"topic": "w0", "age": 25}, id="a", type="ward"), now_ms=1)
    assert fk.open(ok).attrs["age"] == 25
    n = len(fk.cache)
    for i in range(3):
        bad = pub.protect(Event({"topic": "w0", "age": 35}, id=f"b{i}", type="ward"), now_ms=1)
        with pytest.raises(InvalidToken):
            fk.open(bad)
    assert len(fk.cache) == n


def test_epoch_change_starts_with_empty_caches_and_other_keys() -> None:
    e = Event({"topic": "w0", "age": 7, "record": "r"}, id="e", type="ward")
    p0, p1 = _pub(4096, 0), _pub(4096, 1)
    p0.protect(e, now_ms=1)
    assert len(p0.cache) > 0 and len(p1.cache) == 0
    assert p0.event_tokens(e) != p1.event_tokens(e)
    fk0 = Authority(KDC_, SCHEMA, epoch=0).authorise(Filter.parse('topic = "w0"', id="f"))
    with pytest.raises(InvalidToken):
        fk0.open(p1.protect(e, now_ms=1))


def test_caches_show_no_keys() -> None:
    """The caches and their entries print sizes or ``<secret>``, never key bytes."""
    pub = _pub(4096)
    pub.protect(Event({"topic": "w0", "age": 3}, id="e", type="ward"), now_ms=1)
    fk = Authority(KDC_, SCHEMA).authorise(Filter.parse('topic = "w0"', id="f"))
    fk.open(pub.protect(Event({"topic": "w0", "age": 4}, id="e2", type="ward"), now_ms=1))
    assert repr(pub.cache) == f"LruCache(size={len(pub.cache)}, capacity=4096)"
    assert repr(fk.cache) == f"LruCache(size={len(fk.cache)}, capacity=4096)"
    entries = pub.cache.values()  # the public snapshot (entries are (expiry, value))
    assert entries and all(repr(v).endswith("(<secret>)") for v in entries)
    with pytest.raises(TypeError):
        pickle.dumps(pub.cache)


def test_lru_cache_bounds_and_validates() -> None:
    c: LruCache[int, int] = LruCache(2)
    for i in range(5):
        c.put(i, i)
    assert len(c) == 2 and c.get(0) is None and c.get(4) == 4
    c.get(3)
    c.put(5, 5)  # evicts 4, the least recently used
    assert c.get(4) is None and c.get(3) == 3
    with pytest.raises(ValidationError):
        LruCache(-1)
    off: LruCache[int, int] = LruCache(0)
    off.put(1, 1)
    assert off.get(1) is None and len(off) == 0


def test_randomize_with_kept_contexts_equals_fresh() -> None:
    rng = random.Random(1)
    toks = [rng.randbytes(16) for _ in range(5)]
    nonce = rng.randbytes(16)
    kept = [AesPrf(t) for t in toks]
    assert randomize(toks, nonce, prfs=kept) == randomize(toks, nonce)
    assert randomize(toks, nonce) == [prf_aes_blocks(t, nonce) for t in toks]
    with pytest.raises(ValidationError):
        randomize(toks, nonce, prfs=kept[:2])
    with pytest.raises(ValidationError):
        randomize(toks, nonce[:8], prfs=kept)


def test_client_drops_its_publisher_cache_at_an_epoch_change() -> None:
    """PSGuardClient builds one Publisher (and key cache) per epoch; the old one goes."""
    from pubguard.schemes.psguard.client import PSGuardClient
    from pubguard.schemes.psguard.keyservice import PSGuardKeyService

    ks = PSGuardKeyService(KDC_, SCHEMA, epoch_length=100.0)
    c = PSGuardClient("p", ks, signing_key=SK)
    e = Event({"topic": "w0", "age": 9}, type="ward")
    c.protect_event(e, now=10.0)
    p0 = c.publisher(now=10.0)
    assert len(p0.cache) > 0 and p0.epoch == 0
    c.protect_event(e, now=150.0)
    p1 = c.publisher(now=150.0)
    assert p1 is not p0 and p1.epoch == 1 and p1.cache.hits == 0 < len(p1.cache)
