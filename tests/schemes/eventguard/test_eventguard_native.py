"""The native EventGuard publication guard (``pubguard._native``, native/src/guard/) against
the Python guard, its spec: for well-formed, generated and mutated publications the verdict of
``broker_check`` (drop reason, or the exception the core maps to one) is the same, and so is
the guard's state after each (signatures verified, authenticated Merkle nodes, trees). Both
schemes see the same sequence, so their caches of verified permits, roots and inner nodes
are compared along the way (eventguard.txt §4.4, §4.7)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from pubguard.crypto import SigningKey
from pubguard.model import Event, Filter
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.schemes.eventguard.wire import EVENTGUARD
from pubguard.wire.messages import Publish, decode_publish
from tests.native_backends import requires_native
from tests.schemes.eventguard.test_eventguard import make_ms
from tests.schemes.native_diff import (
    assert_decided_natively,
    backend_pair,
    check_same,
    counted_pair,
    mutated,
    roots_state,
    with_meta,
)

pytestmark = requires_native

NOW = 500.0
TOPICS = ("hospital/oncology", "hospital/cardiology")
META_KEYS = ("p", "e", "ts", "sig", "mi", "mn", "mp", "wk", "ad")
PUB_KEY = SigningKey.from_seed(b"p" * 32)


def _wires() -> tuple[Any, list[dict[str, Any]], bytes]:
    ms = make_ms(7)
    pub = EventGuardClient("pub", ms, signing_key=PUB_KEY)
    mallory_key = SigningKey.from_seed(b"m" * 32)
    mallory = EventGuardClient("mallory", ms, signing_key=mallory_key)
    for c in (pub, mallory):
        for t in TOPICS:
            c.protect_advertisement(Filter.parse(f'topic = "{t}"'), now=NOW)
    rng = random.Random(3)
    pes = []
    for n in (1, 3, 8):
        evs = [
            Event({"topic": TOPICS[i % 2], "age": i}, payload=rng.randbytes(16)) for i in range(n)
        ]
        pes += pub.protect_events(evs, now=NOW - 5)
    pes += mallory.protect_events([Event({"topic": TOPICS[0]}, payload=b"x")], now=NOW)
    wires = [Publish(p.event_id, EVENTGUARD, p.routing, p.body, p.meta).to_wire() for p in pes]
    return ms, wires, mallory_key.public.to_bytes()


MS, WIRES, MALLORY = _wires()


def _scheme() -> EventGuardBroker:
    return EventGuardBroker(MS.public_key, revoked=[MALLORY])


def _pair() -> tuple[EventGuardBroker, EventGuardBroker]:
    return backend_pair(_scheme)


state = roots_state


def same(pair: tuple[EventGuardBroker, EventGuardBroker], wire: dict, now: float) -> str:
    return check_same(*pair, wire, now, state)


def test_well_formed_publications_pass_on_both_and_share_their_batch() -> None:
    pair = _pair()
    got = [same(pair, w, NOW) for w in WIRES]
    assert got[:-1] == ["pass"] * (len(WIRES) - 1) and got[-1] == "revoked"
    assert state(pair[1])[0] == 3  # one signature per batch (the revoked one is never checked)
    assert [same(pair, w, NOW + 61) for w in WIRES[:2]] == ["stale", "stale"]


PAIR, COUNT = counted_pair(_scheme)


def _with(i: int, **meta: Any) -> tuple[dict[str, Any], float]:
    return with_meta(WIRES[i], NOW, **meta)


@given(mutated(WIRES, META_KEYS, ("tokens",), NOW))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(_with(4, mp=bytes(32 * 17)))  # a path longer than MAX_PATH
@example(_with(4, mn=65_537))  # a batch larger than MAX_BATCH
@example(_with(4, e=2**64 - 1))
@example(_with(4, ts=2**63))
@example(_with(0, wk=b"\x00\x00\x00\xff"))  # an item's length past the end
@example(({**WIRES[0], "routing": {"tokens": bytes(32 * 65)}}, NOW))  # past MAX_TOPICS
def test_mutated_publications_get_the_same_verdict(case: tuple[dict[str, Any], float]) -> None:
    assert PAIR is not None
    same(PAIR, *case)


def test_the_native_guard_decided_the_mutated_frames_itself() -> None:
    """Run after the property (see ``assert_decided_natively``)."""
    assert_decided_natively(COUNT)


def test_subclassed_values_fall_back_to_the_python_guard() -> None:
    """A value the port does not model (a str subclass, an int beyond 64 bits) is decided by
    the Python guard; the native guard hands it back before changing any state."""

    class Name(str):
        __slots__ = ()

    py, nat = _pair()
    msg = decode_publish(WIRES[0])
    assert msg is not None
    meta = dict(msg.meta)
    for k, v in (("p", Name(meta["p"])), ("e", 2**64), ("ts", 2**80)):
        m = {**meta, k: v}
        got = nat._fast.check_publish(msg.event_id, msg.profile, msg.routing, msg.body, m, NOW)
        assert got == "fallback"
    assert state(nat) == (0, 0, 0)


def test_one_call_per_batch_gives_each_frame_its_verdict() -> None:
    py, nat = _pair()
    msgs = [decode_publish(w) for w in WIRES]
    frames = [(m.event_id, m.profile, m.routing, m.body, m.meta) for m in msgs if m is not None]
    tampered = list(frames[2])
    tampered[3] = frames[2][3] + b"!"  # the body: its leaf differs, the root's signature fails
    got = nat._fast.check_batch([*frames, tuple(tampered)], NOW)
    assert got == [""] * (len(frames) - 1) + ["revoked", "forged"]
    ctx = CheckContext(NOW, LinkInfo("c", LinkKind.CLIENT), "b0")
    assert [py.broker_check(m, ctx) for m in msgs[:-1]] == [None] * (len(msgs) - 1)


@pytest.mark.parametrize("n", [1, 4])
def test_a_revocation_is_read_live(n: int) -> None:
    pair = _pair()
    assert same(pair, WIRES[n], NOW) == "pass"
    for s in pair:
        s.revoke(PUB_KEY.public)
    assert same(pair, WIRES[n], NOW) == "revoked"
