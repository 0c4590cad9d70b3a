"""The hosting brokers' run-level native calls against their Python references (hermes
§3.2, §3.5): the PHB's ``hermes_seal_routing_run`` (a run of one type at one instant sealed
into its routings, with wire ids and counter values), the SHB's ``hermes_open_sealed_run``
(sealed headers parsed and opened in one call), the same answers for the same keys and
counters, tampered and truncated input rejected alike; and ``Publish.trusted_run``, which
builds a run's rewritten publications, row for row as ``Publish.trusted``."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard import native
from pubguard.crypto import SigningKey
from pubguard.errors import ValidationError
from pubguard.model.events import AttributeSpec, EventType
from pubguard.schemes.hermes import (
    BrokerKeyring,
    Capability,
    Crypter,
    KeyGroupManager,
    NonceCounter,
    SecureEventType,
    TypeView,
    content,
)
from pubguard.schemes.hermes.content import Sealed
from pubguard.wire.messages import Deliver, Publish
from tests.native_backends import BACKENDS, requires_native
from tests.schemes.hermes.sealing import attribute_keys
from tests.schemes.hermes.sealing import values as attribute_values

NAMES, BY_NAME, BY_AID = attribute_keys(4)
TID = b"\x11" * 32
SECRET = bytes(range(32))

values = attribute_values(40)
#: a run's events: (attributes, the application's id)
runs = st.lists(
    st.tuples(st.dictionaries(st.sampled_from(NAMES), values, max_size=4), st.text(max_size=20)),
    max_size=6,
)


def _crypter() -> Crypter:
    with native.use("native"):  # made with the extension active: the native wire-id key
        return Crypter("met1", "attribute", BrokerKeyring("met1"), NonceCounter("met1"), SECRET)


def _reference(c: Crypter, ts: int, n: int, items: list[Any]) -> tuple[list[Any], int]:
    """``hermes_seal_routing_run`` written with the references: each event's counter where
    the previous one's attributes end (``take(max(1, len))``), ``_seal_attribute_run``,
    ``Crypter.wire_id``'s formula."""
    jobs, start = [], n
    for attrs, app in items:
        jobs.append((TID, ts, start, b"met1", app, attrs, BY_NAME))
        start += max(1, len(attrs))
    blobs = content._seal_attribute_run(jobs)
    with native.use("python"):
        ids = c.wire_ids([(TID, app) for _, app in items])
    return [({"t": TID, "s": b}, w) for b, w in zip(blobs, ids, strict=True)], start - n


@requires_native
@settings(max_examples=60, deadline=None)
@given(items=runs, ts=st.integers(-(2**63), 2**63 - 1), n=st.integers(0, 2**40))
def test_a_run_sealed_into_its_routings_matches_the_reference(
    items: list[Any], ts: int, n: int
) -> None:
    c = _crypter()
    key = c.native_wire_key()
    got = native.NATIVE.hermes_seal_routing_run(TID, ts, n, b"met1", BY_NAME, items, key)
    assert got == _reference(c, ts, n, items)


@requires_native
def test_an_attribute_without_a_key_fails_the_whole_run() -> None:
    """The run is all or nothing (its caller then takes no counter values): an attribute
    this PHB holds no key for, or a value type the extension does not take."""
    c = _crypter()
    key = c.native_wire_key()
    seal = native.NATIVE.hermes_seal_routing_run
    no_key = [({"a0": "x"}, "e1"), ({"zz": "y"}, "e2")]
    with pytest.raises(KeyError):
        seal(TID, 1, 0, b"met1", BY_NAME, no_key, key)
    with pytest.raises(ValueError):
        seal(TID, 1, 0, b"met1", BY_NAME, [({"a0": [1]}, "e1")], key)


def _blobs(items: list[Any], ts: int, n: int) -> list[bytes]:
    jobs = [(TID, ts, n + 8 * i, b"met1", app, a, BY_NAME) for i, (a, app) in enumerate(items)]
    return content._seal_attribute_run(jobs)


