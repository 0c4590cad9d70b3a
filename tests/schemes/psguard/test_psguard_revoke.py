"""A psguard broker applies the authority's revocation list (``PSGuardBroker.revoke``): the
revoked publisher's next record is dropped with REVOKED, before any signature work, whether
single-signed or in a Merkle batch; other publishers are untouched; a publisher whose key was
revoked before it was added is refused too; ``psguard-paper`` brokers (which verify nothing,
psguard.txt §2) route on (the next key epoch cuts the publisher off there)."""

from __future__ import annotations

import random
import time

import pytest

from pubguard.errors import DropReason
from pubguard.model import Event
from pubguard.ops.bench.costs import BENCH_TYPE
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from pubguard.schemes.common.revocation_list import apply_revocations
from pubguard.schemes.registry import KeyBundle, make_broker_scheme
from pubguard.wire.messages import Publish

#: every attack on both backends: the Python guard and the native one (pubguard._native)
pytestmark = pytest.mark.usefixtures("backend")


def _setup(tmp_path, profile="psguard"):
    now = time.time()
    bundle = KeyBundle(
        tmp_path, now=now, types=(BENCH_TYPE,), identities=("p1", "p2"), rng=random.Random(3)
    )
    pubs = {n: bundle.client(profile, n, topics=("s0",), now=now) for n in ("p1", "p2")}
    broker = make_broker_scheme(profile, bundle.broker_keys(), now=now)
    return now, pubs, broker


def _check(broker, client, now, n=1):
    evs = [Event({"topic": "s0"}, type=BENCH_TYPE.name, payload=b"x") for _ in range(n)]
    pes = client.protect_events(evs, now=now) if n > 1 else [client.protect_event(evs[0], now=now)]
    ctx = CheckContext(now=now, link=LinkInfo("c:x", LinkKind.CLIENT, "x"), broker_id="b0")
    out = []
    for pe in pes:
        m = Publish(pe.event_id, broker.profile, pe.routing, pe.body, pe.meta)
        broker.decode_event(m.routing)
        out.append(broker.broker_check(m, ctx))
    return out


def test_a_revoked_publisher_is_dropped_and_others_pass(tmp_path):
    now, pubs, broker = _setup(tmp_path)
    assert _check(broker, pubs["p1"], now) == [None]
    assert _check(broker, pubs["p1"], now, n=4) == [None] * 4
    assert apply_revocations([broker], [pubs["p1"].verify_key.to_bytes()]) == 1
    assert _check(broker, pubs["p1"], now) == [DropReason.REVOKED]
    assert _check(broker, pubs["p1"], now, n=4) == [DropReason.REVOKED] * 4
    assert _check(broker, pubs["p2"], now, n=2) == [None, None]


def test_a_key_revoked_before_its_publisher_is_added_is_refused(tmp_path):
    now, pubs, broker = _setup(tmp_path)
    key = broker.publishers.pop("p2")
    broker.revoke(key)
    broker.add_publisher("p2", key)
    assert _check(broker, pubs["p2"], now) == [DropReason.REVOKED]


def test_paper_brokers_verify_nothing_so_they_route_on(tmp_path):
    now, pubs, broker = _setup(tmp_path, "psguard-paper")
    broker.revoke(pubs["p1"].verify_key)
    assert _check(broker, pubs["p1"], now) == [None]
