"""The pipeline's protected rows carry no application id and no secret-attribute name: the
executors (untrusted brokers) see the publisher's keyed wire id and keyed labels only, and the
subscriber's opener restores both (``opened/`` keeps the application's id). Pure functions of
the trusted side, no Spark session needed."""

from __future__ import annotations

import json

import pandas as pd

from pubguard.model import Event, Filter
from pubguard.pipeline.stages import TrustedContext, protect_events_pandas
from pubguard.schemes.common.wire_id import WireIds
from pubguard.schemes.psguard import decode_secrets
from pubguard.schemes.registry import HOSPITAL

IDS = [f"MRN-CANARY-{i}" for i in range(4)]


def test_protected_rows_hide_the_id_and_secret_names_and_open_to_both() -> None:
    ctx = TrustedContext.create(bytes(32), [HOSPITAL], now_ms=0, seed=1)
    events = [
        Event(
            {"topic": "icu", "age": 20 + i, "patientRecord": f"rec {i}"},
            id=eid,
            type=HOSPITAL.name,
            payload=b"p",
        )
        for i, eid in enumerate(IDS)
    ]
    pdf = pd.DataFrame(
        {"event_id": IDS, "event": [json.dumps(e.to_json(), sort_keys=True) for e in events]}
    )
    rows = protect_events_pandas(pdf, ctx).to_dict("records")
    wire = WireIds.for_key(ctx.signing_key)
    assert [r["event_id"] for r in rows] == [wire(i) for i in IDS]
    for r in rows:
        assert not any(b"CANARY" in v for v in r.values() if isinstance(v, bytes))
        assert b"patientRecord" not in r["secrets"] and len(decode_secrets(r["secrets"])) == 1
    keys = ctx.authority().authorise(Filter.parse('topic = "icu"').with_id("f"))
    opened = [keys.open(r) for r in rows]
    assert [e.id for e in opened] == IDS
    assert [e["patientRecord"] for e in opened] == [e["patientRecord"] for e in events]
