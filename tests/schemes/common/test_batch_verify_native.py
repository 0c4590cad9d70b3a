"""Ed25519 batch verification in the eventguard and default native guards (RFC 8032 §5.1.7,
``native/src/guard/batch.rs``): a run of single-signature publications handed to
``Broker.handle_batch`` has its signatures verified as one batch before the per-frame checks,
and the result must be exactly that of one check per frame. For generated runs mixing valid,
forged (tampered body or signature) and repeated publications, the actions and the state
(broker counters and drops, the verifier's caches and counts, the replay state) of the
Python reference handling one message at a time equal those of the native guard with the
batch and without it (``batch_verify=False``); a forged signature in a batch is still dropped
as ``forged`` and the others are admitted."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.broker import Broker
from pubguard.crypto import SigningKey
from pubguard.errors import DropReason
from pubguard.model import Event, Filter
from pubguard.schemes.default.broker import DEFAULT, DefaultBroker
from pubguard.schemes.default.client import DefaultClient
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.eventguard.client import EventGuardClient
from pubguard.schemes.eventguard.wire import EVENTGUARD
from pubguard.wire.messages import Publish
from tests.native_backends import requires_native
from tests.schemes.default.test_default import NOW as DF_NOW
from tests.schemes.default.test_default import authority
from tests.schemes.eventguard.test_eventguard import make_ms
from tests.schemes.psguard.test_psguard_net import ev

pytestmark = requires_native

EG_NOW = 500.0
TOPIC = "hospital/oncology"
PUB_KEY = SigningKey.from_seed(b"b" * 32)
N_VALID = 8


def _pool(wires: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``N_VALID`` valid publications, then four forgeries under event ids of their own (the
    duplicate window would drop a copy before its guard): two valid ones with a changed body
    and id (the signed leaf differs), and the last two publications made with a flipped
    signature byte (never sent valid)."""
    out = wires[:N_VALID]
    out += [{**w, "event_id": w["event_id"] + "f", "body": w["body"] + b"!"} for w in wires[:2]]
    for w in wires[N_VALID:]:
        sig = bytearray(w["meta"]["sig"])
        sig[5] ^= 1
        out.append({**w, "meta": {**w["meta"], "sig": bytes(sig)}})
    return out


def _eventguard() -> tuple[Callable[..., Any], list[dict[str, Any]], float]:
    ms = make_ms(11)
    pub = EventGuardClient("pub", ms, signing_key=PUB_KEY)
    pub.protect_advertisement(Filter.parse(f'topic = "{TOPIC}"'), now=EG_NOW)
    rng = random.Random(5)
    pes = [
        pub.protect_event(Event({"topic": TOPIC, "i": i}, payload=rng.randbytes(16)), now=EG_NOW)
        for i in range(N_VALID + 2)
    ]
    wires = [Publish(p.event_id, EVENTGUARD, p.routing, p.body, p.meta).to_wire() for p in pes]
    return (
        lambda **kw: EventGuardBroker(ms.public_key, strikes=10_000, **kw),
        _pool(wires),
        EG_NOW,
    )


def _default() -> tuple[Callable[..., Any], list[dict[str, Any]], float]:
    auth = authority()
    c = DefaultClient("hospital", auth, signing_key=PUB_KEY)
    pes = [c.protect_event(ev(20 + i, eid=f"b{i}"), now=DF_NOW) for i in range(N_VALID + 2)]
    wires = [Publish(p.event_id, DEFAULT, p.routing, p.body, p.meta).to_wire() for p in pes]
    return (
        lambda **kw: DefaultBroker(auth.public_key, strikes=10_000, **kw),
        _pool(wires),
        DF_NOW,
    )


PROFILES = {"eventguard": _eventguard(), "default": _default()}


def _broker(profile: str, backend: str, **kw: Any) -> tuple[Broker, Any]:
    make = PROFILES[profile][0]
    with native.use(backend):  # type: ignore[arg-type]
        scheme = make(**kw)
    assert scheme.checks_in_runs is (backend == "native")
    b = Broker("b0", [scheme])
    b.add_link("c0", "client")
    return b, scheme


def _state(b: Broker, s: Any) -> tuple[Any, ...]:
    roots = (s.roots.verifications, s.roots.cached_nodes, s.roots.cached_trees)
    replay = s.replay.last("b0", PUB_KEY.public.to_bytes()) if hasattr(s, "replay") else None
    return (b.status(), dict(b.counters), dict(b.drops), roots, replay)


def _outcomes(profile: str, runs: list[list[int]]) -> list[tuple[Any, ...]]:
    """The actions and final state of: the reference one message at a time, the native
    guard with the batch, and without it (runs one second apart)."""
    wires, now = PROFILES[profile][1], PROFILES[profile][2]
    out = []
    for backend, kw, batched in (
        ("python", {}, False),
        ("native", {}, True),
        ("native", {"batch_verify": False}, True),
    ):
        b, s = _broker(profile, backend, **kw)
        acts = []
        for i, run in enumerate(runs):
            ms = [wires[j] for j in run]
            if batched:
                acts.append(b.handle_batch(ms, "c0", now + i))
            else:
                acts.append([a for m in ms for a in b.handle(m, "c0", now + i)])
        out.append((acts, _state(b, s)))
    return out


RUNS = st.lists(
    st.lists(st.integers(0, N_VALID + 3), min_size=1, max_size=10), min_size=1, max_size=4
)


@given(profile=st.sampled_from(sorted(PROFILES)), runs=RUNS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_batched_run_equals_one_check_per_frame(profile: str, runs: list[list[int]]) -> None:
    ref, batched, single = _outcomes(profile, runs)
    assert batched == ref
    assert single == ref


def test_a_forged_signature_in_a_batch_is_dropped_and_the_others_admitted() -> None:
    for profile in sorted(PROFILES):
        # the first run teaches the guard the permit; the second is one batch of 4; the third
        # (two valid, a changed body, a flipped signature byte) fails its batch, and each of
        # its signatures is then checked alone
        runs = [[0], [1, 2, 3, 4], [5, N_VALID, 6, N_VALID + 3]]
        ref, batched, single = _outcomes(profile, runs)
        assert batched == ref == single, profile
        drops = ref[1][2]
        assert drops == {DropReason.FORGED: 2}, profile
        b, s = _broker(profile, "native")
        wires, now = PROFILES[profile][1], PROFILES[profile][2]
        for i, run in enumerate(runs):
            b.handle_batch([wires[j] for j in run], "c0", now + i)
        assert s._fast.batch_verified == 4, profile
        off, s_off = _broker(profile, "native", batch_verify=False)
        for i, run in enumerate(runs):
            off.handle_batch([wires[j] for j in run], "c0", now + i)
        assert s_off._fast.batch_verified == 0, profile


def test_the_core_bench_reports_one_signature_per_publication_with_and_without_the_batch() -> None:
    from pubguard.ops.bench.costs import NO_BATCH_VERIFY, core_costs

    c = core_costs("default", 12, merkle_batches=(2,), run=4, slices=1)
    assert {"plain", "default", "default" + NO_BATCH_VERIFY, "merkle_2"} == set(c)
    assert all(v > 0 for v in c.values())
