from __future__ import annotations

import dataclasses
import logging
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.crypto import KemPrivateKey, SecretBytes
from pubguard.crypto.x509 import CertificateAuthority, Role
from pubguard.errors import (
    DropError,
    DropReason,
    InvalidToken,
    RevokedError,
    StateError,
    ValidationError,
)
from pubguard.keys.kmc import (
    KMC,
    Authorize,
    KeyRequest,
    RegisterTopic,
    RevokeEntity,
    Rights,
    SecurityToken,
    open_delivery,
    verify_token,
)
from pubguard.store import Database

NOW = 1_735_689_600.0  # 2025-01-01T00:00:00Z
DAY = 86_400.0
TOPIC = "/sensors/gis"


@dataclasses.dataclass
class Pki:
    ca: CertificateAuthority
    kmc_cert: object
    kmc_key: object
    owner: tuple
    alice: tuple
    bob: tuple
    storage: SecretBytes


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    ca = CertificateAuthority.create("ca", tmp_path_factory.mktemp("ca"), passphrase=b"pw", now=NOW)
    kmc_cert, kmc_key = ca.issue_signing_identity("kmc-1", Role.KMC, now=NOW)
    return Pki(
        ca,
        kmc_cert,
        kmc_key,
        ca.issue_signing_identity("owner", Role.CLIENT, now=NOW),
        ca.issue_signing_identity("alice", Role.CLIENT, now=NOW),
        ca.issue_signing_identity("bob", Role.BROKER, now=NOW),
        SecretBytes(random.Random(7).randbytes(32)),
    )


def _kmc(pki: Pki, db: Database, **kw) -> KMC:
    return KMC(
        db,
        signing_key=pki.kmc_key,
        cert=pki.kmc_cert,
        ca_cert=pki.ca.cert,
        storage_key=pki.storage,
        **kw,
    )


def _setup(kmc: KMC, pki: Pki, *, rights=Rights.PUBLISH, alg="AES-256-GCM", bits=256) -> None:
    ocert, okey = pki.owner
    kmc.register_topic(
        RegisterTopic.signed(okey, ocert, topic=TOPIC, algorithm=alg, key_bits=bits, now=NOW),
        now=NOW,
    )
    acert, _ = pki.alice
    kmc.authorize(
        Authorize.signed(
            okey,
            ocert,
            topic=TOPIC,
            entity=acert.subject,
            rights=rights,
            not_before=NOW,
            not_after=NOW + 30 * DAY,
            now=NOW,
        ),
        now=NOW,
    )


def _request(pki: Pki, who: tuple, kem: KemPrivateKey, now: float = NOW + 60) -> KeyRequest:
    cert, key = who
    return KeyRequest.signed(key, cert, topic=TOPIC, kem_public=kem.public, now=now)


def test_key_and_token_delivery(pki):
    kmc = _kmc(pki, Database(":memory:"))
    _setup(kmc, pki)
    kem = KemPrivateKey.generate()
    delivery = kmc.request_key(_request(pki, pki.alice, kem), now=NOW + 60)
    key = open_delivery(delivery, kem)
    assert len(key) == 32 and delivery.algorithm == "AES-256-GCM"
    # a broker holding only the KMC's public key (or its certificate + CA + CRL) checks the token
    tok = verify_token(
        delivery.token.encode(),
        pki.kmc_cert.verify_key,
        now=NOW + 120,
        topic=TOPIC,
        right="publish",
    )
    assert tok.entity == pki.alice[0].subject and tok.verify_key == pki.alice[1].public
    crl = pki.ca.crl(now=NOW)
    verify_token(
        tok, pki.kmc_cert, now=NOW + 120, ca_cert=pki.ca.cert, crl=crl, right=Rights.PUBLISH
    )
    with pytest.raises(InvalidToken):
        verify_token(tok, pki.kmc_cert.verify_key, now=NOW + 120, right=Rights.SUBSCRIBE)
    with pytest.raises(InvalidToken):
        verify_token(tok, pki.kmc_cert.verify_key, now=NOW + 120, topic="/other")
    # another entity cannot unwrap the delivery
    with pytest.raises(InvalidToken):
        open_delivery(delivery, KemPrivateKey.generate())


