"""Hermes sans-IO pieces: secure types, counter AEAD, the persisted nonce counter, event and
filter sealing, capabilities (hermes-encrypted-access-control.txt §2.2-3.5, §4)."""

from __future__ import annotations

import hashlib
import math
import random
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SigningKey
from pubguard.crypto.counter_aead import (
    CounterAead,
    broker_subkey,
    nonce_of,
    open_each,
    seal_each,
)
from pubguard.errors import DropError, DropReason, InvalidToken, ValidationError
from pubguard.model.events import AttributeSpec, EventType
from pubguard.model.filters import Filter
from pubguard.schemes.hermes import (
    BrokerKeyring,
    Capability,
    Crypter,
    KeyGroupManager,
    NonceCounter,
    RevocationSet,
    SecureEventType,
    TypeView,
    attribute_id,
    check_capability,
    rendezvous_node,
    type_id,
)
from pubguard.schemes.hermes.content import Sealed, pack_attrs, pack_sealed, unpack_attrs
from pubguard.store import Database

NP = EventType(
    "Numberplate",
    (
        AttributeSpec("numberplate", "str"),
        AttributeSpec("location", "str"),
        AttributeSpec("camera", "int"),
    ),
)
OWNER = SigningKey.from_seed(b"\x07" * 32)


def _lp(*parts: str) -> bytes:
    return b"".join(struct.pack(">I", len(p.encode())) + p.encode() for p in parts)


def test_type_and_attribute_ids_are_sha256_of_the_owner_qualified_names() -> None:
    assert (
        type_id("PITO", "Numberplate")
        == hashlib.sha256(b"pubguard-hermes-type\x00" + _lp("PITO", "Numberplate")).digest()
    )
    assert (
        attribute_id("PITO", "Numberplate", "location")
        == hashlib.sha256(
            b"pubguard-hermes-attr\x00" + _lp("PITO", "Numberplate", "location")
        ).digest()
    )
    assert type_id("PITO", "Numberplate") != type_id("Met", "Numberplate")
    assert type_id("ab", "c") != type_id("a", "bc")  # length-prefixed


def test_type_owner_signs_the_definition_and_tampering_is_detected() -> None:
    st_ = SecureEventType.define("PITO", NP, OWNER)
    again = SecureEventType.from_json(st_.to_json())
    assert again.type_id == st_.type_id
    forged = st_.to_json()
    forged["type"]["attributes"][0]["name"] = "plate"
    with pytest.raises(InvalidToken):
        SecureEventType.from_json(forged)


@settings(max_examples=60)
@given(st.binary(max_size=64), st.binary(min_size=1, max_size=32), st.integers(0, 2**64 - 1))
def test_counter_aead_round_trips_and_binds_nonce_and_aad(pt: bytes, aad: bytes, n: int) -> None:
    c = CounterAead(broker_subkey(b"k" * 32, "b1"))
    blob = c.seal(n, pt, aad)
    assert c.open(n, blob, aad) == pt
    with pytest.raises(InvalidToken):
        c.open(n ^ 1, blob, aad)
    with pytest.raises(InvalidToken):
        c.open(n, blob, aad + b"x")


def test_per_broker_subkeys_differ_so_equal_counters_never_share_a_nonce_under_one_key() -> None:
    k = b"k" * 32
    assert broker_subkey(k, "met1") != broker_subkey(k, "met2")
    assert nonce_of(5) == b"\x00" * 4 + (5).to_bytes(8, "big")
    with pytest.raises(ValidationError):
        nonce_of(2**64)


def test_nonce_counter_never_repeats_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "broker.sqlite"
    seen: list[int] = []
    db = Database(path)
    c = NonceCounter("met1", db, block=8)
    for n in (1, 3, 1, 5):
        first = c.take(n)
        seen += range(first, first + n)
    db.close()  # a crash after the last take: only committed marks survive
    db = Database(path)
    c2 = NonceCounter("met1", db, block=8)
    first = c2.take(4)
    after = list(range(first, first + 4))
    assert min(after) > max(seen)
    assert len(set(seen)) == len(seen)
    other = NonceCounter("met2", db, block=8)  # another broker's counter is independent
    assert other.take() == 0
    db.close()


