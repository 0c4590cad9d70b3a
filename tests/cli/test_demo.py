"""``pubguard demo`` (the non-Spark part; the Spark run is the pipeline tests' business):
real broker processes in three domains, exact plaintext per unit, a curious broker that holds
no plaintext, nothing left running."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.ops.demo.hospital import (
    UNITS,
    hospital_demo,
    hospital_events,
    plaintext_needles,
    scan_for_plaintext,
)

pytestmark = pytest.mark.slow


def test_hospital_over_real_processes_is_exact_and_leaves_nothing(tmp_path: Path) -> None:
    r = asyncio.run(hospital_demo(tmp_path, profile="default"))
    assert r.correct
    for unit, _, filters in UNITS:  # every unit got something, all within its range
        assert r.received[unit]
        lo, hi = (int(x) for x in filters[0].split("age >= ")[1].split(" && age <= "))
        assert all(lo <= e["age"] <= hi for e in r.received[unit])
        assert all(str(e["patientRecord"]).startswith("MRN-") for e in r.received[unit])
    assert r.refused and "unauthorised" in r.refused[0]
    # every client got its tokens, keys and permits from the key-service process
    assert set(r.key_sources) == {u for u, _, _ in UNITS} | {"hospital"}
    assert set(r.key_sources.values()) == {"RemoteAuthority"}
    cv = r.curious
    assert cv is not None and cv.messages and not cv.hits
    assert cv.control_hits == cv.needles and cv.clean
    assert {"seen.msgpack", "broker.db", "broker.log"} <= set(cv.files)
    ops = {m["op"] for _, m in cv.messages}
    assert {"subscribe", "publish"} <= ops
    assert not any(s.get("drops") for s in r.statuses.values())
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert left.stdout == ""  # every broker process is gone


def test_scanner_finds_plaintext_when_it_is_there() -> None:
    evs = hospital_events(4, seed=1)
    needles = plaintext_needles(evs)
    blobs = [json.dumps([e.to_json() for e in evs]).encode()]
    blobs += [msgpack.packb(dict(e.attrs)) for e in evs]
    assert len(scan_for_plaintext(blobs, needles)) == len(needles)
    assert scan_for_plaintext([b"\x00" * 1000], needles) == []


def test_demo_cli_psguard_in_process_json() -> None:
    r = CliRunner().invoke(
        cli,
        ["demo", "--no-spark", "--in-process", "--profile", "psguard", "--events", "30", "--json"],
    )
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)["network"]
    assert obj["profile"] == "psguard" and obj["events"] == 30 and obj["correct"]
    assert obj["received"] == obj["expected"]
    assert obj["curious"]["clean"] and obj["curious"]["plaintext_found"] == []
    assert set(obj["domains"].values()) == {"hospital", "cloud", "university"}
    assert set(obj["key_sources"].values()) == {"RemoteKdc"}


def test_demo_cli_prints_both_views() -> None:
    r = CliRunner().invoke(cli, ["demo", "--no-spark", "--in-process"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "what 'cloud' holds" in r.stdout and "0 found" in r.stdout
    assert "F_T(r)=" in r.stdout and "MRN-" in r.stdout
