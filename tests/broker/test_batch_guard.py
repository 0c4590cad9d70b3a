"""``Broker.handle_batch`` through a scheme's run guard (``broker_check_run``: one native call
per frame batch) equals one ``handle`` per message, on both backends: the same actions, the
same core state (counters, drops, duplicate window) and the same guard state (signatures
verified, authenticated Merkle nodes, strikes and bans, replay state), for mixed runs of
valid, forged, tampered, replayed, stale, duplicate and malformed publications of the
eventguard, default and psguard profiles (eventguard.txt §4.4, §4.7; narada §V-B)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.broker import Broker
from pubguard.errors import DropReason
from pubguard.schemes.base import BrokerScheme
from pubguard.schemes.default.broker import DefaultBroker
from pubguard.schemes.eventguard.broker import EventGuardBroker
from pubguard.schemes.psguard.broker import PSGuardBroker
from tests.native_backends import BACKENDS, NATIVE_SKIP
from tests.schemes.default import test_default_native as df
from tests.schemes.eventguard import test_eventguard_native as eg
from tests.schemes.native_diff import mutated
from tests.schemes.psguard import test_psguard_native as ps

#: a source is banned after a few bogus frames, for a while (flood containment runs too)
STRIKES: dict[str, Any] = {"strikes": 4, "ban": 5.0}
LINKS = {"c0": "client", "c1": "client", "kid": "child", "up": "parent"}
#: seconds between batches: the same instant, within the duplicate window (1 s here), past it
#: (a copy then reaches the replay check), past the timestamp window (stale from then on)
STEPS = st.sampled_from([0.0, 0.0, 0.0, 0.5, 2.5, 2.5, 61.0])


def _variants(wires: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each wire publication, and forms an attacker sends: the body tampered (forged), a
    new event id on the same record (the leaf commits to it: forged), the routing broken,
    a copy that is not a valid frame (a duplicate, while its id is in the window)."""
    out = list(wires)
    for w in wires:
        out.append({**w, "body": w["body"] + b"!"})
        out.append({**w, "event_id": w["event_id"] + "x"})
        out.append({**w, "routing": {"junk": 1}})
        out.append({**w, "body": "not bytes"})  # a copy that is malformed as a frame
    return out


PROFILES: dict[str, tuple[Callable[[], BrokerScheme], list[dict[str, Any]], Any]] = {
    "eventguard": (
        lambda: EventGuardBroker(eg.MS.public_key, revoked=[eg.MALLORY], **STRIKES),
        eg.WIRES,
        mutated(eg.WIRES, eg.META_KEYS, ("tokens",), eg.NOW),
    ),
    "default": (
        lambda: DefaultBroker(df.AUTH.public_key, **STRIKES),
        df.WIRES,
        mutated(df.WIRES, df.META_KEYS, ("t", "n", "m"), df.NOW),
    ),
    "psguard": (
        lambda: PSGuardBroker({"hospital": ps.PUB_KEY.public, "clinic": ps.OTHER_KEY.public}),
        ps.WIRES,
        mutated(ps.WIRES, ps.META_KEYS, ("m", "n", "t"), ps.NOW),
    ),
}
START = {"eventguard": eg.NOW, "default": df.NOW, "psguard": ps.NOW}


def _frames(profile: str) -> st.SearchStrategy[list[tuple[str, list[dict[str, Any]], float]]]:
    _, wires, mutants = PROFILES[profile]
    frame = st.one_of(
        st.sampled_from(wires), st.sampled_from(_variants(wires)), mutants.map(lambda c: c[0])
    )
    batch = st.tuples(st.sampled_from(sorted(LINKS)), st.lists(frame, min_size=1, max_size=14))
    return st.lists(st.tuples(batch, STEPS), min_size=1, max_size=8).map(
        lambda bs: _timed(bs, START[profile])
    )


def _timed(bs: list[tuple[tuple[str, list[Any]], float]], t: float) -> list[Any]:
    out = []
    for (link, frames), step in bs:
        t += step
        out.append((link, frames, t))
    return out


def _broker(profile: str, backend: str) -> tuple[Broker, Any]:
    with native.use(backend):
        scheme = PROFILES[profile][0]()
    assert (scheme._fast is not None) == (backend == "native")  # type: ignore[attr-defined]
    b = Broker("b0", [scheme], dedup_window=1.0)
    for link, kind in LINKS.items():
        b.add_link(link, kind)
    return b, scheme


def _state(b: Broker, s: Any) -> tuple[Any, ...]:
    strikes = s._per(b._last_ctx).strikes if hasattr(s, "_per") else None
    bans = None if strikes is None else (dict(strikes._strikes), dict(strikes._banned))
    replay = s.replay.last("b0", df.PUB_KEY.public.to_bytes()) if hasattr(s, "replay") else None
    return (
        b.status(),
        dict(b.counters),
        dict(b.drops),
        len(b._dedup),
        (s.roots.verifications, s.roots.cached_nodes, s.roots.cached_trees),
        bans,
        replay,
    )


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_guard_is_built_with_the_native_backend(profile: str, backend: str) -> None:
    b, s = _broker(profile, backend)
    assert b._profile(s.profile).runs is (backend == "native")  # type: ignore[union-attr]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_batches_equal_one_message_at_a_time_on_both_backends(profile: str, data: Any) -> None:
    batches = data.draw(_frames(profile))
    backends = ["python"] + (["native"] if NATIVE_SKIP is None else [])
    results = []
    for backend in backends:
        one, s1 = _broker(profile, backend)
        many, s2 = _broker(profile, backend)
        want = [a for link, ms, now in batches for m in ms for a in one.handle(m, link, now)]
        got = [a for link, ms, now in batches for a in many.handle_batch(ms, link, now)]
        assert got == want, backend
        assert _state(many, s2) == _state(one, s1), backend
        results.append((got, _state(many, s2)))
    # native against the reference: the same actions and state as the Python guard
    assert all(r == results[0] for r in results)
    RUNS[profile] += sum(len(ms) for _, ms, _ in batches)


RUNS = {p: 0 for p in PROFILES}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_malformed_copy_of_a_held_publication_is_a_duplicate(backend: str) -> None:
    """A copy that is not even a valid frame is dropped as ``duplicate`` undecoded once its
    id is in the window (``handle``); in a batch the held run is checked first."""
    w = eg.WIRES[1]
    batch = [eg.WIRES[0], w, {**w, "body": "not bytes"}]
    one, _ = _broker("eventguard", backend)
    many, _ = _broker("eventguard", backend)
    for b in (one, many):  # the profile in use (a batch's first publication makes it so)
        b._profile("eventguard")
    want = [a for m in batch for a in one.handle(m, "c0", eg.NOW)]
    assert many.handle_batch(batch, "c0", eg.NOW) == want
    assert dict(many.drops) == dict(one.drops) == {DropReason.DUPLICATE: 1}
