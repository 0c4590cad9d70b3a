"""The key-group manager's durable state (hermes §4, §4.1-4.2): OFT groups exported and
restored exactly, the core restored from its sealed SQLite store with its members and
broadcast log, keys never in the file, and a state under another key refused."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.errors import ConfigError
from pubguard.keys.oft import OFTGroup, OFTMember
from pubguard.model.events import AttributeSpec, EventType
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.net.keyservice.hermes_kgm_store import KgmStore
from pubguard.schemes.hermes import BrokerKeyring, Capability, KeyGroupManager, SecureEventType
from pubguard.schemes.hermes.kgm_wire import rekey_from_wire, welcome_from_wire

NP = EventType(
    "Numberplate", (AttributeSpec("numberplate", "str"), AttributeSpec("location", "str"))
)
OWNER = SigningKey.from_seed(b"\x07" * 32)
STYPE = SecureEventType.define("PITO", NP, OWNER)
PROFILE = "hermes-attribute"
KEY = SecretBytes(b"\x42" * 32)


def cap(holder: str, serial: int, attrs: tuple[str, ...] = ("*",)) -> Capability:
    return Capability.issue(
        OWNER,
        holder=holder,
        type_id=STYPE.type_id,
        action="subscribe",
        attributes=attrs,
        not_before=0.0,
        not_after=float("inf"),
        serial=serial,
    )


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7)), min_size=1, max_size=24))
def test_an_exported_oft_group_restores_to_the_same_keys_and_rekeys(
    ops: list[tuple[bool, int]],
) -> None:
    """Property: after any joins and leaves, the restored group derives the same traffic key,
    and the next join's broadcast reaches every old member identically (§4.1)."""
    g = OFTGroup("g", lazy=False)
    members: dict[str, OFTMember] = {}
    now = 1.0
    for join, i in ops:
        now += 1
        m = f"b{i}"
        if join and m not in members:
            w, r = g.join(m, now=now)
            for x in members.values():
                x.apply(r)
            members[m] = OFTMember(w)
        elif not join and m in members:
            r = g.leave(m, now=now)
            del members[m]
            for x in members.values():
                x.apply(r)
    h = OFTGroup.from_state(g.export_state())
    assert h.export_state() == g.export_state()
    assert h.current == g.current and len(h) == len(g) and h.depth() == g.depth()
    w1, r1 = g.join("new", now=now + 1, rng=random.Random(3))
    w2, r2 = h.join("new", now=now + 1, rng=random.Random(3))
    assert w1 == w2 and g.current == h.current  # the same keys (the AEAD nonces differ)
    assert (r1.structure, r1.refresh) == (r2.structure, r2.refresh)
    assert [(u.node, u.kind, u.kid) for u in r1.updates] == [
        (u.node, u.kind, u.kid) for u in r2.updates
    ]
    for x in members.values():
        x.apply(r2)
        assert x.ring.current == h.current


def join(core: HermesKgmCore, broker: str, c: Capability, now: float) -> BrokerKeyring:
    out = core.handle(
        {"op": "hermes_join", "id": 1, "profile": PROFILE, "cap": c.to_wire()}, peer=broker, now=now
    )
    ring = BrokerKeyring(broker)
    ring.welcome({g: welcome_from_wire(w) for g, w in out["ok"]["welcomes"].items()})
    ring.apply(rekey_from_wire(r) for r in out["ok"]["rekeys"])
    return ring


def poll(core: HermesKgmCore, ring: BrokerKeyring, now: float) -> None:
    out = core.handle(
        {"op": "hermes_rekeys", "id": 2, "profile": PROFILE, "since": ring.seqs()},
        peer=ring.broker,
        now=now,
    )
    ring.apply(rekey_from_wire(r) for r in out["ok"]["rekeys"])


def fresh() -> dict[str, KeyGroupManager]:
    return {PROFILE: KeyGroupManager(STYPE, "attribute", grace=5.0)}


def test_the_core_comes_back_from_its_sealed_store_with_members_log_and_revocations(
    tmp_path: Path,
) -> None:
    store = KgmStore(tmp_path / "kgm.db", KEY, STYPE)
    core = HermesKgmCore(fresh(), store=store)
    met = join(core, "met1", cap("met1", 1), 10.0)
    ccs = join(core, "ccs1", cap("ccs1", 2, ("numberplate",)), 11.0)
    rogue = join(core, "rogue", cap("rogue", 3), 12.0)
    poll(core, met, 13.0)
    poll(core, ccs, 13.0)
    owner = {"op": "hermes_revoke", "id": 3, "profile": PROFILE, "serial": 3}
    assert "ok" in core.handle(owner, peer="PITO", now=14.0)
    store.close()

    # a restart: a new core from the file alone
    again = HermesKgmCore.restore(KgmStore(tmp_path / "kgm.db", KEY, STYPE), fresh())
    mgr = again.managers[PROFILE]
    assert mgr.members() == ["ccs1", "met1"] and 3 in mgr.revoked
    poll(again, met, 15.0)  # the broadcasts missed before the restart are still served
    poll(again, ccs, 15.0)
    groups = {g: grp.current for g, grp in mgr.groups.items()}
    for g in met.groups():
        assert met.current(g) == groups[g]  # a member holds the manager's epoch
    join(again, "met2", cap("met2", 4), 16.0)  # a rekey after the restart
    poll(again, met, 17.0)
    for g in met.groups():
        assert met.current(g) == mgr.groups[g].current
    assert not any(rogue.current(g) == mgr.groups[g].current for g in rogue.groups())
    refused = again.handle(
        {"op": "hermes_join", "id": 4, "profile": PROFILE, "cap": cap("rogue", 3).to_wire()},
        peer="rogue",
        now=18.0,
    )
    assert refused["error"] == "unauthorised"  # revoked before the restart, still revoked
    status = again.handle({"op": "hermes_status", "id": 5}, peer="admin", now=18.0)["ok"]
    groups_view = status["profiles"][PROFILE]["groups"]
    assert groups_view["numberplate"]["members"] == ["ccs1", "met1", "met2"]
    assert groups_view["location"]["members"] == ["met1", "met2"]
    denied = again.handle({"op": "hermes_status", "id": 6}, peer="met1", now=18.0)
    assert denied["error"] == "unauthorised"

    # canary: no group key, leaf key or blinded key in the file, its WAL or its log
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    state = mgr.export_state()
    for gs in state["groups"].values():
        for _, key, *_ in gs["nodes"]:
            assert key not in blob
        for *_, key in gs["ring"]:
            assert key not in blob
    assert b"met1" not in blob  # even the members' names are sealed


def test_a_state_sealed_under_another_key_is_refused_not_run_empty(tmp_path: Path) -> None:
    store = KgmStore(tmp_path / "kgm.db", KEY, STYPE)
    core = HermesKgmCore(fresh(), store=store)
    join(core, "met1", cap("met1", 1), 10.0)
    store.close()
    with pytest.raises(ConfigError, match="does not open"):
        HermesKgmCore.restore(
            KgmStore(tmp_path / "kgm.db", SecretBytes(b"\x43" * 32), STYPE), fresh()
        )
