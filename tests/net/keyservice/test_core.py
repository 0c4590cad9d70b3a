"""The key service's sans-IO core (net/keyservice/core.py) driven directly: no socket, no
event loop; the caller, the time and the randomness are arguments. A request in gives a reply
out, a refused one a typed refusal (and its error frame)."""

from __future__ import annotations

import random

import pytest

from pubguard.crypto import SecretBytes
from pubguard.keys.ms import MetaService, SubscriptionPermit, decode_permit
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.kdc import KdcConfig, KdcService
from pubguard.net.keyservice.protocol import ERROR_CODES, Caller, Refused
from pubguard.schemes.registry import HOSPITAL

EPOCH = 3600.0
NOW = 10.0


def _core(**kw) -> KeyServiceCore:
    return KeyServiceCore(MetaService(SecretBytes(bytes(32)), epoch_length=EPOCH), **kw)


def test_a_request_in_gives_a_grant_out_in_the_callers_name():
    core = _core()
    req = {"op": "subscribe", "id": 1, "subject": "alice", "w": "news"}
    resp = core.handle(req, peer="alice", now=NOW, rng=random.Random(0))
    assert set(resp) == {"id", "ok"} and resp["id"] == 1
    permit = decode_permit(resp["ok"]["permit"])
    assert isinstance(permit, SubscriptionPermit) and permit.subject == "alice"
    assert core.stats["ok:subscribe"] == 1


def test_a_refused_request_gives_a_typed_refusal_and_its_error_frame():
    core = _core()
    req = {"op": "subscribe", "id": 2, "subject": "bob", "w": "news"}  # not the caller's name
    with pytest.raises(Refused) as exc:
        core.answer(req, Caller("alice", "client"), now=NOW, rng=None)
    assert exc.value.code == "unauthorised" and exc.value.code in ERROR_CODES
    resp = core.handle(req, peer="alice", now=NOW)
    assert resp == {"id": 2, "error": "unauthorised", "message": exc.value.message}
    assert core.stats["unauthorised"] == 1


def test_the_time_is_an_argument_and_a_revoked_caller_is_refused_but_info():
    kdc = KdcService(
        KdcConfig(SecretBytes(bytes(range(32))), (HOSPITAL,), admins=("admin",), epoch_length=EPOCH)
    )
    core = _core(kdc=kdc)
    admin = Caller("admin", "client")
    out = core.answer(
        {"op": "authority_revoke", "id": 1, "identity": "mallory"}, admin, now=NOW, rng=None
    )
    assert out["changed"] and out["serial"] == 1
    mallory = Caller("mallory", "client")
    with pytest.raises(Refused) as exc:
        core.answer(
            {"op": "subscribe", "id": 2, "subject": "mallory", "w": "x"}, mallory, now=NOW, rng=None
        )
    assert exc.value.code == "revoked"
    assert core.answer({"op": "info", "id": 3}, mallory, now=NOW, rng=None)["identity"] == "mallory"
    # psguard.txt §3.2: keys only for epochs served now, judged by the ``now`` passed in
    bad = {"op": "kdc_publisher", "id": 4, "subject": "admin", "epoch": 5}
    with pytest.raises(Refused) as exc:
        core.answer(bad, admin, now=NOW, rng=None)
    assert exc.value.code == "invalid"
    assert core.answer(bad, admin, now=5 * EPOCH + 1, rng=None) == {"scopes": None}
