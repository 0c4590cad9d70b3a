"""The demo's last act (ops/demo/hospital_revocation.py): a stolen publisher identity revoked while
the hospital network runs; its earlier events were delivered, the thief's are dropped as
``revoked`` at the ward's broker only, the thief is told so, and no unit receives them."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from pubguard.ops.demo.hospital import hospital_demo
from pubguard.ops.demo.hospital_revocation import LAPTOP, laptop_events


@pytest.mark.slow
def test_the_stolen_laptop_is_cut_off_at_its_first_broker(tmp_path: Path) -> None:
    r = asyncio.run(hospital_demo(tmp_path, profile="default", events=8))
    assert r.correct
    act = r.revocation
    assert act is not None and act.ok
    name, broker = LAPTOP
    before, after = laptop_events()
    assert act.before == {
        "paediatric-unit": ["lap00"],
        "oncology-researcher": [],
        "geriatric-ward": ["lap01"],
    }
    assert act.serial == 1 and set(act.learned) == {"h0", "cloud", "h1", "h2", "u1"}
    assert act.thief == [str(e.id) for e in after]
    assert act.errors == [(str(e.id), "revoked") for e in after]
    assert act.drops == {broker: 3} and act.leaked == {}
    # the thief's events never left the ward's broker: the curious cloud broker has none
    assert r.curious is not None and r.curious.clean
    seen = {m.get("event_id") for _, m in r.curious.messages}
    wire = act.wire_ids  # it saw the laptop's events only under their opaque wire ids
    assert {wire["lap00"], wire["lap01"]} <= seen and not seen & {wire[i] for i in act.thief}
    assert not seen & set(wire)
    j = r.to_json()["revocation"]
    assert j["ok"] and j["drops"] == {broker: 3}
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert left.stdout == ""  # every broker and the key service are gone
