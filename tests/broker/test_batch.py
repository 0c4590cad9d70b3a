"""``Broker.handle_batch`` equals one ``handle`` call per message: same actions, same state."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pubguard.broker.core as pub_mod
from pubguard.broker import Broker, DeliverTo, Drop
from pubguard.errors import DropReason
from pubguard.model import Filter
from pubguard.schemes import PlainScheme
from tests.broker.helpers import GuardScheme
from tests.model.strategies import events, filters

P = PlainScheme()
LINKS = {"up": "parent", "kid": "child", "c0": "client", "c1": "client", "c2": "client"}
PROFILES = st.sampled_from(["plain"] * 4 + ["guarded", "nope"])
EASY = st.sampled_from([Filter.parse(t) for t in ("a exists", "b exists", "a > 0", 'c >= ""')])


@st.composite
def wire_messages(draw: st.DrawFn) -> tuple[str, Any]:
    link = draw(st.sampled_from(sorted(LINKS)))
    kind = draw(st.sampled_from(["sub", "sub", "unsub", "pub", "pub", "pub", "pub", "junk"]))
    sid = draw(st.sampled_from(["s1", "s2", "s3"]))
    profile = draw(PROFILES)
    if kind == "sub":
        f = P.protect_filter(draw(st.one_of(EASY, EASY, filters)), now=0).filter
        return link, {"op": "subscribe", "sub_id": sid, "profile": profile, "filter": f}
    if kind == "unsub":
        return link, {"op": "unsubscribe", "sub_id": sid, "profile": profile}
    if kind == "pub":
        msg = {
            "op": "publish",
            "event_id": draw(st.sampled_from("abcdefghijklmnop")),
            "profile": profile,
            "routing": {"a": draw(st.integers(-1, 2)), **draw(events)},
        }
        if draw(st.booleans()):
            msg["meta"] = {"sig": draw(st.sampled_from([b"ok", b"no"]))}
        return link, msg
    return link, draw(
        st.sampled_from(
            [
                {"op": "launch"},
                {"op": "publish", "event_id": "z", "profile": "plain", "routing": {"a": [1]}},
                {"op": "publish", "event_id": "", "profile": "plain", "routing": {}},
                {"op": "heartbeat", "seq": 3},
                [],
            ]
        )
    )


DELIVERIES = [0]


def _broker() -> Broker:
    b = Broker("b", [PlainScheme(), GuardScheme()], echo=True)
    for link, kind in LINKS.items():
        b.add_link(link, kind)
    return b


@pytest.mark.parametrize("batch_min", [1, 4, pub_mod.BATCH_MATCH_MIN])
@settings(max_examples=60, deadline=None)
@given(
    msgs=st.lists(wire_messages(), min_size=4, max_size=40),
    cuts=st.lists(st.integers(1, 12), max_size=40),
)
def test_handle_batch_equals_handle_per_message(
    batch_min: int, msgs: list[tuple[str, Any]], cuts: list[int]
) -> None:
    # batches: runs of consecutive messages of one link, each handled at one time
    batches: list[tuple[str, list[Any], float]] = []
    sizes = iter(cuts)
    i = 0
    while i < len(msgs):
        n, link = next(sizes, 12), msgs[i][0]
        j = i
        while j < len(msgs) and j - i < n and msgs[j][0] == link:
            j += 1
        batches.append((link, [m for _, m in msgs[i:j]], i * 0.5))
        i = j
    one, many = _broker(), _broker()
    want = [a for link, ms, now in batches for m in ms for a in one.handle(m, link, now)]
    saved, pub_mod.BATCH_MATCH_MIN = pub_mod.BATCH_MATCH_MIN, batch_min
    try:
        got = [a for link, ms, now in batches for a in many.handle_batch(ms, link, now)]
    finally:
        pub_mod.BATCH_MATCH_MIN = saved
    assert got == want
    DELIVERIES[0] += sum(
        isinstance(a, DeliverTo) and a.message.event.profile == "plain" for a in got
    )
    assert many.routing_snapshot() == one.routing_snapshot()
    assert many.status() == one.status()


def test_the_property_exercised_deliveries() -> None:
    # runs after the property above (file order): its workloads did deliver events
    assert DELIVERIES[0] > 0


# -- a secure profile: psguard, whose token index has match_batch (psguard.txt §3.1) ----------

PS_NOW = 1_000.0
PS_TOPICS = ("cardio", "onco")
PS_FILTERS = [
    f'topic = "{t}" && age >= {lo} && age <= {hi}'
    for t, lo, hi in (("cardio", 0, 60), ("cardio", 40, 127), ("onco", 10, 90))
] + ['topic = "onco"']


def _psguard_pool() -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """A real psguard broker face, subscriptions and publications (some forged, some
    malformed), protected once: the property below only reorders and batches them."""
    import random
    import tempfile

    from pubguard.model import Event
    from pubguard.schemes.registry import HOSPITAL, KeyBundle, make_profile

    with tempfile.TemporaryDirectory() as d:
        bundle = KeyBundle(d, now=PS_NOW, rng=random.Random(3), max_delay=6.0)
        client, broker = make_profile("psguard", bundle, "hospital", now=PS_NOW)
    filters = [client.protect_filter(Filter.parse(t), now=PS_NOW).filter for t in PS_FILTERS]
    r = random.Random(5)
    pubs: list[dict[str, Any]] = []
    for j in range(10):
        e = Event(
            {"topic": PS_TOPICS[j % 2], "age": r.randrange(128), "patientRecord": "x"},
            id=f"p{j}",
            type=HOSPITAL.name,
        )
        pe = client.protect_event(e, now=PS_NOW + (j % 4) - 5.5 * (j >= 8), rng=r)
        pubs.append(
            {
                "op": "publish",
                "event_id": pe.event_id,
                "profile": "psguard",
                "routing": pe.routing,
                "body": pe.body,
                "meta": pe.meta,
            }
        )
    forged = dict(pubs[0], meta={**pubs[0]["meta"], "sig": bytes(64)})
    bad = dict(pubs[1], routing={"nonce": 3})
    return broker, filters, [*pubs, forged, bad]


PS_BROKER, PS_SUBS, PS_PUBS = _psguard_pool()


@st.composite
def psguard_messages(draw: st.DrawFn) -> tuple[str, Any]:
    link = draw(st.sampled_from(sorted(LINKS)))
    kind = draw(st.sampled_from(["sub", "unsub", "pub", "pub", "pub", "pub", "pub", "plain"]))
    sid = draw(st.sampled_from(["s1", "s2", "s3"]))
    if kind == "sub":
        f = draw(st.sampled_from(PS_SUBS))
        return link, {"op": "subscribe", "sub_id": sid, "profile": "psguard", "filter": f}
    if kind == "unsub":
        return link, {"op": "unsubscribe", "sub_id": sid, "profile": "psguard"}
    if kind == "pub":
        return link, draw(st.sampled_from(PS_PUBS))
    return draw(wire_messages())


PS_DELIVERIES = [0]
PS_DROPS: Counter[DropReason] = Counter()


@pytest.mark.parametrize("batch_min", [1, pub_mod.BATCH_MATCH_MIN])
@settings(max_examples=40, deadline=None)
@given(
    msgs=st.lists(psguard_messages(), min_size=4, max_size=40),
    cuts=st.lists(st.integers(1, 12), max_size=40),
)
def test_handle_batch_equals_handle_per_message_psguard(
    batch_min: int, msgs: list[tuple[str, Any]], cuts: list[int]
) -> None:
    # guards run on every publication (signature, timestamp window of 6 s: later batches
    # see stale ones), forged and malformed ones are dropped before the batch is matched
    batches: list[tuple[str, list[Any], float]] = []
    sizes = iter(cuts)
    i = 0
    while i < len(msgs):
        n, link = next(sizes, 12), msgs[i][0]
        j = i
        while j < len(msgs) and j - i < n and msgs[j][0] == link:
            j += 1
        batches.append((link, [m for _, m in msgs[i:j]], PS_NOW + i * 0.5))
        i = j

    def broker() -> Broker:
        b = Broker("b", [PlainScheme(), GuardScheme(), PS_BROKER], echo=True)
        for link, kind in LINKS.items():
            b.add_link(link, kind)
        return b

    one, many = broker(), broker()
    want = [a for link, ms, now in batches for m in ms for a in one.handle(m, link, now)]
    saved, pub_mod.BATCH_MATCH_MIN = pub_mod.BATCH_MATCH_MIN, batch_min
    try:
        got = [a for link, ms, now in batches for a in many.handle_batch(ms, link, now)]
    finally:
        pub_mod.BATCH_MATCH_MIN = saved
    assert got == want
    PS_DELIVERIES[0] += sum(
        isinstance(a, DeliverTo) and a.message.event.profile == "psguard" for a in got
    )
    PS_DROPS.update(a.reason for a in got if isinstance(a, Drop) and a.op == "publish")
    assert many.routing_snapshot() == one.routing_snapshot()
    assert many.status() == one.status()


def test_the_psguard_property_exercised_deliveries_and_drops() -> None:
    assert PS_DELIVERIES[0] > 0
    assert {DropReason.FORGED, DropReason.MALFORMED, DropReason.STALE} <= set(PS_DROPS)
    assert Broker("b", [PS_BROKER])._profile("psguard").batches  # type: ignore[union-attr]
