"""What a Hermes deployment keeps across restarts and re-issues (hermes §3.5, §4.2): the PHB's
wire-id secret sealed in its hermes.db, and the type owner's signed revocation list that the
key-group manager and ``cluster up`` honour. The process-level checks (kill -9 of a broker,
``cluster down`` / ``up``) are in ``test_kgm_detached.py``."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.cli.main import cli
from pubguard.crypto import SecretBytes, SigningKey
from pubguard.errors import ConfigError, DropError, InvalidToken, ValidationError
from pubguard.model.events import AttributeSpec, EventType
from pubguard.net.keyservice.hermes_kgm import HermesKgmCore
from pubguard.ops.hermes_revocations import (
    REVOCATIONS_FILE,
    load_revocations,
    revise_revocations,
)
from pubguard.schemes.hermes import Capability, KeyGroupManager, SecureEventType
from pubguard.schemes.hermes.capability import RevocationList
from pubguard.schemes.hermes.wire_secret import load_wire_secret
from pubguard.store import Database

NP = EventType(
    "Numberplate", (AttributeSpec("numberplate", "str"), AttributeSpec("location", "str"))
)
OWNER = SigningKey.from_seed(b"\x07" * 32)
OTHER = SigningKey.from_seed(b"\x08" * 32)
STYPE = SecureEventType.define("PITO", NP, OWNER)
PROFILE = "hermes-attribute"


def cap(holder: str, serial: int) -> Capability:
    return Capability.issue(
        OWNER,
        holder=holder,
        type_id=STYPE.type_id,
        action="subscribe",
        not_before=0.0,
        serial=serial,
    )


# -- the wire-id secret S ---------------------------------------------------------------------


def test_the_wire_id_secret_is_sealed_restored_and_replaced_only_under_another_key(
    tmp_path: Path,
) -> None:
    key = SecretBytes(b"\x11" * 32)
    db = Database(tmp_path / "hermes.db")
    s1, how1 = load_wire_secret(db, "met1", key, now=1.0)
    s2, how2 = load_wire_secret(db, "met1", key, now=2.0)
    assert (how1, how2) == ("created", "restored") and s1.reveal() == s2.reveal()
    other, _ = load_wire_secret(db, "met2", key, now=3.0)  # per broker
    assert other.reveal() != s1.reveal()
    s3, how3 = load_wire_secret(db, "met1", SecretBytes(b"\x22" * 32), now=4.0)
    assert how3 == "replaced" and s3.reveal() != s1.reveal()  # a re-issued identity
    again, how4 = load_wire_secret(db, "met1", SecretBytes(b"\x22" * 32), now=5.0)
    assert how4 == "restored" and again.reveal() == s3.reveal()
    db.close()
    disk = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    for s in (s1, s3, other, key):
        for form in (s.reveal(), s.reveal().hex().encode()):
            assert form not in disk  # canary: sealed, never in clear
    assert s1.reveal().hex() not in repr(s1)


# -- the owner's revocation list --------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=12), max_size=6),
    st.lists(st.integers(0, 2**62), max_size=6),
    st.floats(0, 2e9, allow_nan=False),
)
def test_a_revocation_list_round_trips_and_verifies_only_as_signed(
    holders: list[str], serials: list[int], issued: float
) -> None:
    """Property: the JSON form parses back to the same list, which verifies under its owner
    for its type, and under no other owner or type, nor with one entry changed."""
    rl = RevocationList.issue(
        OWNER, type_id=STYPE.type_id, holders=holders, serials=serials, issued=issued
    )
    back = RevocationList.from_json(json.loads(json.dumps(rl.to_json())))
    assert back == rl
    back.verify(OWNER.public, STYPE.type_id)
    with pytest.raises(InvalidToken):
        back.verify(OTHER.public, STYPE.type_id)
    with pytest.raises(InvalidToken):
        back.verify(OWNER.public, b"\x00" * 32)
    forged = RevocationList(
        rl.type_id, (*rl.holders, "\x00extra"), rl.serials, rl.issued, rl.signature
    )
    with pytest.raises(InvalidToken):
        forged.verify(OWNER.public, STYPE.type_id)


@pytest.mark.parametrize(
    "bad", [None, [], {}, {"type_id": "zz"}, {"type_id": "00" * 32, "holders": [""]}]
)
def test_a_malformed_revocation_list_is_a_validation_error(bad: object) -> None:
    full = {"holders": [], "serials": [], "issued": 0.0, "sig": ""}
    d = {**full, **bad} if isinstance(bad, dict) and bad else bad
    with pytest.raises(ValidationError):
        RevocationList.from_json(d)


def test_a_revoked_holder_is_refused_at_join_whatever_capability_it_shows() -> None:
    rng = random.Random(1)
    mgr = KeyGroupManager(STYPE, "attribute", lazy=False)
    mgr.join("met1", cap("met1", 1), now=1.0, rng=rng)
    mgr.join("ccs1", cap("ccs1", 2), now=2.0, rng=rng)
    rekeys = mgr.revoke_holder("ccs1", now=3.0, rng=rng)
    assert rekeys and mgr.members() == ["met1"]  # evicted, its groups refreshed at once
    with pytest.raises(DropError) as refused:
        mgr.join("ccs1", cap("ccs1", 99), now=4.0, rng=rng)  # re-issued: a new serial
    assert refused.value.reason.value == "revoked"
    assert mgr.revoke_holder("nobody", now=5.0, rng=rng) == []


def test_the_manager_applies_the_owners_list_at_start() -> None:
    rl = RevocationList.issue(
        OWNER, type_id=STYPE.type_id, holders=["ccs1"], serials=[5], issued=1.0
    )
    core = HermesKgmCore({PROFILE: KeyGroupManager(STYPE, "attribute")})
    core.apply_revocations(rl, now=1.0)
    base = {"op": "hermes_join", "profile": PROFILE}
    out = core.handle({**base, "id": 1, "cap": cap("ccs1", 7).to_wire()}, peer="ccs1", now=2.0)
    assert out["error"] == "unauthorised" and out["message"] == "revoked"
    out = core.handle({**base, "id": 2, "cap": cap("met1", 5).to_wire()}, peer="met1", now=2.0)
    assert out["error"] == "unauthorised"  # a revoked serial
    assert (
        "welcomes"
        in core.handle({**base, "id": 3, "cap": cap("met1", 6).to_wire()}, peer="met1", now=2.0)[
            "ok"
        ]
    )
    status = core.handle({"op": "hermes_status", "id": 4}, peer="admin", now=3.0)["ok"]
    assert status["profiles"][PROFILE]["revoked"] == ["ccs1"]


def test_the_list_file_is_revised_by_its_owner_and_refused_from_anyone_else(
    tmp_path: Path,
) -> None:
    tid = STYPE.type_id
    assert load_revocations(tmp_path, OWNER.public, tid) is None
    revise_revocations(tmp_path, OWNER, tid, now=1.0, add_holders=["ccs1"], add_serials=[3])
    revise_revocations(tmp_path, OWNER, tid, now=2.0, add_holders=["isp1"])
    rl = load_revocations(tmp_path, OWNER.public, tid)
    assert rl is not None and rl.holders == ("ccs1", "isp1") and rl.serials == (3,)
    revise_revocations(tmp_path, OWNER, tid, now=3.0, remove_holders=["ccs1"])  # readmit
    rl = load_revocations(tmp_path, OWNER.public, tid)
    assert rl is not None and rl.holders == ("isp1",)
    # another owner's seed cannot read it as its own, nor extend it; an edit breaks it
    with pytest.raises(ConfigError) as other:
        revise_revocations(tmp_path, OTHER, tid, now=4.0, add_holders=["met1"])
    assert "not signed by this type's owner" in str(other.value)
    assert "\n" not in str(other.value)
    path = tmp_path / REVOCATIONS_FILE
    d = json.loads(path.read_text())
    d["holders"] = []
    path.write_text(json.dumps(d))
    with pytest.raises(ConfigError):
        load_revocations(tmp_path, OWNER.public, tid)


def test_revoke_without_the_owners_seed_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "hermes-kgm"
    d.mkdir()
    (d / "type.json").write_text(json.dumps(STYPE.to_json()))
    (d / "launch.json").write_text(json.dumps({"owner_env": "PUBGUARD_HERMES_OWNER"}))
    (tmp_path / "ccs1").mkdir()
    (tmp_path / "ccs1" / "hermes.json").write_text(json.dumps({"capabilities": []}))
    env = {"PUBGUARD_HERMES_OWNER": base64.b64encode(b"\x09" * 32).decode()}  # not PITO's
    r = CliRunner(env=env).invoke(
        cli, ["hermes", "revoke", "--state", str(tmp_path), "--broker", "ccs1"]
    )
    assert r.exit_code != 0 and r.output.count("\n") == 1 and "Traceback" not in r.output
    assert "not the type owner's seed" in r.output
    assert not (d / REVOCATIONS_FILE).exists()