def _world(mode: str) -> tuple[SecureEventType, KeyGroupManager, dict[str, BrokerKeyring]]:
    stype = SecureEventType.define("PITO", NP, OWNER)
    mgr = KeyGroupManager(stype, mode)
    rings = {}
    for i, (b, attrs) in enumerate(
        [("met1", ("*",)), ("met2", ("*",)), ("ccs1", ("numberplate",))]
    ):
        cap = Capability.issue(
            OWNER,
            holder=b,
            type_id=stype.type_id,
            action="subscribe",
            attributes=attrs,
            not_before=0.0,
            serial=i + 1,
        )
        rings[b] = BrokerKeyring(b)
        try:
            res = mgr.join(b, cap, now=10.0 + i, rng=random.Random(i))
        except DropError:
            continue
        rings[b].welcome(res.welcomes)
        for r in rings.values():
            r.apply(res.rekeys)
    return stype, mgr, rings


@pytest.mark.parametrize("mode", ["event", "attribute"])
def test_events_seal_at_the_phb_and_open_where_keys_are_held(mode: str) -> None:
    stype, _, rings = _world(mode)
    view = TypeView.of(stype)
    phb = Crypter("met1", mode, rings["met1"], NonceCounter("met1"))
    attrs = {"numberplate": "AB12CDE", "location": "Soho", "camera": 7}
    sealed = phb.seal_event(view, attrs, 20_000)
    assert b"Soho" not in repr(sealed).encode()
    assert (
        Crypter("met2", mode, rings["met2"], NonceCounter("met2")).open_event(view, sealed) == attrs
    )
    ccs = Crypter("ccs1", mode, rings["ccs1"], NonceCounter("ccs1")).open_event(view, sealed)
    # §3.2: attribute encryption lets the CCS read the numberplate alone; event mode nothing
    assert ccs == ({"numberplate": "AB12CDE"} if mode == "attribute" else {})


def test_an_attribute_ciphertext_moved_to_another_attribute_or_type_fails() -> None:
    stype, _, rings = _world("attribute")
    view = TypeView.of(stype)
    phb = Crypter("met1", "attribute", rings["met1"], NonceCounter("met1"))
    sealed = phb.seal_event(view, {"numberplate": "A", "location": "B"}, 20_000)
    part = Sealed.parse(sealed["s"])
    (a0, c0), (a1, c1) = part.pairs()
    phb_id = part.phb.encode()
    swapped = {
        **sealed,
        "s": pack_sealed(part.ts, part.n, phb_id, pack_attrs([(a0, c1), (a1, c0)])),
    }
    opener = Crypter("met2", "attribute", rings["met2"], NonceCounter("met2"))
    assert opener.open_event(view, sealed) == {"numberplate": "A", "location": "B"}
    assert opener.open_event(view, swapped) == {}
    later = pack_sealed(part.ts + 1, part.n, phb_id, part.body)  # the timestamp is bound too
    assert opener.open_event(view, {**sealed, "s": later}) == {}
    assert opener.open_event(view, {**sealed, "s": b"\x00" * 7}) == {}  # malformed: nothing


@pytest.mark.parametrize("mode", ["event", "attribute"])
def test_filters_seal_whole_or_per_attribute(mode: str) -> None:
    stype, _, rings = _world(mode)
    view = TypeView.of(stype)
    f = Filter.of(("numberplate", "=", "AB12CDE"), ("location", "prefix", "So"))
    wire = Crypter("met2", mode, rings["met2"], NonceCounter("met2")).seal_filter(view, f, 20_000)
    assert b"AB12CDE" not in repr(wire).encode()
    met1 = Crypter("met1", mode, rings["met1"], NonceCounter("met1")).open_filter(view, wire)
    assert met1.readable == f and met1.sealed_parts == 0
    ccs = Crypter("ccs1", mode, rings["ccs1"], NonceCounter("ccs1")).open_filter(view, wire)
    if mode == "attribute":  # reads the numberplate constraint only; the rest stays sealed
        assert ccs.readable == Filter.of(("numberplate", "=", "AB12CDE")) and ccs.sealed_parts == 1
    else:
        assert ccs.match_all
    outsider = Crypter("isp1", mode, BrokerKeyring("isp1"), NonceCounter("isp1"))
    assert outsider.open_filter(None, wire).match_all  # §3.3: routes by type only


