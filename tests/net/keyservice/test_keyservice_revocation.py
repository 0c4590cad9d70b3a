"""The key service's revoke op and signed list (net/keyservice/kdc.py,
net/keyservice/revocation.py), driven through the sans-IO core: administrators only, persisted
in SQLite across a restart with the serial kept, idempotent, and a revoked identity gets no
more permits or keys."""

from __future__ import annotations

import random
import sqlite3

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.kdc import KdcConfig, KdcService
from pubguard.schemes.common.revocation_list import RevocationFeed, SignedRevocations
from pubguard.schemes.registry import HOSPITAL

MASTER = random.Random(11).randbytes(32)
THIEF_KEY = SigningKey.from_seed(random.Random(12).randbytes(32)).public


def config(**kw) -> KdcConfig:
    return KdcConfig(
        SecretBytes(MASTER),
        (HOSPITAL,),
        publishers={"laptop": ["cardiology"]},
        admins=("admin",),
        epoch_length=1000.0,
        **kw,
    )


class Svc:
    def __init__(self, db) -> None:
        self.kdc = KdcService(config(), revocations=db)
        self.core = KeyServiceCore(kdc=self.kdc)
        self.n = 0

    def call(self, peer: str, op: str, role: str = "client", now: float = 5.0, **f):
        self.n += 1
        return self.core.handle(
            {"op": op, "id": self.n, **f}, peer=peer, peer_role=role, now=now, peer_serial=7
        )

    def list(self, now: float = 5.0) -> SignedRevocations:
        r = self.call("b0", "authority_revocations", role="broker", now=now)
        return SignedRevocations.decode(r["ok"]["list"])


def test_revoke_is_for_admins_persisted_idempotent_and_signed(tmp_path):
    db = tmp_path / "rv.db"
    s = Svc(db)
    ok = s.call("laptop", "authority_publish_permit", subject="laptop", key=THIEF_KEY.to_bytes())
    assert "ok" in ok
    assert s.call("laptop", "authority_revoke", identity="laptop")["error"] == "unauthorised"
    assert s.call("admin", "authority_revoke", identity="laptop", role="broker")["error"] == (
        "unauthorised"
    )
    assert s.list().serial == 0
    r = s.call("admin", "authority_revoke", identity="laptop")["ok"]
    assert r == {"serial": 1, "changed": True, "keys": 1}
    again = s.call("admin", "authority_revoke", identity="laptop")["ok"]
    assert again == {"serial": 1, "changed": False, "keys": 1}
    rl = s.list(now=9.0)
    rl.verify(s.kdc.authority.public_key)
    assert (rl.serial, rl.issued, rl.identities, rl.keys) == (
        1,
        9.0,
        ("laptop",),
        (THIEF_KEY.to_bytes(),),
    )
    # the revoked identity gets nothing more; its key is refused by the authority itself
    for op, f in (
        ("authority_publish_permit", {"key": THIEF_KEY.to_bytes()}),
        ("kdc_publisher", {"epoch": 0}),
        ("kdc_scope", {"scope": "cardiology", "epoch": 0}),
    ):
        assert s.call("laptop", op, subject="laptop", **f)["error"] == "revoked"
    assert "ok" in s.call("laptop", "authority_revocations")
    assert THIEF_KEY.to_bytes() in s.call("x", "authority_revoked")["ok"]["keys"]
    s.kdc.revocations.close()
    # a restart keeps every revocation and the serial; the file holds no secret
    s2 = Svc(db)
    assert s2.list().serial == 1 and s2.kdc.is_revoked("laptop")
    assert s2.call("laptop", "kdc_publisher", subject="laptop", epoch=0)["error"] == "revoked"
    assert THIEF_KEY.to_bytes() in s2.kdc.authority.revoked
    r = s2.call("admin", "authority_revoke", key=bytes(32))["ok"]
    assert r["serial"] == 2 and r["changed"]
    s2.kdc.revocations.close()
    files = [p.read_bytes() for p in tmp_path.iterdir()]
    assert files and not any(MASTER in b for b in files)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert {"rv_seen", "rv_identities", "rv_keys", "rv_meta"} <= tables


def test_malformed_revoke_requests_are_typed_refusals():
    s = Svc(None)
    assert s.call("admin", "authority_revoke")["error"] == "malformed"
    assert s.call("admin", "authority_revoke", identity="a", key=bytes(32))["error"] == "malformed"
    assert s.call("admin", "authority_revoke", key=b"short")["error"] == "invalid"
    assert s.call("admin", "authority_revoke", identity=5)["error"] == "malformed"
    assert s.list().serial == 0


def test_a_key_seen_after_the_revocation_joins_the_list():
    s = Svc(None)
    s.call("admin", "authority_revoke", identity="laptop")
    assert s.list().keys == ()
    # an eventguard advertisement of the identity is refused (revoked) before it is noted;
    # a key noted some other way after the revocation is revoked at once
    s.kdc.note_key("laptop", THIEF_KEY.to_bytes(), 6.0)
    rl = s.list()
    assert rl.serial == 2 and rl.keys == (THIEF_KEY.to_bytes(),)
    feed = RevocationFeed(s.kdc.authority.public_key)
    assert feed.offer(rl.encode(), now=6.0).new_keys == (THIEF_KEY.to_bytes(),)


def test_an_eventguard_advertisement_key_is_revoked_with_its_identity():
    from pubguard.keys.ms import MetaService

    ms = MetaService(SecretBytes(random.Random(13).randbytes(32)), epoch_length=1000.0)
    kdc = KdcService(config())
    core = KeyServiceCore(ms, kdc=kdc)

    def call(peer, op, **f):
        return core.handle({"op": op, "id": 1, **f}, peer=peer, peer_role="client", now=5.0)

    assert "ok" in call(
        "laptop", "advertise", subject="laptop", w="cardiology", pk=THIEF_KEY.to_bytes()
    )
    assert call("admin", "authority_revoke", identity="laptop")["ok"]["keys"] == 1
    rl = SignedRevocations.decode(call("b0", "authority_revocations")["ok"]["list"])
    assert rl.keys == (THIEF_KEY.to_bytes(),)
    # and the MS no longer serves the identity
    assert (
        call("laptop", "advertise", subject="laptop", w="cardiology", pk=THIEF_KEY.to_bytes())[
            "error"
        ]
        == "revoked"
    )
