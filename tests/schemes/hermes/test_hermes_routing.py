"""Hermes profiles on real broker cores (in process, every frame through the wire codec):
delivery limited by capability, the unauthorised broker's view, both attacks of §3.3, the
plaintext cache of §3.4 and capability expiry (hermes-encrypted-access-control.txt)."""

from __future__ import annotations

import random

import msgpack
import pytest

from pubguard.matching.reference import ReferenceMatcher
from pubguard.model.events import AttributeSpec, EventType
from pubguard.model.filters import Filter
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from pubguard.schemes.hermes import HermesBroker, rendezvous_node
from pubguard.schemes.hermes.broker import TYPE_KEY
from pubguard.schemes.hermes.content import Sealed
from pubguard.sim.hermes_world import HermesWorld
from pubguard.wire.messages import Publish

NP = EventType(
    "Numberplate",
    (
        AttributeSpec("numberplate", "str"),
        AttributeSpec("location", "str"),
        AttributeSpec("camera", "int"),
    ),
)
DOMAINS = {"met1": "met", "met2": "met", "metgw": "met", "ccs1": "ccs", "isp1": "isp"}
# isp1 (another domain) is the rendezvous node and root (Fig. 2); the CCS hangs off the Met
TREE = {"met1": "metgw", "met2": "metgw", "ccs1": "metgw", "metgw": "isp1"}
CANARY = "CANARY-Soho-7f3a"


def world(profile: str, refresh_every: float = float("inf")) -> HermesWorld:
    w = HermesWorld(
        profile,
        NP,
        owner="PITO",
        brokers=DOMAINS,
        parent=TREE,
        now=1000.0,
        refresh_every=refresh_every,
    )
    for b in ("met1", "met2", "metgw"):
        assert w.authorise(b)
    w.authorise("ccs1", ["numberplate"])
    w.attach("camera", "met1", publish=["*"])
    w.attach("smith", "met2", subscribe=["*"])
    return w


def frames_of(w: HermesWorld, broker: str) -> list[dict]:
    return [msgpack.unpackb(f, raw=False) for f in w.brokers[broker].frames]


@pytest.mark.parametrize("profile", ["hermes-event", "hermes-attribute"])
def test_subscribers_get_what_the_reference_matcher_says_cut_to_their_capability(
    profile: str,
) -> None:
    w = world(profile)
    w.attach("ccs", "ccs1", subscribe=["numberplate"])
    rng = random.Random(3)
    plates = ["AB12CDE", "AB99XYZ", "XY11AAA"]
    filters = {
        "smith": [Filter.of(("numberplate", "=", "AB12CDE")), Filter.of(("camera", ">", 5))],
        "ccs": [Filter.of(("numberplate", "prefix", "AB"))],
    }
    ref = {c: ReferenceMatcher({i: f for i, f in enumerate(fs)}) for c, fs in filters.items()}
    for c, fs in filters.items():
        for f in fs:
            w.subscribe(c, f)
    events = [
        {"numberplate": rng.choice(plates), "location": f"loc{i}", "camera": rng.randrange(10)}
        for i in range(30)
    ]
    for i, e in enumerate(events):
        w.publish("camera", e, event_id=f"e{i}")
    want_smith = [e for e in events if ref["smith"].match(e)]
    assert [dict(e.attrs) for e in w.clients["smith"].received] == want_smith
    got_ccs = [dict(e.attrs) for e in w.clients["ccs"].received]
    if profile == "hermes-attribute":  # Fig. 1: the CCS reads the numberplate only
        assert got_ccs == [{"numberplate": e["numberplate"]} for e in events if ref["ccs"].match(e)]
    else:  # one key per event: a numberplate-only capability opens nothing, so no delivery
        assert got_ccs == [] and w.refused["ccs1"] == "unauthorised"


@pytest.mark.parametrize("profile", ["hermes-event", "hermes-attribute"])
def test_the_unauthorised_rendezvous_broker_routes_by_type_and_sees_no_plaintext(
    profile: str,
) -> None:
    w = world(profile)
    w.subscribe("smith", Filter.of(("location", "=", CANARY)))
    w.publish("camera", {"numberplate": "AB12CDE", "location": CANARY, "camera": 1})
    assert [e["location"] for e in w.clients["smith"].received] == [CANARY]
    assert w.readable_by("isp1") == []
    frames = w.brokers["isp1"].frames
    assert frames and not any(CANARY.encode() in f or b"AB12CDE" in f for f in frames)
    assert all("k" not in f.get("routing", {}) for f in frames_of(w, "isp1"))  # no cache
    assert all("cap" not in f.get("meta", {}) for f in frames_of(w, "isp1"))  # no client caps