def test_capabilities_check_signature_holder_type_action_validity_and_revocation() -> None:
    tid = type_id("PITO", "Numberplate")
    cap = Capability.issue(
        OWNER,
        holder="ccs1",
        type_id=tid,
        action="subscribe",
        attributes=["numberplate"],
        not_before=100.0,
        not_after=200.0,
        serial=9,
    )
    ok = dict(holder="ccs1", type_id=tid, action="subscribe")
    check_capability(cap, OWNER.public, now=150.0, **ok)  # type: ignore[arg-type]
    assert cap.grants("numberplate") and not cap.grants("location")
    cases = [
        (dict(ok, holder="met1"), 150.0, None, DropReason.UNAUTHORISED),
        (dict(ok, action="publish"), 150.0, None, DropReason.UNAUTHORISED),
        (ok, 250.0, None, DropReason.STALE),
        (ok, 150.0, RevocationSet([9]), DropReason.REVOKED),
    ]
    for kw, now, rev, reason in cases:
        with pytest.raises(DropError) as ei:
            check_capability(cap, OWNER.public, now=now, revoked=rev, **kw)  # type: ignore[arg-type]
        assert ei.value.reason is reason
    forged = Capability.from_wire({**cap.to_wire(), "attributes": ["*"]})
    with pytest.raises(DropError) as ei:
        check_capability(forged, OWNER.public, now=150.0, **ok)  # type: ignore[arg-type]
    assert ei.value.reason is DropReason.FORGED
    assert Capability.from_wire(cap.to_wire()) == cap
    assert math.isinf(Capability.from_wire({**cap.to_wire(), "not_after": None}).not_after)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.binary(min_size=32, max_size=32), st.binary(max_size=80)), max_size=8))
def test_attribute_tuples_round_trip(pairs: list[tuple[bytes, bytes]]) -> None:
    assert unpack_attrs(pack_attrs(pairs)) == pairs


@pytest.mark.parametrize("blob", [b"\x00" * 35, b"\x00" * 32 + b"\x00\x00\x00\x09" + b"x"])
def test_malformed_attribute_tuples_are_refused(blob: bytes) -> None:
    with pytest.raises(ValidationError):
        unpack_attrs(blob)


def test_rendezvous_node_is_a_deterministic_function_of_the_type_id() -> None:
    brokers = [f"b{i}" for i in range(50)]
    tid = type_id("PITO", "Numberplate")
    rv = rendezvous_node(tid, brokers)
    assert rv == rendezvous_node(tid, list(reversed(brokers)))
    spread = {rendezvous_node(type_id("o", f"t{i}"), brokers) for i in range(200)}
    assert len(spread) > 25  # hashing spreads types over the broker set (Fig. 2)


_ATTRIBUTE_WORLD = _world("attribute")  # read only below: one key-group setup for every example
_VALS = st.sampled_from(["AB12CDE", "AB99", "XY", "Soho", ""])
_OPS = st.sampled_from(["=", "!=", "prefix", "suffix", "substring", "exists"])


