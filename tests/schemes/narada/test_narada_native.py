"""The native narada publication guard (``pubguard._native``, native/src/guard/narada.rs)
against the Python guard, its spec (narada-secure-delivery.txt §IV-H, Fig. 3; §V-B): for
valid, forged, tampered, replayed, stale, unauthorised and malformed publications the verdict
of ``broker_check`` is the same, and so is the state after each (tokens verified, the
verified-token cache of §VI, the per-entity replay state); and ``Broker.handle_batch``
through ``broker_check_run`` (one native call per frame batch) equals one ``handle`` per
message, on both backends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.broker import Broker
from pubguard.errors import DropReason
from pubguard.model import Event
from pubguard.schemes.narada.broker import NaradaBroker
from tests.native_backends import NATIVE_SKIP, requires_native
from tests.schemes.narada.test_narada import NOW, OTHER, TOPIC, broker_scheme, build_pki, client
from tests.schemes.narada.test_narada_attacks import wire_of
from tests.schemes.native_diff import (
    Counting,
    assert_decided_natively,
    backend_pair,
    check_same,
    mutated,
    with_meta,
)

pytestmark = requires_native

META_KEYS = ("tok", "cert", "kv", "ts", "seq", "sig")
T0 = NOW + 10  # the publications' time


@dataclass
class World:
    pki: Any
    wires: list[dict[str, Any]]
    fingerprints: list[bytes]
    pair: tuple[NaradaBroker, NaradaBroker]
    count: Counting


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    pki = build_pki(tmp_path_factory)
    wires = []
    for who, topic in (("alice", TOPIC), ("dave", TOPIC), ("mallory", OTHER), ("mallory", TOPIC)):
        c = client(pki, who, (TOPIC, OTHER) if who == "mallory" else (TOPIC,))
        for i in range(3):  # mallory on TOPIC: subscribe rights only (unauthorised)
            pe = c.protect_event(Event({"topic": topic, "i": i}), now=T0 + i / 10)
            wires.append(wire_of(pe))
    fps = [pki.entities[n][0].fingerprint for n in ("alice", "dave", "mallory")]
    pair = backend_pair(lambda: broker_scheme(pki))
    count = pair[1]._fast = Counting(pair[1]._fast)
    return World(pki, wires, fps, pair, count)


def state(fps: list[bytes]) -> Any:
    def of(s: NaradaBroker) -> tuple[Any, ...]:
        replay = [s.replay.last("b0", fp) for fp in fps]
        return (s.verifications, s.tokens.hits, s.tokens.misses, len(s.tokens), replay)

    return of


def test_each_kind_of_publication_gets_the_same_verdict(world: World) -> None:
    pair = backend_pair(lambda: broker_scheme(world.pki))
    same = lambda w, t: check_same(*pair, w, t, state(world.fingerprints))  # noqa: E731
    w = world.wires
    assert [same(x, T0 + 1) for x in w[:9]] == ["pass"] * 9
    assert [same(x, T0 + 1) for x in w[9:]] == ["unauthorised"] * 3
    assert pair[1].verifications == 4  # one per token; the cache answers the rest (§VI)
    assert same(w[1], T0 + 2) == "replayed"  # (ts, seq) not after alice's last (§V-B)
    assert same(w[0], T0 + 70) == "stale"
    forged = {**w[2], "body": w[2]["body"] + b"!"}
    assert same(forged, T0 + 2) == "forged"
    assert same(with_meta(w[2], T0, sig=b"x" * 64)[0], T0 + 2) == "forged"
    assert same(with_meta(w[2], T0, kv="1")[0], T0 + 2) == "malformed"
    assert same(with_meta(w[2], T0, tok=None)[0], T0 + 2) == "unauthorised"
    assert same(with_meta(w[2], T0, ts=2**63)[0], T0 + 2) == "stale"  # int64+: Python
    crl = world.pki.ca.revoke(world.pki.entities["dave"][0], now=NOW + 5)
    for s in pair:
        s.update_crl(crl, now=NOW + 5)
    dave = client(world.pki, "dave")
    late = wire_of(dave.protect_event(Event({"topic": TOPIC}), now=T0 + 3))
    assert same(late, T0 + 3) == "revoked"  # the CRL, read on every message (§IV-H1)


@given(data=st.data())
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_publications_get_the_same_verdict(world: World, data: Any) -> None:
    wire, t = data.draw(mutated(world.wires, META_KEYS, ("topic",), T0))
    check_same(*world.pair, wire, t, state(world.fingerprints))


def test_the_native_guard_decided_the_mutated_frames_itself(world: World) -> None:
    """Run after the property (see ``assert_decided_natively``)."""
    assert_decided_natively(world.count)


def test_values_it_does_not_model_fall_back_before_any_state_changes(world: World) -> None:
    _, nat = backend_pair(lambda: broker_scheme(world.pki))
    w = world.wires[0]
    before = state(world.fingerprints)(nat)

    class Blob(bytes):
        __slots__ = ()

    for meta in ({**w["meta"], "seq": 2**64}, {**w["meta"], "sig": Blob(w["meta"]["sig"])}):
        got = nat._fast.check_publish(w["event_id"], TOPIC, w["body"], meta, T0, "b0")
        assert got == "fallback"
    kmc_topic = "kmc/" + "0" * 32  # a KMC service topic: narada §V-A rules, in Python
    assert nat._fast.check_publish("e", kmc_topic, b"", {"src": "x"}, T0, "b0") == "fallback"
    assert state(world.fingerprints)(nat) == before


#: a link's kind, and seconds between batches: the same instant, within the dedup window,
#: past it (a copy reaches the replay check), past the timestamp window (stale)
LINKS = {"c0": "client", "c1": "client", "kid": "child"}
STEPS = st.sampled_from([0.0, 0.0, 0.5, 2.5, 61.0])


def _broker(world: World, backend: str) -> tuple[Broker, NaradaBroker]:
    with native.use(backend):
        scheme = broker_scheme(world.pki, strikes=3, ban=5.0)
    assert scheme.checks_in_runs is (backend == "native")
    b = Broker("b0", [scheme], dedup_window=1.0)
    for link, kind in LINKS.items():
        b.add_link(link, kind)
    return b, scheme


def _core_state(b: Broker, s: NaradaBroker, fps: list[bytes]) -> tuple[Any, ...]:
    strikes = s._strikes.get("b0")
    bans = None if strikes is None else (dict(strikes._strikes), dict(strikes._banned))
    return (b.status(), dict(b.counters), dict(b.drops), len(b._dedup), bans, state(fps)(s))


@given(data=st.data())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_batches_equal_one_message_at_a_time_on_both_backends(world: World, data: Any) -> None:
    wires = world.wires
    frame = st.one_of(
        st.sampled_from(wires),
        st.sampled_from(wires).map(lambda w: {**w, "body": w["body"] + b"!"}),  # forged
        mutated(wires, META_KEYS, ("topic",), T0).map(lambda c: c[0]),
    )
    batch = st.tuples(st.sampled_from(sorted(LINKS)), st.lists(frame, min_size=1, max_size=10))
    batches, t = [], T0
    for (link, ms), step in data.draw(st.lists(st.tuples(batch, STEPS), min_size=1, max_size=5)):
        t += step
        batches.append((link, ms, t))
    results = []
    for backend in ["python"] + (["native"] if NATIVE_SKIP is None else []):
        one, s1 = _broker(world, backend)
        many, s2 = _broker(world, backend)
        want = [a for link, ms, now in batches for m in ms for a in one.handle(m, link, now)]
        got = [a for link, ms, now in batches for a in many.handle_batch(ms, link, now)]
        assert got == want, backend
        st_many = _core_state(many, s2, world.fingerprints)
        assert st_many == _core_state(one, s1, world.fingerprints), backend
        results.append((got, st_many))
    assert all(r == results[0] for r in results)  # native against the reference


def test_a_runs_signatures_are_verified_as_one_batch(world: World) -> None:
    """``broker_check_run`` tries a run's entity signatures as one Ed25519 batch (RFC 8032
    §5.1.7) once the guard has seen their token; a forged frame fails its batch, and every
    signature is then checked alone: the same verdicts as the Python guard either way."""
    alice = client(world.pki, "alice")
    fresh = [
        wire_of(alice.protect_event(Event({"topic": TOPIC, "i": i}), now=T0 + 1)) for i in range(8)
    ]
    forged = {**fresh[6], "body": fresh[6]["body"] + b"!"}
    runs = [fresh[:2], fresh[2:6], [fresh[7], forged]]
    results = []
    for backend in ("python", "native"):
        b, s = _broker(world, backend)
        results.append([b.handle_batch(run, "c0", T0 + 1) for run in runs])
        results[-1].append(_core_state(b, s, world.fingerprints))
        if backend == "native":
            # the first run teaches the guard alice's token; the second is one batch of 4;
            # the third fails its batch (the forged frame) and is checked one by one
            assert s._fast.batch_verified == 4
    assert results[0] == results[1]
    assert dict(b.drops) == {DropReason.FORGED: 1}