@pytest.mark.parametrize("profile", ["hermes-event", "hermes-attribute"])
def test_probe_subscriptions_of_an_unauthorised_broker_are_refused(profile: str) -> None:
    """§3.3, first attack: a broker routes its own chosen filter toward the root and watches
    what comes back. Plaintext or forged filters from a broker link are dropped."""
    w = HermesWorld(
        profile,
        NP,
        owner="PITO",
        brokers={"met1": "met", "metgw": "met", "evil": "isp"},
        parent={"met1": "metgw", "evil": "metgw"},
        now=1000.0,
    )
    w.authorise("met1")
    w.authorise("metgw")
    w.attach("camera", "met1", publish=["*"])
    tid = w.stype.type_id
    w.inject(
        "metgw",
        "evil",
        {
            "op": "subscribe",
            "sub_id": "p1",
            "profile": profile,
            "filter": {"type": "Numberplate", "constraints": [["numberplate", "=", "AB12CDE"]]},
        },
    )
    forged = {"t": tid, "ts": 1_000_000, "b": "evil", "n": 0}
    forged.update(
        {"c": b"\x00" * 40}
        if profile == "hermes-event"
        else {"a": [[w.stype.attribute_id("numberplate"), b"\x00" * 40]]}
    )
    w.inject(
        "metgw", "evil", {"op": "subscribe", "sub_id": "p2", "profile": profile, "filter": forged}
    )
    reasons = sorted(d.reason.value for d in w.brokers["metgw"].drops)
    assert reasons == ["forged", "unauthorised"]
    w.publish("camera", {"numberplate": "AB12CDE", "location": "x", "camera": 1})
    assert not any(f.get("op") == "publish" for f in frames_of(w, "evil"))


def test_watching_which_filters_match_reveals_no_constraint() -> None:
    """§3.3, second attack: an unauthorised broker on the path keeps the filters it forwards
    and watches which events come back. It sees the type id and ciphertext only; and every
    event of the type is routed to it, so a delivery says nothing about the content."""
    w = HermesWorld(
        "hermes-attribute",
        NP,
        owner="PITO",
        brokers={"met1": "met", "met2": "met", "isp1": "isp", "isp2": "isp"},
        parent={"met2": "isp2", "isp2": "isp1", "met1": "isp1"},
        now=1000.0,
    )
    w.authorise("met1")
    w.authorise("met2")
    w.attach("camera", "met1", publish=["*"])
    w.attach("smith", "met2", subscribe=["*"])
    w.subscribe("smith", Filter.of(("numberplate", "=", CANARY)))
    for plate in (CANARY, "OTHER1", "OTHER2"):
        w.publish("camera", {"numberplate": plate, "location": "l", "camera": 1})
    seen = frames_of(w, "isp2")
    subs = [f for f in seen if f["op"] == "subscribe"]
    assert subs and not any(CANARY.encode() in f for f in w.brokers["isp2"].frames)
    view = w.brokers["isp2"].scheme.decode_filter(subs[0]["filter"])
    assert view.match_all  # nothing of the filter readable here
    pubs = [f for f in seen if f["op"] == "publish"]
    assert len(pubs) == 3  # all three reached isp2: matching is decided at met2, not here
    assert [e["numberplate"] for e in w.clients["smith"].received] == [CANARY]


def test_plaintext_cache_travels_between_equals_and_is_cut_before_a_lesser_hop() -> None:
    w = world("hermes-attribute")
    w.attach("ccs", "ccs1", subscribe=["numberplate"])
    w.subscribe("smith", Filter.of(("camera", ">=", 0)))
    w.subscribe("ccs", Filter.of(("numberplate", "prefix", "AB")))
    w.publish("camera", {"numberplate": "AB12CDE", "location": CANARY, "camera": 1})
    ids = {n: a.hex() for n, a in w.stype.attribute_ids.items()}

    def caches(b: str) -> list[set[str]]:
        return [
            {bytes(a).hex() for a, _ in msgpack.unpackb(f["routing"]["k"]) if a}
            if "k" in f["routing"]
            else set()
            for f in frames_of(w, b)
            if f["op"] == "publish"
        ]

    assert caches("metgw") == [set(ids.values())]  # from met1: same credentials, full cache
    assert caches("met2") == [set(ids.values())]
    assert caches("ccs1") == [{ids["numberplate"]}]  # cut to what the CCS may read
    assert caches("isp1") == [set()]  # stripped before the unauthorised rendezvous node
    assert not any(CANARY.encode() in f for f in w.brokers["ccs1"].frames)
    assert [e.attrs["location"] for e in w.clients["smith"].received] == [CANARY]
    assert [dict(e.attrs) for e in w.clients["ccs"].received] == [{"numberplate": "AB12CDE"}]


