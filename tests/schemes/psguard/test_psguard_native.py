"""The native PSGuard publication guard (``pubguard._native``, native/src/guard/psguard.rs)
against the Python guard, its spec: for well-formed, generated and mutated publications (one
signature per record, and Merkle batches) the verdict of ``broker_check`` is the same, and so
is the guard's state after each (signatures verified, authenticated Merkle nodes, trees)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings

from pubguard import native
from pubguard.crypto import SigningKey
from pubguard.keys.kdc import KDC
from pubguard.schemes.psguard.broker import PSGuardBroker
from pubguard.schemes.psguard.client import PSGuardClient
from pubguard.schemes.psguard.keyservice import PSGuardKeyService
from pubguard.schemes.psguard.record import Schema
from pubguard.wire.messages import Publish
from tests.native_backends import requires_native
from tests.schemes.native_diff import (
    assert_decided_natively,
    backend_pair,
    check_same,
    counted_pair,
    mutated,
    roots_state,
    with_meta,
)
from tests.schemes.psguard.test_psguard_batch import NOW, PATIENT, ev

pytestmark = requires_native

META_KEYS = ("p", "ts", "e", "h", "s", "sig", "mi", "mn", "mp")
PUB_KEY = SigningKey.from_seed(bytes(range(1, 33)))
OTHER_KEY = SigningKey.from_seed(b"o" * 32)


def _wires() -> list[dict[str, Any]]:
    svc = PSGuardKeyService(KDC(bytes(range(32))), Schema([PATIENT]))
    pub = PSGuardClient("hospital", svc, signing_key=PUB_KEY)
    other = PSGuardClient("clinic", svc, signing_key=OTHER_KEY)
    pes = [pub.protect_event(ev(0, age=20), now=NOW)]  # one signature per record
    for n in (3, 8):
        pes += pub.protect_events([ev(10 * n + i, age=20 + i) for i in range(n)], now=NOW)
    pes += other.protect_events([ev(90 + i, topic="onco") for i in range(2)], now=NOW)
    pes.append(pub.protect_event(ev(99, age=1), now=NOW - 400))  # stale at NOW
    return [Publish(p.event_id, "psguard", p.routing, p.body, p.meta).to_wire() for p in pes]


WIRES = _wires()


def _scheme() -> PSGuardBroker:
    return PSGuardBroker({"hospital": PUB_KEY.public, "clinic": OTHER_KEY.public})


def _pair() -> tuple[PSGuardBroker, PSGuardBroker]:
    return backend_pair(_scheme)


state = roots_state


def same(pair: tuple[PSGuardBroker, PSGuardBroker], wire: dict, now: float) -> str:
    return check_same(*pair, wire, now, state)


def test_well_formed_pass_on_both_and_share_their_batch() -> None:
    pair = _pair()
    got = [same(pair, w, NOW) for w in WIRES]
    assert got == ["pass"] * (len(WIRES) - 1) + ["stale"]
    assert state(pair[1])[0] == 3  # one signature per batch (the single records: none cached)
    for s in pair:
        s.revoke(OTHER_KEY.public)
    assert [same(pair, w, NOW) for w in WIRES[-3:-1]] == ["revoked", "revoked"]
    assert same(pair, WIRES[0], NOW + 400) == "stale"


def test_an_unknown_publisher_is_forged_on_both() -> None:
    with native.use("python"):
        py = PSGuardBroker({"hospital": PUB_KEY.public})
    nat = PSGuardBroker({"hospital": PUB_KEY.public})
    assert [check_same(py, nat, w, NOW, state) for w in WIRES[-3:-1]] == ["forged", "forged"]
    assert check_same(py, nat, WIRES[0], NOW, state) == "pass"


PAIR, COUNT = counted_pair(_scheme)


def _with(i: int, **meta: Any) -> tuple[dict[str, Any], float]:
    return with_meta(WIRES[i], NOW, **meta)


@given(mutated(WIRES, META_KEYS, ("m", "n", "t"), NOW))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(_with(3, mp=bytes(32 * 17)))  # a path longer than MAX_PATH
@example(_with(3, mn=65_537))  # a batch larger than MAX_BATCH
@example(_with(3, mi=None))  # a batch without its index
@example(_with(3, ts=2**63))  # a timestamp past int64: the Python guard decides
@example(_with(0, mn=1, mi=0, mp=b""))  # a record's signature passed off as a root's
@example(_with(0, s=b"\x00"))  # sealed secrets: the canonical form
def test_mutated_publications_get_the_same_verdict(case: tuple[dict[str, Any], float]) -> None:
    assert PAIR is not None
    same(PAIR, *case)


def test_the_native_guard_decided_the_mutated_frames_itself() -> None:
    """Run after the property (see ``assert_decided_natively``)."""
    assert_decided_natively(COUNT)
