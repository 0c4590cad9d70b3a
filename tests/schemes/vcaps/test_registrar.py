"""The publisher's Stage I / §8 endpoint as a sans-IO core: the caller is who its certificate
says, only a client registers, only the publisher's group gets ``K_N``, only a broker returns
``E_ks(F)``, and every refusal is one error frame whose log line names no field value."""

from __future__ import annotations

import logging

import pytest

from pubguard.schemes.vcaps import FAST, RV, decode_token
from pubguard.schemes.vcaps.registrar import VcapsRegistrar, stored_ciphertexts
from tests.schemes.vcaps.helpers import f, publisher

CANARY = "a1 = 424242"


def _req(op: str, **fields: object) -> dict[str, object]:
    return {"op": op, "id": 1, **fields}


def _cs(text: str) -> list[object]:
    return [c.to_json() for c in f(text).constraints]


def test_register_key_and_recover_with_roles() -> None:
    pub = publisher(RV)
    reg = VcapsRegistrar([pub])
    ok = reg.handle(
        _req("vcaps_register", profile=RV, constraints=_cs(CANARY)),
        peer="alice",
        peer_role="client",
        now=0.0,
    )
    token = ok["ok"]["token"]
    assert decode_token(RV, token).handle == pub.filter_id(f(CANARY))
    key = reg.handle(_req("vcaps_key", epoch=3), peer="alice", peer_role="client", now=0.0)
    want = pub.keys.notification_key("P", 3, requester="P").reveal()
    assert key["ok"]["key"] == want
    # §8: a restarted publisher gets the filter back, with its ID, from a broker's store
    fresh = publisher(RV)
    efs = stored_ciphertexts([{"op": "subscribe", "profile": RV, "filter": token}], RV, "P")
    back = VcapsRegistrar([fresh]).handle(
        _req("vcaps_recover", profile=RV, efs=efs), peer="b1", peer_role="broker", now=0.0
    )
    assert back["ok"] == {"added": 1} and fresh.filter_id(f(CANARY)) == pub.filter_id(f(CANARY))


@pytest.mark.parametrize(
    ("req", "role", "code"),
    [
        (_req("vcaps_register", profile=RV, constraints=_cs(CANARY)), "broker", "unauthorised"),
        (_req("vcaps_register", profile=FAST, constraints=_cs(CANARY)), "client", "invalid"),
        (_req("vcaps_register", profile=RV, constraints=[{"x": CANARY}]), "client", "invalid"),
        (_req("vcaps_register", profile=RV, constraints=[]), "client", "malformed"),
        (_req("vcaps_key", epoch=0), "client", "unauthorised"),  # mallory is in no group
        (_req("vcaps_key", epoch=True), "client", "malformed"),
        (_req("vcaps_recover", profile=RV, efs=[b"x"]), "client", "unauthorised"),
        (_req("vcaps_recover", profile=RV, efs=["x"]), "broker", "malformed"),
        (_req("nope"), "client", "unknown_op"),
        ({"id": 1}, "client", "malformed"),
    ],
)
def test_refusals_are_error_frames_naming_no_value(
    req: dict[str, object], role: str, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    pub = publisher(RV)
    reg = VcapsRegistrar([pub])
    with caplog.at_level(logging.INFO):
        resp = reg.handle(req, peer="mallory", peer_role=role, now=0.0)
    assert resp["error"] == code and resp["id"] == 1 and "ok" not in resp
    assert "424242" not in caplog.text and "424242" not in str(resp)
    assert len(pub) == 0  # state untouched
