"""``Broker.handle_batch`` equals one ``handle`` call per message: same actions, same state."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pubguard.broker.publishing as pub_mod
from pubguard.broker import Broker, DeliverTo
from pubguard.model import Filter
from pubguard.schemes import PlainScheme
from tests.model.strategies import events, filters

from .helpers import GuardScheme

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
        msg = {"op": "publish", "event_id": draw(st.sampled_from("abcdefghijklmnop")),
               "profile": profile, "routing": {"a": draw(st.integers(-1, 2)), **draw(events)}}  # fmt: skip
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