def test_a_cache_from_a_neighbour_without_credentials_is_ignored() -> None:
    w = world("hermes-attribute")
    w.subscribe("smith", Filter.of(("numberplate", "=", "AB12CDE")))
    w.publish("camera", {"numberplate": "AB12CDE", "location": "l", "camera": 1}, event_id="e1")
    sealed = next(f for f in frames_of(w, "isp1") if f["op"] == "publish")
    lie = dict(sealed["routing"])
    lie["k"] = msgpack.packb([[w.stype.attribute_id("numberplate"), "LIE"]])  # isp1 reads nothing
    w.inject("metgw", "isp1", {**sealed, "event_id": "e2", "routing": lie})
    assert [e["numberplate"] for e in w.clients["smith"].received] == ["AB12CDE", "AB12CDE"]


def test_expired_or_revoked_capabilities_stop_delivery_within_one_refresh() -> None:
    w = world("hermes-attribute")
    w.attach("ccs", "ccs1", subscribe=["numberplate"], not_after=1100.0)
    w.subscribe("smith", Filter.of(("camera", ">=", 0)))
    w.subscribe("ccs", Filter.of(("numberplate", "prefix", "")))
    w.publish("camera", {"numberplate": "A", "location": "l", "camera": 1})
    assert len(w.clients["ccs"].received) == 1
    w.tick(1100.0)  # the CCS client's capability expired: its broker stops delivering
    w.publish("camera", {"numberplate": "B", "location": "l", "camera": 1})
    assert len(w.clients["ccs"].received) == 1 and len(w.clients["smith"].received) == 2
    for c in w.brokers["met2"].scheme.credentials():  # the owner revokes the broker's own
        w.revoke(c.serial)  # capabilities: it is evicted from its key groups at once
    w.tick(1101.0)  # and its neighbours learn it in the next credential exchange
    w.publish("camera", {"numberplate": "C", "location": "l", "camera": 1})
    assert len(w.clients["smith"].received) == 2
    assert w.readable_by("met2") == []


def test_rendezvous_node_of_the_type_is_the_configured_root() -> None:
    w = world("hermes-event")
    brokers = list(DOMAINS)
    rv = rendezvous_node(w.stype.type_id, brokers)
    assert rv in brokers  # a real cluster configures this broker as the type's tree root


@pytest.mark.parametrize("profile", ["hermes-event", "hermes-attribute"])
def test_broker_links_carry_a_wire_id_and_subscribers_get_the_application_id_back(
    profile: str,
) -> None:
    w = world(profile)
    w.attach("ccs", "ccs1", subscribe=["numberplate"])
    w.subscribe("smith", Filter.of(("camera", ">=", 0)))
    w.subscribe("ccs", Filter.of(("numberplate", "prefix", "AB")))
    canary_id = "CANARY-ID-case-4711"
    w.publish("camera", {"numberplate": "AB12CDE", "location": "x", "camera": 1}, canary_id)
    # the PHB (met1) sealed the id: a broker reads it only where it may read the event (in
    # the ciphertext, or in the plaintext cache from an equal); the others never see it
    assert w.brokers["isp1"].frames
    assert not any(canary_id.encode() in f for f in w.brokers["isp1"].frames)
    wire_ids = {f["event_id"] for b in w.brokers for f in frames_of(w, b) if f["op"] == "publish"}
    assert len(wire_ids) == 1 and len(next(iter(wire_ids))) == 32  # one opaque id per event
    assert [e.id for e in w.clients["smith"].received] == [canary_id]
    if profile == "hermes-attribute":  # the CCS's broker reads the id beside the numberplate
        assert [e.id for e in w.clients["ccs"].received] == [canary_id]
    # the same application event sealed again gets the same wire id (a duplicate downstream)
    phb = w.brokers["met1"].scheme
    view = phb.view(w.stype.type_id)
    assert view is not None
    again = phb.crypter.wire_id(view, canary_id)
    assert wire_ids == {again}
    assert phb.crypter.wire_id(view, "another-id") != again


