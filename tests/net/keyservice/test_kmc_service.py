"""Narada's KMC hosted in the key service (net/keyservice/kmc_service.py), driven through the
sans-IO core: a client's TLS certificate is its entity certificate, the KMC's key derives from
its secret (a restart signs with the same key and delivers the same topic key), rights follow
the policy, and nobody gets a token with another identity's credentials."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubguard.crypto import KemPrivateKey, SecretBytes
from pubguard.crypto.x509 import CertificateAuthority, Role
from pubguard.errors import ValidationError
from pubguard.keys.discovery import decode_delivery
from pubguard.keys.kmc_messages import KeyRequest, Rights, open_delivery, verify_token
from pubguard.net.keyservice.core import KeyServiceCore
from pubguard.net.keyservice.kmc_service import (
    KmcService,
    kmc_signing_key,
    kmc_storage_key,
    policy_rights,
)
from pubguard.net.keyservice.protocol import Caller, Refused
from pubguard.store import Database

SECRET = SecretBytes(bytes(range(32)))
NOW = time.time()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority.create(
        "test-ca", tmp_path_factory.mktemp("ca"), passphrase=b"pw", now=NOW - 60
    )


def _service(ca: CertificateAuthority, db: Database, **policy: object) -> KmcService:
    cert = ca.issue("kmc", Role.KMC, kmc_signing_key(SECRET).public, now=NOW - 60)
    return KmcService(SECRET, cert=cert, ca_cert=ca.cert, db=db, **policy)  # type: ignore[arg-type]


def _ask(core: KeyServiceCore, req: KeyRequest, caller: str) -> dict[str, object]:
    fields = {
        "cert": req.cert_pem,
        "ts": req.timestamp_ms,
        "topic": req.topic,
        "kem": req.kem_public,
        "sig": req.signature,
    }
    return core.answer(
        {"op": "kmc_key", "id": 1, **fields}, Caller(caller, "client"), now=NOW, rng=None
    )


def test_a_restart_signs_with_the_same_key_and_delivers_the_same_topic_key(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    cert, sk = ca.issue_signing_identity("alice", Role.CLIENT, now=NOW - 60)
    keys = []
    for _ in range(2):  # the same secret and database: a restarted key service
        svc = _service(ca, Database(tmp_path / "kmc.db"))
        core = KeyServiceCore(kmc=svc)
        kem = KemPrivateKey.generate()
        req = KeyRequest.signed(sk, cert, topic="cardiology", kem_public=kem.public, now=NOW)
        d = decode_delivery(_ask(core, req, "alice")["delivery"])  # type: ignore[arg-type]
        verify_token(d.token, svc.cert.verify_key, now=NOW)
        assert d.token.rights is Rights.BOTH and d.token.topic == "cardiology"
        assert d.token.cert_fingerprint == cert.fingerprint
        keys.append(open_delivery(d, kem).reveal())
        assert (
            core.answer({"op": "info", "id": 2}, Caller("alice"), now=NOW, rng=None)["kmc_cert"]
            == svc.cert.to_der()
        )
    assert keys[0] == keys[1]


def test_credentials_of_another_identity_and_a_broker_are_refused(
    ca: CertificateAuthority,
) -> None:
    core = KeyServiceCore(kmc=_service(ca, Database(":memory:")))
    cert, sk = ca.issue_signing_identity("alice", Role.CLIENT, now=NOW - 60)
    req = KeyRequest.signed(
        sk, cert, topic="t", kem_public=KemPrivateKey.generate().public, now=NOW
    )
    with pytest.raises(Refused) as exc:
        _ask(core, req, "mallory")
    assert exc.value.code == "unauthorised"
    with pytest.raises(Refused) as exc:
        core.answer({"op": "kmc_key", "id": 1}, Caller("alice", "broker"), now=NOW, rng=None)
    assert exc.value.code == "unauthorised"


def test_a_certificate_of_another_key_is_refused_at_start(ca: CertificateAuthority) -> None:
    other = ca.issue_signing_identity("kmc", Role.KMC, now=NOW - 60)[0]
    with pytest.raises(ValidationError):
        KmcService(SECRET, cert=other, ca_cert=ca.cert, db=Database(":memory:"))


def test_rights_follow_the_policy() -> None:
    subs = {"researcher": ['topic = "trial" && age > 3'], "both": ['topic = "t"']}
    pubs = {"both": ["t"], "ward": ["t"]}
    assert policy_rights(subs, pubs, "researcher", "trial") is Rights.SUBSCRIBE
    assert policy_rights(subs, pubs, "researcher", "t") is None
    assert policy_rights(subs, pubs, "both", "t") is Rights.BOTH
    assert policy_rights(subs, pubs, "ward", "t") is Rights.PUBLISH
    assert policy_rights(None, None, "anyone", "any") is Rights.BOTH


@settings(max_examples=20, deadline=None)
@given(st.binary(min_size=16, max_size=64), st.binary(min_size=16, max_size=64))
def test_kmc_keys_are_deterministic_and_separate_per_secret(a: bytes, b: bytes) -> None:
    assert kmc_signing_key(a).public == kmc_signing_key(a).public
    assert kmc_storage_key(a).reveal() == kmc_storage_key(a).reveal()
    assert kmc_storage_key(a).reveal() != kmc_signing_key(a).private_bytes()
    if a != b:
        assert kmc_signing_key(a).public != kmc_signing_key(b).public


def test_kmc_key_known_answer() -> None:
    # HKDF-SHA256(secret = 00..1f, info = "pubguard/narada-kmc/signing") as an Ed25519 seed
    pub = kmc_signing_key(bytes(range(32))).public.to_bytes().hex()
    assert pub == "ae8957cb3c5708d9306eaa02b6b3be72dc4737829cc77a8699221a012240871a"