@settings(max_examples=60)
@given(
    st.fixed_dictionaries({"numberplate": _VALS, "location": _VALS}),
    st.lists(
        st.tuples(st.sampled_from(["numberplate", "location"]), _OPS, _VALS), min_size=1, max_size=3
    ),
)
def test_a_broker_reading_everything_matches_as_the_reference_matcher(
    attrs: dict[str, str], cons: list[tuple[str, str, str]]
) -> None:
    """Matching on decoded Hermes filters and events (PHB view, sealed then opened view)
    agrees with the model's reference matching when the broker can read every part."""
    from pubguard.schemes.hermes import HermesBroker
    from pubguard.schemes.hermes.broker import TYPE_KEY

    stype, _, rings = _ATTRIBUTE_WORLD
    f = Filter.of(*[(n, o) if o == "exists" else (n, o, v) for n, o, v in cons])
    b = HermesBroker("hermes-attribute", "met2", types=[stype], keyring=rings["met2"])
    wire = {"type": "Numberplate", "constraints": [c.to_json() for c in f.constraints]}
    pf = b.decode_filter(wire)
    pe = b.decode_event({TYPE_KEY: "Numberplate", **attrs})
    assert b.broker_match(pf, pe) == f.matches(attrs)
    sealed = Crypter("met1", "attribute", rings["met1"], NonceCounter("met1")).seal_event(
        TypeView.of(stype), attrs, 20_000
    )
    assert b.broker_match(pf, b.decode_event(sealed)) == f.matches(attrs)


@given(
    first=st.integers(0, 2**64 - 64),
    items=st.lists(
        st.tuples(st.binary(max_size=64), st.binary(min_size=1, max_size=64)), max_size=8
    ),
)
def test_seal_each_and_open_each_agree_with_the_one_call_recipe(
    first: int, items: list[tuple[bytes, bytes]]
) -> None:
    """The per-event batch (one loop over the attributes' ciphers) is the reference recipe
    called once per attribute: same ciphertexts, same openings, failures as None."""
    ciphers = [CounterAead(bytes([i + 1]) * 32) for i in range(len(items))]
    batch = seal_each(first, [(c, pt, ad) for c, (pt, ad) in zip(ciphers, items, strict=True)])
    one = [
        c.seal(first + i, pt, ad)
        for i, (c, (pt, ad)) in enumerate(zip(ciphers, items, strict=True))
    ]
    assert batch == one
    opened = open_each(
        first, [(c, ct, ad) for c, ct, (_, ad) in zip(ciphers, batch, items, strict=True)]
    )
    assert opened == [pt for pt, _ in items]
    if batch:  # a tampered tag, and a missing key, open as None and leave the rest alone
        bad = [(ciphers[0], batch[0][:-1] + bytes([batch[0][-1] ^ 1]), items[0][1]), None]
        assert open_each(first, bad) == [None, None]


@pytest.mark.parametrize("mode", ["event", "attribute"])
def test_a_run_seals_as_one_event_at_a_time_with_its_wire_ids(mode: str, backend: str) -> None:
    """``Crypter.seal_publications``, the PHB's one call per micro-batch: for each event the
    routing and wire id that ``seal_event`` and ``wire_id`` give one by one from the same
    counter, on either backend; a job it cannot seal (attribute mode: an attribute it holds
    no key for) is None and takes no counter values."""
    stype, _, rings = _world(mode)
    view = TypeView.of(stype)
    secret = b"\x05" * 32
    run = Crypter("met1", mode, rings["met1"], NonceCounter("met1"), secret)
    one = Crypter("met1", mode, rings["met1"], NonceCounter("met1"), secret)
    evs = [
        ({"numberplate": "AB12CDE", "location": "Soho", "camera": 7}, "e-1"),
        ({"numberplate": "XY99ZZZ"}, "e-2"),
        ({"nope": 1}, "e-bad"),
        ({"location": "Bank", "camera": -3}, "e-3"),
    ]
    got = run.seal_publications([(view, a, 20_000, eid) for a, eid in evs])
    # attribute mode has no key for it; event mode seals the map whole (type-checked earlier)
    assert (got[2] is None) == (mode == "attribute")
    for (attrs, eid), res in zip(evs, got, strict=True):
        if res is None:
            continue
        assert res == (one.seal_event(view, attrs, 20_000, eid), one.wire_id(view, eid))
    assert run.counter.take() == one.counter.take()
    assert run.seal_events([(view, evs[0][0], 20_000, "e-4")]) == [
        one.seal_event(view, evs[0][0], 20_000, "e-4")
    ]
    assert "x05" not in repr(run) and secret.hex() not in repr(run)
