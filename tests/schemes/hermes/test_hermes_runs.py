"""``Broker.handle_batch`` on Hermes runs (``broker_check_run`` + ``outgoing_routed``: one AEAD
batch per micro-batch) against one ``handle`` per message: the same actions, byte for byte
(the same nonces, wire ids and caches), and the same state, on mixed runs with malformed,
unauthorised, forged, duplicate and plaintext-from-a-broker frames, at the publisher's
hosting broker (sealing) and at brokers that receive sealed events (opening, caches).
Two worlds of one seed hold the same keys, so one runs per message and the other in runs."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.broker.actions import Action, Forward
from pubguard.model.events import AttributeSpec, Event, EventType
from pubguard.model.filters import Filter
from pubguard.schemes.hermes.broker import TYPE_KEY
from pubguard.sim.hermes_world import HermesWorld
from pubguard.wire.framing import pack
from tests.schemes.hermes.actions import shape as _shape

NP = EventType(
    "Numberplate",
    (
        AttributeSpec("numberplate", "str"),
        AttributeSpec("location", "str"),
        AttributeSpec("camera", "int"),
    ),
)
DOMAINS = {"met1": "met", "met2": "met", "metgw": "met", "ccs1": "ccs", "isp1": "isp"}
TREE = {"met1": "metgw", "met2": "metgw", "ccs1": "metgw", "metgw": "isp1"}
NOW = 1000.0
PROFILES = ["hermes-event", "hermes-attribute"]


def _world(profile: str) -> HermesWorld:
    w = HermesWorld(profile, NP, owner="PITO", brokers=DOMAINS, parent=TREE, now=NOW, seed=7)
    for b in ("met1", "met2", "metgw"):
        assert w.authorise(b)
    w.authorise("ccs1", ["numberplate"])
    w.attach("camera", "met1", publish=["*"])
    w.attach("smith", "met2", subscribe=["*"])
    w.attach("ccs", "ccs1", subscribe=["numberplate"])
    w.subscribe("smith", Filter.of(("camera", ">", 2)))
    w.subscribe("ccs", Filter.of(("numberplate", "prefix", "AB")))
    return w


def _client_menu(w: HermesWorld, profile: str) -> list[dict[str, Any]]:
    """Client publications at met1: good ones, and each way a client frame is refused."""
    meta = dict(w.clients["camera"].scheme.protect_event(Event({"camera": 1}), now=NOW).meta)

    def pub(eid: str, routing: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return {"op": "publish", "event_id": eid, "profile": profile, "routing": routing, **kw}

    good = [
        {TYPE_KEY: "Numberplate", "numberplate": p, "location": loc, "camera": c}
        for p, loc, c in (("AB12CDE", "Soho", 5), ("XY11AAA", "Bow", 1), ("AB99XYZ", "Kew", 9))
    ]
    return [
        pub("e1", good[0], meta=meta),
        pub("e2", good[1], meta=meta),
        pub("e3", good[2], meta=meta),
        pub("e1", good[1], meta=meta),  # a duplicate id
        pub("bad-attr", {**good[0], "bogus": 1}, meta=meta),  # outside the type: malformed
        pub("bad-type", {**good[0], "camera": "x"}, meta=meta),  # ill-typed: malformed
        pub("no-cap", good[0]),  # no capability: unauthorised
        pub("payload", good[0], meta=meta, body=b"clear"),  # a payload would cross in clear
        pub("sealed", {"t": b"\x00" * 32, "s": b"y" * 40}, meta=meta),
        {"op": "publish", "event_id": "half"},  # undecodable
        {"op": "subscribe", "sub_id": "s", "profile": profile, "filter": {"type": "Numberplate"}},
    ]


def _broker_menu(w: HermesWorld, profile: str) -> list[dict[str, Any]]:
    """Frames metgw may get from met1: the PHB's sealed events (with the cache for an
    equal), and each way a broker frame is refused or distrusted."""
    out: list[dict[str, Any]] = []
    for m in _client_menu(w, profile)[:3]:
        for a in w.brokers["met1"].core.handle(m, "c:camera", NOW):
            if isinstance(a, Forward):
                out.append(msgpack.unpackb(pack(a.message.to_wire()), raw=False))
    sealed = out[0]
    r = sealed["routing"]
    tampered = {**r, "s": r["s"][:-1] + bytes([r["s"][-1] ^ 1])}
    ids = w.stype.attribute_ids
    lie = msgpack.packb([[ids["numberplate"], "AB00LIE"], [ids["camera"], 99]])
    plain = {TYPE_KEY: "Numberplate", "numberplate": "AB12CDE", "location": "x", "camera": 3}
    return [
        *out,
        {**sealed, "event_id": "tampered", "routing": tampered},  # fails to authenticate
        {**sealed, "event_id": "lie", "routing": {**r, "k": lie}},  # a cache to vet
        {**sealed, "event_id": "no-cache", "routing": {k: v for k, v in r.items() if k != "k"}},
        {**sealed, "event_id": "plain", "routing": plain},  # plaintext from a broker
        {**sealed, "event_id": "short-t", "routing": {**r, "t": b"\x01"}},  # malformed
        {**sealed, "event_id": "bad-k", "routing": {**r, "k": b"\xc1"}},  # a malformed cache
        {**sealed, "event_id": "bad-s", "routing": {**r, "s": b"\x00" * 7}},  # read as nothing
        {**sealed, "event_id": "str-s", "routing": {**r, "s": "x"}},  # malformed
    ]


def _state(w: HermesWorld, broker: str) -> Any:
    wb = w.brokers[broker]
    return (
        dict(wb.core.counters),
        dict(wb.core.drops),
        wb.scheme.crypter.counter.next_value,
    )


def _both(profile: str, broker: str, link: str, picks: list[int], cut: list[int]) -> None:
    one, runs = _world(profile), _world(profile)
    menu = (_client_menu if link.startswith("c:") else _broker_menu)(one, profile)
    msgs = [menu[i % len(menu)] for i in picks]
    # (the menus of the two worlds are the same frames: the same seed, the same keys)
    assert menu == (_client_menu if link.startswith("c:") else _broker_menu)(runs, profile)
    want: list[Action] = []
    for m in msgs:
        want += one.brokers[broker].core.handle(m, link, NOW)
    got: list[Action] = []
    bounds = sorted({0, len(msgs), *(c % (len(msgs) + 1) for c in cut)})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        got += runs.brokers[broker].core.handle_batch(msgs[lo:hi], link, NOW)
    assert _shape(got) == _shape(want)
    assert _state(runs, broker) == _state(one, broker)


@pytest.mark.parametrize("profile", PROFILES)
@settings(max_examples=12)
@given(
    picks=st.lists(st.integers(0, 10), min_size=1, max_size=14),
    cut=st.lists(st.integers(0, 14), max_size=2),
)
def test_a_phb_run_seals_as_one_message_at_a_time(
    profile: str, picks: list[int], cut: list[int]
) -> None:
    _both(profile, "met1", "c:camera", picks, cut)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize(
    ("broker", "link"),
    [("metgw", "met1"), ("met2", "metgw"), ("ccs1", "metgw")],
    ids=["relay", "shb", "shb-numberplate-only"],
)
@settings(max_examples=8)
@given(
    picks=st.lists(st.integers(0, 9), min_size=1, max_size=14),
    cut=st.lists(st.integers(0, 14), max_size=2),
)
def test_a_run_of_sealed_events_opens_as_one_message_at_a_time(
    profile: str, broker: str, link: str, picks: list[int], cut: list[int]
) -> None:
    """At metgw (forwards to an equal with the cache, to the CCS cut to the numberplate and
    to the unauthorised root without), and at the two SHBs (deliveries cut to each
    client's capability)."""
    _both(profile, broker, link, picks, cut)


def test_a_phb_run_is_sealed_in_one_aead_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the run hooks: a micro-batch of four events with three attributes each
    is sealed, with its wire ids, in one call (twelve attributes: one native
    ``Crypter.seal_publish_run`` when the extension is built, else one
    ``seal_attribute_publish_run``), and opened in one
    (``Crypter.open_sealed_run``: headers and tuples, one native call when built)."""
    from pubguard.schemes.hermes import content

    calls: list[tuple[int, int]] = []
    seal = content.seal_attribute_publish_run
    monkeypatch.setattr(
        content,
        "seal_attribute_publish_run",
        lambda jobs, c: calls.append((len(jobs), sum(len(j[5]) for j in jobs))) or seal(jobs, c),
    )
    seal_run = content.Crypter.seal_publish_run  # the same, with the routings (native only)

    def counted(self: Any, view: Any, ts: int, items: list[Any]) -> Any:
        got = seal_run(self, view, ts, items)
        if got is not None:
            calls.append((len(items), sum(len(a) for a, _ in items)))
        return got

    monkeypatch.setattr(content.Crypter, "seal_publish_run", counted)
    w = _world("hermes-attribute")
    menu = _client_menu(w, "hermes-attribute")
    w.brokers["met1"].core.handle(menu[0], "c:camera", NOW)  # the profile's first use
    calls.clear()
    run = [menu[1], menu[2], {**menu[0], "event_id": "e4"}, {**menu[1], "event_id": "e5"}]
    acts = w.brokers["met1"].core.handle_batch(run, "c:camera", NOW)
    assert calls == [(4, 12)]
    frames = [msgpack.unpackb(pack(a.message.to_wire()), raw=False) for a in acts]
    opened: list[int] = []
    open_run = content.Crypter.open_sealed_run
    monkeypatch.setattr(
        content.Crypter,
        "open_sealed_run",
        lambda self, jobs: opened.append(len(jobs)) or open_run(self, jobs),
    )
    w.brokers["metgw"].scheme.learn_neighbour("met1", [], now=NOW)  # no cache: it decrypts
    w.brokers["metgw"].core.handle_batch(frames, "met1", NOW)
    assert opened == [4]


@pytest.mark.parametrize("profile", PROFILES)
def test_between_equals_a_run_leaves_without_the_per_message_hook(
    profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§3.4 between equals, decided per neighbour pair at the handshake
    (``passes_through``): metgw hands a run from met1 to met2 as it came, without the
    per-message rewrite (``_outgoing``) for those messages; the hop to the CCS (numberplate
    only) and to the unauthorised root still goes through it, cut and stripped."""
    w = _world(profile)
    scheme = w.brokers["metgw"].scheme
    core = w.brokers["metgw"].core
    assert scheme.passes_through(core.links["met1"], NOW) == frozenset({"met2"})
    assert scheme.passes_through(core.links["ccs1"], NOW) == frozenset()
    assert scheme.passes_through(core.links["isp1"], NOW) == frozenset()
    frames = _broker_menu(w, profile)[:3]
    seen: list[str] = []
    real = scheme._outgoing
    monkeypatch.setattr(
        scheme, "_outgoing", lambda m, pe, ctx: seen.append(ctx.link.peer) or real(m, pe, ctx)
    )
    w.subscribe("smith", Filter.of(("camera", ">=", 0)), "all")  # every event goes to met2
    acts = core.handle_batch(frames, "met1", NOW)
    to = {a.link for a in acts if isinstance(a, Forward)}
    assert "met2" in to and "isp1" in to
    assert "met2" not in seen and "isp1" in seen  # the equal skipped, the root stripped
    for a in acts:
        if isinstance(a, Forward) and a.link == "met2":
            assert a.message.wire is not None  # the frame it arrived as, untouched
        if isinstance(a, Forward) and a.link == "isp1":
            assert "k" not in a.message.routing  # no cache to the unauthorised root
    scheme.learn_neighbour("met2", [], now=NOW)  # met2's credentials gone: decided again
    assert scheme.passes_through(core.links["met1"], NOW) == frozenset()


def test_an_shb_builds_each_delivery_once_from_the_routed_sub_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core hands ``outgoing_routed`` each delivery as its link and matching sub ids
    (no ``Deliver`` built to be dropped); every delivery that comes back is a ``Deliver``
    of the event cut to the client's grant (§4), the same as one ``handle`` per message."""
    from pubguard.broker.actions import DeliverTo
    from pubguard.wire.messages import Deliver

    w = _world("hermes-attribute")
    scheme = w.brokers["met2"].scheme
    routed_msgs: list[Any] = []
    real = scheme.outgoing_routed

    def spy(routed: Any, through: Any, contexts: Any) -> list[Any]:
        routed_msgs.extend(a[1] for _, _, acts in routed for a in acts if a[0].startswith("c:"))
        return real(routed, through, contexts)

    monkeypatch.setattr(scheme, "outgoing_routed", spy)
    frames = _broker_menu(w, "hermes-attribute")[:2]
    acts = w.brokers["met2"].core.handle_batch(frames, "metgw", NOW)
    assert routed_msgs and all(type(m) is tuple and m for m in routed_msgs)
    delivered = [a for a in acts if isinstance(a, DeliverTo)]
    assert len(delivered) == len(routed_msgs)
    assert all(type(a.message) is Deliver and a.message.sub_ids for a in delivered)
    one = _world("hermes-attribute")
    want = [
        a
        for f in _broker_menu(one, "hermes-attribute")[:2]
        for a in one.brokers["met2"].core.handle(f, "metgw", NOW)
    ]
    assert _shape(acts) == _shape(want)