@pytest.mark.parametrize("profile", ["hermes-event", "hermes-attribute"])
def test_the_wire_id_survives_a_key_refresh_so_a_republication_stays_a_duplicate(
    profile: str,
) -> None:
    """The PHB keys wire ids with its own secret, not a group key: after every group key
    was refreshed (the timer), the same event sealed again under the new keys carries the
    same wire id, and the next broker drops it as a duplicate."""
    w = world(profile, refresh_every=10.0)
    w.subscribe("smith", Filter.of(("camera", ">=", 0)))
    w.publish("camera", {"numberplate": "AB12CDE", "location": "x", "camera": 1}, "e-refresh")
    first = [f for f in frames_of(w, "metgw") if f["op"] == "publish"]
    assert len(first) == 1 and len(w.clients["smith"].received) == 1
    met1 = w.brokers["met1"].scheme
    group = w.stype.type_id.hex() if profile == "hermes-event" else None
    g = group or w.stype.attribute_ids["numberplate"].hex()
    before = met1.keyring.current(g)
    w.tick(w.now + 11.0)  # the traffic keys are refreshed on a timer (§4)
    after = met1.keyring.current(g)
    assert before is not None and after is not None and after.version != before.version
    # the PHB seals the same application event again (as after a client's re-send)
    pub = Publish("e-refresh", profile, {TYPE_KEY: "Numberplate", "numberplate": "AB12CDE"})
    link = LinkInfo("metgw", LinkKind.PARENT, peer="metgw")
    again = met1.outgoing(pub, CheckContext(now=w.now, link=link, broker_id="met1"))
    assert again is not None and again.event_id == first[0]["event_id"]
    ts = [Sealed.parse(r["s"]).ts for r in (again.routing, first[0]["routing"])]
    assert ts[0] != ts[1]  # sealed anew, under the new keys
    w.inject("metgw", "met1", again.to_wire())
    assert [d.reason.value for d in w.brokers["metgw"].drops] == ["duplicate"]
    assert len(w.clients["smith"].received) == 1


def test_a_phb_that_lost_its_keys_suppresses_the_publication_instead_of_failing() -> None:
    """Evicted between the guard and the hop (its poller applied the refresh): nothing leaves
    in clear and nothing raises into the core."""
    w = world("hermes-attribute")
    lonely = HermesBroker("hermes-attribute", "met1", types=[w.stype])  # in no key group
    pub = Publish("e-1", "hermes-attribute", {TYPE_KEY: "Numberplate", "numberplate": "AB"})
    link = LinkInfo("metgw", LinkKind.PARENT, peer="metgw")
    assert lonely.outgoing(pub, CheckContext(now=1000.0, link=link, broker_id="met1")) is None


def test_a_lesser_neighbours_cache_cannot_pass_between_equals_unvetted() -> None:
    """The CCS broker (numberplate only) sends metgw a cache with a forged location: metgw,
    whose next hop met2 is its equal but not the sender's, vets it and drops the lie before
    passing the event on, so Smith gets the true, decrypted location."""
    w = world("hermes-attribute")
    w.subscribe("smith", Filter.of(("camera", ">=", 0)))
    w.publish("camera", {"numberplate": "AB12CDE", "location": "true", "camera": 1}, "e1")
    sealed = next(f for f in frames_of(w, "isp1") if f["op"] == "publish")
    lie = dict(sealed["routing"])
    ids = w.stype.attribute_ids
    lie["k"] = msgpack.packb([[ids["numberplate"], "AB12CDE"], [ids["location"], "FORGED"]])
    w.inject("metgw", "ccs1", {**sealed, "event_id": "e2", "routing": lie})
    assert [e["location"] for e in w.clients["smith"].received] == ["true", "true"]
    relayed = [f for f in frames_of(w, "met2") if f["op"] == "publish"]
    assert len(relayed) == 2 and not any(b"FORGED" in f for f in w.brokers["met2"].frames)


@pytest.mark.parametrize("profile", ["hermes-event", "hermes-attribute"])
def test_a_phb_with_several_broker_links_seals_for_every_one_of_them(profile: str) -> None:
    """A publisher on metgw: the event leaves on several broker links (met2, ccs1 and the
    unauthorised root isp1). Each gets the one sealing and the wire id, never the
    plaintext or the application's id."""
    w = world(profile)
    w.attach("ccs", "ccs1", subscribe=["numberplate"])
    w.attach("gw-camera", "metgw", publish=["*"])
    w.subscribe("smith", Filter.of(("camera", ">=", 0)))
    w.subscribe("ccs", Filter.of(("numberplate", "prefix", "AB")))
    w.publish("gw-camera", {"numberplate": "AB12CDE", "location": CANARY, "camera": 1}, "app-7")
    sent = [f for b in ("isp1", "met2", "ccs1") for f in frames_of(w, b) if f["op"] == "publish"]
    # (under event encryption ccs1, which may read the numberplate only, is in no key group)
    assert len(sent) == (3 if profile == "hermes-attribute" else 2)
    assert len({f["event_id"] for f in sent}) == 1
    assert all(TYPE_KEY not in f["routing"] and f["event_id"] != "app-7" for f in sent)
    assert not any(CANARY.encode() in f for f in w.brokers["isp1"].frames)
    assert not any(b"app-7" in f for f in w.brokers["isp1"].frames)
    assert [e["location"] for e in w.clients["smith"].received] == [CANARY]
    assert [e.id for e in w.clients["smith"].received] == ["app-7"]