def _open_reference(blobs: list[bytes], keys: dict[bytes, Any]) -> list[Any]:
    """``hermes_open_sealed_run`` written with the references: ``Sealed.parse`` (None when
    malformed), then ``_open_attribute_run`` (a malformed body opens to nothing)."""
    out: list[Any] = []
    for b in blobs:
        try:
            s = Sealed.parse(b)
        except ValidationError:
            out.append(None)
            continue
        (r,) = content._open_attribute_run([(TID, s.ts, s.n, s.body, keys)])
        out.append(({}, None) if r is None else r)
    return out


def _tamper(blob: bytes, where: int, how: str) -> bytes:
    if not blob:
        return blob
    i = where % len(blob)
    if how == "flip":
        return blob[:i] + bytes([blob[i] ^ 0x40]) + blob[i + 1 :]
    return blob[:i]  # truncated


@requires_native
@settings(max_examples=80, deadline=None)
@given(
    items=runs,
    ts=st.integers(-(2**63), 2**63 - 1),
    n=st.integers(0, 2**40),
    keep=st.sets(st.sampled_from(NAMES)),
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(["flip", "cut"]))),
)
def test_sealed_runs_open_as_the_reference_tampered_or_not(
    items: list[Any], ts: int, n: int, keep: set[str], damage: list[tuple[int, str]]
) -> None:
    """Headers parsed and tuples opened in one call: the same values and application ids,
    None for a malformed header, nothing from a malformed body or a forged tag; the keys
    are asked once per (view, ts, PHB) change."""
    keys = {a: v for a, v in BY_AID.items() if v[0] in keep}
    blobs = _blobs(items, ts, n)
    for k, (where, how) in enumerate(damage[: len(blobs)]):
        blobs[k] = _tamper(blobs[k], where, how)
    blobs.append(b"\x00" * 17)  # shorter than a header
    asked: list[tuple[int, str]] = []

    def keys_at(view: object, t: int, phb: str) -> dict[bytes, Any]:
        asked.append((t, phb))
        return keys

    view = object()
    got = native.NATIVE.hermes_open_sealed_run([(view, TID, b) for b in blobs], keys_at)
    assert got == _open_reference(blobs, keys)
    # one (ts, PHB) for the whole run; a damaged header may make another and then the next
    assert len(asked) <= 1 + 2 * min(len(damage), len(items))


# -- the crypter's run calls, on a real keyring (key groups of §4)

NP = EventType(
    "Numberplate",
    (AttributeSpec("numberplate", "str"), AttributeSpec("camera", "int")),
)
OWNER = SigningKey.from_seed(b"\x09" * 32)


def _ring(grant: tuple[str, ...] = ("*",)) -> tuple[TypeView, BrokerKeyring]:
    stype = SecureEventType.define("PITO", NP, OWNER)
    mgr = KeyGroupManager(stype, "attribute")
    cap = Capability.issue(
        OWNER,
        holder="met1",
        type_id=stype.type_id,
        action="subscribe",
        attributes=grant,
        not_before=0.0,
        serial=1,
    )
    ring = BrokerKeyring("met1")
    res = mgr.join("met1", cap, now=10.0, rng=random.Random(1))
    ring.welcome(res.welcomes)
    ring.apply(res.rekeys)
    return TypeView.of(stype), ring


@requires_native
def test_the_crypter_seals_a_run_as_seal_publications_and_takes_the_same_counters() -> None:
    view, ring = _ring()
    with native.use("native"):
        run = Crypter("met1", "attribute", ring, NonceCounter("met1"), SECRET)
        ref = Crypter("met1", "attribute", ring, NonceCounter("met1"), SECRET)
    items = [({"numberplate": "AB12CDE", "camera": 3}, "e1"), ({}, "e2"), ({"camera": 9}, "e3")]
    got = run.seal_publish_run(view, 20_000, items)
    want = ref.seal_publications([(view, a, 20_000, eid) for a, eid in items])
    assert got == want
    assert run.counter.next_value == ref.counter.next_value == 4
    # an attribute outside the type: None, and no counter value taken
    assert run.seal_publish_run(view, 20_000, [({"nope": 1}, "e4")]) is None
    assert run.counter.next_value == 4