def test_expired_or_tampered_token_is_invalid(pki):
    kmc = _kmc(pki, Database(":memory:"), token_lifetime=3600)
    _setup(kmc, pki, rights=Rights.BOTH)
    tok = kmc.issue_token(TOPIC, pki.alice[0], now=NOW)
    vk = pki.kmc_cert.verify_key
    assert verify_token(tok, vk, now=NOW + 3599, right="subscribe") == tok
    with pytest.raises(InvalidToken):
        verify_token(tok, vk, now=NOW + 3601)
    with pytest.raises(InvalidToken):
        verify_token(dataclasses.replace(tok, rights=Rights.BOTH, topic="/x"), vk, now=NOW)
    with pytest.raises(InvalidToken):
        verify_token(dataclasses.replace(tok, not_after=tok.not_after + int(DAY)), vk, now=NOW)
    with pytest.raises(InvalidToken):
        verify_token(tok, pki.alice[1].public, now=NOW)  # not the KMC's key
    # a tampered delivery (token swapped) no longer unwraps
    kem = KemPrivateKey.generate()
    d = kmc.request_key(_request(pki, pki.alice, kem, NOW), now=NOW)
    other = kmc.issue_token(TOPIC, pki.alice[0], now=NOW)
    with pytest.raises(InvalidToken):
        open_delivery(dataclasses.replace(d, token=other), kem)


@given(st.binary(max_size=400), st.integers(0, 399), st.integers(1, 255))
def test_token_decoding_is_strict(junk, pos, flip):
    tok = SecurityToken(
        "kmc", TOPIC, "CN=a", b"f" * 32, b"k" * 32, Rights.PUBLISH, 1, 2, b"i" * 16, b"s" * 64
    )
    data = tok.encode()
    assert SecurityToken.decode(data) == tok
    try:
        SecurityToken.decode(junk)
    except InvalidToken:
        pass
    mutated = bytearray(data)
    mutated[pos % len(data)] ^= flip
    try:
        assert SecurityToken.decode(bytes(mutated)) != tok
    except InvalidToken:
        pass


def test_unauthorised_and_revoked_entities_are_refused(pki, tmp_path):
    kmc = _kmc(pki, Database(":memory:"))
    _setup(kmc, pki)
    kem = KemPrivateKey.generate()
    with pytest.raises(DropError) as exc:
        kmc.request_key(_request(pki, pki.bob, kem), now=NOW + 60)
    assert exc.value.reason is DropReason.UNAUTHORISED
    with pytest.raises(DropError):  # authorisation expired
        kmc.request_key(_request(pki, pki.alice, kem, NOW + 31 * DAY), now=NOW + 31 * DAY)
    before = open_delivery(kmc.request_key(_request(pki, pki.alice, kem), now=NOW + 60), kem)
    ocert, okey = pki.owner
    version = kmc.revoke(
        RevokeEntity.signed(okey, ocert, topic=TOPIC, entity=pki.alice[0].subject, now=NOW + 100),
        now=NOW + 100,
    )
    assert version == 2 and kmc.key_versions(TOPIC) == [1, 2]
    with pytest.raises(RevokedError):
        kmc.request_key(_request(pki, pki.alice, kem, NOW + 200), now=NOW + 200)
    # bob, authorised after the rotation, gets a key alice never saw
    kmc.authorize(
        Authorize.signed(
            okey,
            ocert,
            topic=TOPIC,
            entity=pki.bob[0].subject,
            rights="subscribe",
            not_before=NOW,
            not_after=NOW + DAY,
            now=NOW + 200,
        ),
        now=NOW + 200,
    )
    after = open_delivery(
        kmc.request_key(_request(pki, pki.bob, kem, NOW + 200), now=NOW + 200), kem
    )
    assert after != before
    # a non-owner cannot authorise itself
    bcert, bkey = pki.bob
    with pytest.raises(DropError):
        kmc.authorize(
            Authorize.signed(
                bkey,
                bcert,
                topic=TOPIC,
                entity=bcert.subject,
                rights="both",
                not_before=NOW,
                not_after=NOW + DAY,
                now=NOW,
            ),
            now=NOW,
        )


def test_ca_revocation_refuses_entity_and_kmc(pki, tmp_path):
    ca = CertificateAuthority.create("ca2", tmp_path / "ca", passphrase=b"pw", now=NOW)
    kcert, kkey = ca.issue_signing_identity("kmc", Role.KMC, now=NOW)
    owner = ca.issue_signing_identity("owner", Role.CLIENT, now=NOW)
    alice = ca.issue_signing_identity("alice", Role.CLIENT, now=NOW)
    kmc = KMC(
        Database(":memory:"), signing_key=kkey, cert=kcert, ca_cert=ca.cert, storage_key=pki.storage
    )
    local = Pki(ca, kcert, kkey, owner, alice, alice, pki.storage)
    _setup(kmc, local)
    tok = kmc.issue_token(TOPIC, alice[0], now=NOW)
    kem = KemPrivateKey.generate()
    kmc.request_key(_request(local, alice, kem, NOW), now=NOW)  # alice's certificate now cached
    kmc.update_crl(ca.revoke(alice[0], now=NOW + 1), now=NOW + 2)
    with pytest.raises(RevokedError):
        kmc.request_key(_request(local, alice, KemPrivateKey.generate(), NOW + 3), now=NOW + 3)
    with pytest.raises(InvalidToken):  # a stale CRL fails closed
        kmc.request_key(_request(local, owner, kem, NOW + 8 * DAY), now=NOW + 8 * DAY)
    crl = ca.revoke(kcert, now=NOW + 5)
    with pytest.raises(RevokedError):
        verify_token(tok, kcert, now=NOW + 6, ca_cert=ca.cert, crl=crl)


