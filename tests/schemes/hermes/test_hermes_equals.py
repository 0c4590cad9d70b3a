"""A middle broker between neighbours of its own credentials (§3.4, Fig. 3; §5.2's setting):
a run from an equal that goes only to equals is routed as plain routes it, with no
per-message hook (``Broker._route_run``'s pass-through branch), and still gives exactly the
actions and state of one ``handle`` per message, plaintext from a broker refused, on mixed
runs. Plus the core's bookkeeping around it: a suppressed delivery's ``sent`` is taken back,
and a held run stops before the duplicate window could evict one of its ids."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.broker import Broker
from pubguard.broker.actions import Action, Drop, Forward
from pubguard.model.events import AttributeSpec, Event, EventType
from pubguard.model.filters import Filter
from pubguard.schemes.base import LinkKind
from pubguard.schemes.hermes.broker import TYPE_KEY
from pubguard.sim.hermes_world import HermesWorld
from pubguard.wire.framing import pack
from tests.schemes.hermes.actions import shape as _shape

T = EventType("Reading", (AttributeSpec("station", "str"), AttributeSpec("level", "int")))
NOW = 1000.0
PROFILES = ["hermes-event", "hermes-attribute"]


def _chain(profile: str) -> HermesWorld:
    """a -> m -> c, one domain, all with the same credentials."""
    w = HermesWorld(
        profile,
        T,
        owner="EA",
        brokers={"a": "d", "m": "d", "c": "d"},
        parent={"a": "m", "m": "c"},
        now=NOW,
        seed=3,
    )
    for b in ("a", "m", "c"):
        assert w.authorise(b)
    w.attach("gauge", "a", publish=["*"])
    return w


def _frames(w: HermesWorld, profile: str, n: int) -> list[dict[str, Any]]:
    """What ``a`` sends ``m`` for ``n`` events (sealed, with the cache), as decoded frames."""
    meta = dict(w.clients["gauge"].scheme.protect_event(Event({"level": 1}), now=NOW).meta)
    out = []
    for i in range(n):
        routing = {TYPE_KEY: "Reading", "station": f"S{i:03d}", "level": i}
        msg = {"op": "publish", "event_id": f"e{i}", "profile": profile, "routing": routing}
        for a in w.brokers["a"].core.handle({**msg, "meta": meta}, "c:gauge", NOW):
            if isinstance(a, Forward):
                out.append(msgpack.unpackb(pack(a.message.to_wire()), raw=False))
    return out


def _menu(w: HermesWorld, profile: str) -> list[dict[str, Any]]:
    good = _frames(w, profile, 3)
    r = good[0]["routing"]
    return [
        *good,
        good[1],  # a copy
        {**good[0], "event_id": "plain", "routing": {TYPE_KEY: "Reading", "level": 1}},
        {**good[0], "event_id": "short-t", "routing": {**r, "t": b"\x01"}},
        {**good[0], "event_id": "str-s", "routing": {**r, "s": "x"}},
        {**good[0], "event_id": "bad-k", "routing": {**r, "k": b"\xc1"}},  # forwarded unread
    ]


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=10, deadline=None)
@given(
    picks=st.lists(st.integers(0, 7), min_size=1, max_size=12),
    cut=st.lists(st.integers(0, 12), max_size=2),
)
def test_between_equals_a_run_is_routed_as_one_message_at_a_time(
    profile: str, picks: list[int], cut: list[int]
) -> None:
    one, runs = _chain(profile), _chain(profile)
    menu = _menu(one, profile)
    assert menu == _menu(runs, profile)  # one seed: the same keys, the same frames
    msgs = [menu[i] for i in picks]
    want: list[Action] = []
    for m in msgs:
        want += one.brokers["m"].core.handle(m, "a", NOW)
    got: list[Action] = []
    bounds = sorted({0, len(msgs), *(c % (len(msgs) + 1) for c in cut)})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        got += runs.brokers["m"].core.handle_batch(msgs[lo:hi], "a", NOW)
    assert _shape(got) == _shape(want)
    for w in (one, runs):
        assert w.brokers["m"].core.counters["sent"] == sum(
            isinstance(a, Forward) for a in (want if w is one else got)
        )
    assert dict(runs.brokers["m"].core.counters) == dict(one.brokers["m"].core.counters)
    assert dict(runs.brokers["m"].core.drops) == dict(one.brokers["m"].core.drops)
    if "plain" in {m["event_id"] for m in msgs}:  # plaintext from a broker: never accepted
        assert any(
            isinstance(a, Drop) and a.message_id == "plain" and a.reason.value == "unauthorised"
            for a in got
        )


@pytest.mark.parametrize("profile", PROFILES)
def test_between_equals_the_run_takes_no_per_message_hook(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """m asks ``passes_through`` once per run and never calls ``outgoing_routed``: the frames
    leave as they arrived (ciphertext and cache untouched and unread, §3.4)."""
    w = _chain(profile)
    core, scheme = w.brokers["m"].core, w.brokers["m"].scheme
    assert scheme.passes_through(core.links["a"], NOW) == frozenset({"c"})
    frames = _frames(w, profile, 4)
    core.handle(frames[0], "a", NOW)  # the profile's first use
    calls = {"outgoing_routed": 0, "passes_through": 0}
    real_out, real_pass = scheme.outgoing_routed, scheme.passes_through

    def count(name: str, real: Any) -> Any:
        def wrapped(*a: Any) -> Any:
            calls[name] += 1
            return real(*a)

        return wrapped

    monkeypatch.setattr(scheme, "outgoing_routed", count("outgoing_routed", real_out))
    monkeypatch.setattr(scheme, "passes_through", count("passes_through", real_pass))
    acts = core.handle_batch(frames[1:], "a", NOW)
    assert calls == {"outgoing_routed": 0, "passes_through": 1}
    assert [a.link for a in acts] == ["c"] * 3
    for a, f in zip(acts, frames[1:], strict=True):
        assert isinstance(a, Forward) and a.message.wire is f  # the frame as it came
        assert "k" in a.message.routing  # the cache rides on to the equal


@pytest.mark.parametrize("profile", PROFILES)
def test_a_neighbour_that_is_not_an_equal_takes_the_rewriting_path(profile: str) -> None:
    """Once c's credentials are gone, the same run goes through ``outgoing_routed``: the cache
    is stripped before the hop to the (now) unauthorised broker."""
    w = _chain(profile)
    core, scheme = w.brokers["m"].core, w.brokers["m"].scheme
    frames = _frames(w, profile, 3)
    scheme.learn_neighbour("c", [], now=NOW)
    acts = core.handle_batch(frames, "a", NOW)
    assert [a.link for a in acts] == ["c"] * 3
    assert all(isinstance(a, Forward) and "k" not in a.message.routing for a in acts)
    assert not any(b"S00" in pack(a.message.to_wire()) for a in acts)  # no plaintext


@pytest.mark.parametrize("profile", PROFILES)
def test_a_suppressed_delivery_is_not_counted_as_sent(profile: str) -> None:
    """A client whose capability has expired gets nothing (§4); the run counts what it sent
    as one ``handle`` per message does."""
    worlds = []
    for _ in range(2):
        w = _chain(profile)
        w.attach("reader", "c", subscribe=["*"], not_after=NOW + 5)
        w.subscribe("reader", Filter.of(("level", ">=", 0)))
        worlds.append(w)
    one, runs = worlds
    later = NOW + 10  # the reader's capability has expired
    frames = _frames(one, profile, 3)
    assert frames == _frames(runs, profile, 3)
    relay = [
        msgpack.unpackb(pack(a.message.to_wire()), raw=False)
        for f in frames
        for a in one.brokers["m"].core.handle(f, "a", NOW)
    ]
    want: list[Action] = []
    for f in relay:
        want += one.brokers["c"].core.handle(f, "m", later)
    got = runs.brokers["c"].core.handle_batch(relay, "m", later)
    assert _shape(got) == _shape(want) == []
    c1, c2 = one.brokers["c"].core.counters, runs.brokers["c"].core.counters
    assert c1["suppressed"] == c2["suppressed"] == 3
    assert c1["sent"] == c2["sent"] == 0


@pytest.mark.parametrize("profile", PROFILES)
def test_a_held_run_is_checked_before_the_duplicate_window_could_evict(profile: str) -> None:
    """A duplicate window of 4 ids and runs of 8: the ids it forgets, and so the copies it
    forwards again, are those of one ``handle`` per message."""
    cores = []
    for _ in range(2):
        w = _chain(profile)
        core = Broker("m", [w.brokers["m"].scheme], dedup_capacity=4)
        core.add_link("a", LinkKind.CHILD, peer="a")
        core.add_link("c", LinkKind.PARENT, peer="c")
        cores.append((w, core))
    (w1, one), (w2, runs) = cores
    frames = _frames(w1, profile, 8)
    assert frames == _frames(w2, profile, 8)
    # e4 fills the window, so recording it forgets e0: the e0 after it is new again
    msgs = [*frames[:5], frames[0], *frames[5:], frames[7], frames[1]]
    want: list[Action] = []
    for m in msgs:
        want += one.handle(m, "a", NOW)
    got = runs.handle_batch(msgs, "a", NOW)
    assert _shape(got) == _shape(want)
    assert dict(runs.drops) == dict(one.drops)
    # e0 and e1 forgotten and forwarded again, the copy of e7 a duplicate
    assert sum(isinstance(a, Forward) for a in got) == 10
    assert [a.message_id for a in got if isinstance(a, Drop)] == [frames[7]["event_id"]]