@requires_native
def test_the_crypter_opens_a_run_as_the_reference_on_either_backend() -> None:
    view, ring = _ring()
    with native.use("native"):
        c = Crypter("met1", "attribute", ring, NonceCounter("met1"), SECRET)
    items = [({"numberplate": "AB12CDE", "camera": 3}, "e1"), ({"camera": 9}, "e2")]
    sealed = c.seal_publications([(view, a, 20_000, eid) for a, eid in items])
    blobs = [r[0]["s"] for r in sealed if r is not None]
    forged = blobs[0][:-1] + bytes([blobs[0][-1] ^ 1])  # the last attribute's tag
    jobs = [(view, b) for b in [*blobs, forged, blobs[0][:-1], b"junk"]]
    with native.use("native"):
        got = c.open_sealed_run(jobs)
    with native.use("python"):
        ref = c.open_sealed_run(jobs)
    assert got == ref
    assert got[:2] == [({"numberplate": "AB12CDE", "camera": 3}, "e1"), ({"camera": 9}, "e2")]
    assert got[2] == ({"numberplate": "AB12CDE"}, "e1")  # the forged tag fails its attribute
    assert got[3] == ({}, None)  # a cut tuple: the body is malformed, nothing is read
    assert got[4] is None  # not even a header


ids = st.one_of(st.text(min_size=1, max_size=3), st.just(""), st.just("x" * 257), st.just(7))
routings = st.one_of(
    st.dictionaries(st.text(max_size=3), values, max_size=3),
    st.just({"k": [1]}),
    st.just({1: "x"}),
    st.just("not a dict"),
)


@pytest.mark.parametrize("flat", BACKENDS)  # the flat-map check, native or Python
@settings(max_examples=40, deadline=None)
@given(
    profile=st.one_of(st.just("hermes-attribute"), st.just("")),
    rows=st.lists(st.tuples(ids, routings, st.one_of(st.just(b""), st.binary(max_size=4)))),
)
def test_a_run_of_trusted_publications_is_trusted_row_by_row(
    flat: str, profile: str, rows: list[Any]
) -> None:
    with native.use(flat):
        got = Publish.trusted_run(profile, rows)
    for (eid, routing, body), p in zip(rows, got, strict=True):
        try:
            want = Publish.trusted(eid, profile, routing, body)
        except ValidationError:
            assert p is None
            continue
        assert p == want and p.wire == want.wire
        assert type(p) is Publish  # frozen, as ``trusted`` builds it
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.event_id = "x"  # type: ignore[misc]


def test_a_run_of_trusted_deliveries_is_trusted_one_by_one() -> None:
    pubs = [Publish(f"e{i}", "hermes-attribute", {"a": i}) for i in range(3)]
    pairs = [(pubs[0], ("s1",)), (pubs[1], ("s1", "s2")), (pubs[0], ("s3",))]
    got = Deliver.trusted_run(pairs)
    assert got == [Deliver.trusted(p, sids) for p, sids in pairs]
    assert [type(d) for d in got] == [Deliver] * 3 and got[2].event is pubs[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got[0].sub_ids = ()  # type: ignore[misc]
    assert Deliver.trusted_run([]) == []


kinds = st.one_of(
    st.text(max_size=3),
    st.integers(-5, 5),
    st.floats(),  # with nan and inf
    st.booleans(),
    st.none(),
    st.binary(max_size=2),
)


@settings(max_examples=120, deadline=None)
@given(attrs=st.dictionaries(st.sampled_from(["numberplate", "camera", "speed", "x"]), kinds))
def test_the_phb_type_check_accepts_exactly_what_the_type_validates(attrs: dict[str, Any]) -> None:
    """§2.1, the PHB's type check (one pass over exact value types) against the model's
    ``EventType.validate``: the same events pass, and a refusal is a ValidationError."""
    from pubguard.model.events import Event

    etype = EventType(
        "Speed",
        (
            AttributeSpec("numberplate", "str"),
            AttributeSpec("camera", "int"),
            AttributeSpec("speed", "float"),
        ),
    )
    view = TypeView.of(SecureEventType.define("PITO", etype, OWNER))
    try:
        etype.validate(Event(attrs))
        valid = True
    except ValidationError:
        valid = False
    if valid:
        view.type_check(attrs)
    else:
        with pytest.raises(ValidationError):
            view.type_check(attrs)