def test_bad_requests_are_typed(pki):
    kmc = _kmc(pki, Database(":memory:"))
    ocert, okey = pki.owner
    with pytest.raises(ValidationError, match="algorithm"):
        kmc.register_topic(
            RegisterTopic.signed(okey, ocert, topic=TOPIC, algorithm="DES", key_bits=56, now=NOW),
            now=NOW,
        )
    with pytest.raises(ValidationError, match="128-bit"):
        kmc.register_topic(
            RegisterTopic.signed(
                okey, ocert, topic=TOPIC, algorithm="AES-128-GCM", key_bits=256, now=NOW
            ),
            now=NOW,
        )
    with pytest.raises(StateError, match="unknown secure topic"):
        kmc.request_key(_request(pki, pki.alice, KemPrivateKey.generate()), now=NOW + 60)
    _setup(kmc, pki, alg="AES-128-GCM", bits=128)
    with pytest.raises(StateError, match="already registered"):
        _setup(kmc, pki)
    # stale (replayed) request and forged signature
    kem = KemPrivateKey.generate()
    with pytest.raises(InvalidToken):
        kmc.request_key(_request(pki, pki.alice, kem, NOW), now=NOW + 3600)
    forged = dataclasses.replace(_request(pki, pki.alice, kem), topic="/other")
    with pytest.raises(InvalidToken):
        kmc.request_key(forged, now=NOW + 60)
    with pytest.raises(ValidationError, match="rights"):
        kmc.authorize(
            Authorize.signed(
                okey,
                ocert,
                topic=TOPIC,
                entity="CN=x",
                rights="read",
                not_before=NOW,
                not_after=NOW + 1,
                now=NOW,
            ),
            now=NOW,
        )
    with pytest.raises(ValidationError):
        KMC(
            Database(":memory:"),
            signing_key=okey,
            cert=ocert,
            ca_cert=pki.ca.cert,
            storage_key=pki.storage,
        )
    assert (
        len(open_delivery(kmc.request_key(_request(pki, pki.alice, kem), now=NOW + 60), kem)) == 16
    )


def test_restart_keeps_registrations_and_keys_never_plaintext_on_disk(pki, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "kmc.db"
    db = Database(path)
    kmc = _kmc(pki, db)
    _setup(kmc, pki)
    kem = KemPrivateKey.generate()
    key1 = open_delivery(kmc.request_key(_request(pki, pki.alice, kem), now=NOW + 60), kem)
    errors: list[str] = []
    for bad in (
        lambda: kmc.request_key(_request(pki, pki.bob, kem), now=NOW + 60),
        lambda: kmc.rotate("/nope", now=NOW),
    ):
        try:
            bad()
        except Exception as exc:  # noqa: BLE001 - collecting texts for the canary
            errors.append(f"{exc!r} {exc}")
    wal_bytes = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    db.close()

    again = _kmc(pki, Database(path))
    assert [t.topic for t in again.topics()] == [TOPIC]
    assert again.entities(TOPIC)[0][:2] == (pki.alice[0].subject, Rights.PUBLISH)
    key2 = open_delivery(
        again.request_key(_request(pki, pki.alice, kem, NOW + 90), now=NOW + 90), kem
    )
    assert key1 == key2

    # canary: the topic key appears nowhere -- not in the SQLite file (+WAL), logs, reprs, errors
    secret = key1.reveal()
    disk = wal_bytes + b"".join(p.read_bytes() for p in tmp_path.iterdir())
    texts = " ".join([caplog.text, repr(again), repr(key1), *errors, repr(again.topics())])
    assert secret not in disk and secret.hex().encode() not in disk
    assert secret.hex() not in texts and pki.storage.reveal().hex() not in texts
    assert pki.storage.reveal() not in disk
    # a KMC with the wrong storage key cannot open the stored keys
    wrong = KMC(
        Database(path),
        signing_key=pki.kmc_key,
        cert=pki.kmc_cert,
        ca_cert=pki.ca.cert,
        storage_key=SecretBytes(b"\x00" * 32),
    )
    with pytest.raises(InvalidToken):
        wrong.request_key(_request(pki, pki.alice, kem, NOW + 90), now=NOW + 90)
