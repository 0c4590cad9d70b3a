"""EventGuard meta-service: tokens, epoch keys, permits, UST/UAT, renewal, replicas."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.errors import InvalidToken, ValidationError
from pubguard.keys import (
    AdvertisementPermit,
    MetaService,
    SubscriptionPermit,
    UnadvertisementPermit,
    UnsubscriptionPermit,
    decode_permit,
    verify_permit,
)

RK = SecretBytes(bytes(range(32)))
DAY = 86400.0


def _ms(master: SecretBytes = RK) -> MetaService:
    return MetaService(master, epoch_length=DAY)


def _kh(k: bytes, m: bytes) -> bytes:
    return hmac.new(k, m, hashlib.sha256).digest()


def test_token_and_epoch_key_formulas() -> None:
    """eventguard.txt §4.2, §4.8, computed independently with hashlib/hmac."""
    ms, rk = _ms(), RK.reveal()
    assert ms.topic_token("news") == hashlib.sha256(_kh(rk, b"news")).digest()
    assert ms.epoch_key("news", 12).reveal() == _kh(_kh(rk, b"12"), b"news")
    sb_id = bytes(16)
    assert ms.ust(sb_id).reveal() == _kh(rk, sb_id)


def test_subscribe_grant_and_broker_verification() -> None:
    ms = _ms()
    g = ms.subscribe("alice", "news", now=3 * DAY + 5, rng=random.Random(1))
    p = g.permit
    assert (p.epoch, p.issued_at, p.expires_at) == (3, 3 * DAY + 5, 4 * DAY)
    assert p.token == ms.topic_token("news") and p.subject == "alice"
    assert g.key == ms.epoch_key("news", 3) and g.ust == ms.ust(p.sb_id)
    verify_permit(p, ms.public_key, now=3 * DAY + 6)
    verify_permit(decode_permit(p.to_bytes()), ms.public_key, now=3 * DAY + 6)


def test_fresh_nonce_per_permit() -> None:
    ms = _ms()
    a = ms.subscribe("alice", "news", now=10.0)
    b = ms.subscribe("alice", "news", now=10.0)
    assert a.permit.sb_id != b.permit.sb_id and a.permit.signature != b.permit.signature
    assert a.key == b.key  # same topic, same epoch: same K(w, e)


def test_replicas_issue_interchangeable_permits() -> None:
    """eventguard.txt §3.2: replicas share only rk and need no coordination."""
    ms1, ms2 = _ms(), _ms(SecretBytes(RK.reveal()))
    assert ms1.public_key == ms2.public_key
    g = ms1.subscribe("alice", "news", now=100.0, rng=random.Random(7))
    verify_permit(g.permit, ms2.public_key, now=101.0)
    usb = ms2.unsubscribe(g.permit, g.ust, now=200.0, rng=random.Random(8))
    verify_permit(usb, ms1.public_key, now=201.0)
    assert usb.sb_id == g.permit.sb_id and usb.token == g.permit.token
    renewed = ms2.renew_subscription(g.permit, g.ust, "news", now=DAY + 1)
    assert renewed.key == ms1.epoch_key("news", 1)
    # same request, same rng: byte-identical permits from either replica
    assert ms1.subscribe("bob", "x", now=5.0, rng=random.Random(9)) == ms2.subscribe(
        "bob", "x", now=5.0, rng=random.Random(9)
    )


def test_other_master_is_not_a_replica() -> None:
    g = _ms().subscribe("alice", "news", now=1.0)
    other = _ms(SecretBytes(b"z" * 32))
    with pytest.raises(InvalidToken):
        verify_permit(g.permit, other.public_key, now=2.0)
    with pytest.raises(InvalidToken):
        other.unsubscribe(g.permit, g.ust, now=2.0)


def test_advertise_and_unadvertise() -> None:
    ms = _ms()
    pub = SigningKey.from_seed(b"p" * 32)
    g = ms.advertise("P", pub.public, "news", now=50.0, rng=random.Random(2))
    assert g.permit.publisher_key == pub.public.to_bytes()
    assert g.uat == ms.uat(g.permit.ad_id) and g.key == ms.epoch_key("news", 0)
    verify_permit(g.permit, ms.public_key, now=51.0)
    uad = ms.unadvertise(g.permit, g.uat, now=60.0)
    assert isinstance(uad, UnadvertisementPermit) and uad.ad_id == g.permit.ad_id
    verify_permit(decode_permit(uad.to_bytes()), ms.public_key, now=61.0)
    with pytest.raises(InvalidToken):
        ms.unadvertise(g.permit, ms.ust(g.permit.ad_id[::-1]), now=60.0)


def test_fake_unsubscription_refused() -> None:
    """eventguard.txt §4.5: another subscriber S' of the same topic cannot unsubscribe S."""
    ms = _ms()
    s = ms.subscribe("S", "news", now=1.0)
    s2 = ms.subscribe("S2", "news", now=1.0)
    with pytest.raises(InvalidToken):
        ms.unsubscribe(s.permit, s2.ust, now=2.0)
    with pytest.raises(InvalidToken):
        ms.unsubscribe(s.permit, b"", now=2.0)
    with pytest.raises(InvalidToken):
        ms.check_ust(s2.permit, s.ust)
    ms.check_ust(s.permit, s.ust.reveal())  # raw bytes accepted too


def test_tampered_forged_expired_permits() -> None:
    ms = _ms()
    p = ms.subscribe("alice", "news", now=10.0).permit
    for bad in [
        dataclasses.replace(p, subject="mallory"),
        dataclasses.replace(p, expires_at=p.expires_at + DAY),
        dataclasses.replace(p, epoch=p.epoch + 1),
        dataclasses.replace(p, sb_id=bytes(16)),
        dataclasses.replace(p, signature=b""),
        dataclasses.replace(p, signature=bytes(64)),
    ]:
        with pytest.raises(InvalidToken):
            verify_permit(bad, ms.public_key, now=11.0)
    forger = SigningKey.from_seed(b"f" * 32)
    forged = dataclasses.replace(p, signature=forger.sign(p.signed_bytes()))
    with pytest.raises(InvalidToken):
        verify_permit(forged, ms.public_key, now=11.0)
    with pytest.raises(InvalidToken):  # expired
        verify_permit(p, ms.public_key, now=DAY + 1)
    with pytest.raises(InvalidToken):  # issued in the future
        verify_permit(p, ms.public_key, now=0.0)
    with pytest.raises(InvalidToken):  # routing guard freshness (eventguard.txt §4.7)
        verify_permit(p, ms.public_key, now=100.0, max_delay=30.0)
    verify_permit(p, ms.public_key, now=30.0, max_delay=30.0)


@given(pos=st.integers(min_value=0), bit=st.integers(0, 7))
def test_any_flipped_bit_is_refused(pos: int, bit: int) -> None:
    ms = _ms()
    blob = bytearray(
        ms.subscribe("alice", "news", now=10.0, rng=random.Random(0)).permit.to_bytes()
    )
    blob[pos % len(blob)] ^= 1 << bit
    with pytest.raises(InvalidToken):
        verify_permit(decode_permit(bytes(blob)), ms.public_key, now=11.0)


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"junk",
        b"pubguard/eventguard/permit/v1\x00zz\x00",
        b"pubguard/eventguard/permit/v1\x00sb\x00\x00\x00\x00\x09",
    ],
)
def test_malformed_permit_bytes(blob: bytes) -> None:
    with pytest.raises(InvalidToken):
        decode_permit(blob)


def test_all_four_permit_kinds_roundtrip() -> None:
    ms = _ms()
    s = ms.subscribe("S", "w", now=1.0)
    a = ms.advertise("P", bytes(32), "w", now=1.0)
    perms = [
        s.permit,
        a.permit,
        ms.unsubscribe(s.permit, s.ust, now=2.0),
        ms.unadvertise(a.permit, a.uat, now=2.0),
    ]
    kinds = [SubscriptionPermit, AdvertisementPermit, UnsubscriptionPermit, UnadvertisementPermit]
    for p, cls in zip(perms, kinds, strict=True):
        q = decode_permit(p.to_bytes())
        assert type(q) is cls and q == p
    assert len({p.signed_bytes()[:40] for p in perms}) == 4  # the kind is inside the signed bytes


def test_per_epoch_renewal() -> None:
    ms = _ms()
    g = ms.subscribe("alice", "news", now=10.0)
    r = ms.renew_subscription(g.permit, g.ust, "news", now=DAY + 10)
    assert r.permit.sb_id == g.permit.sb_id and r.ust == g.ust  # the network's entry survives
    assert (r.permit.epoch, r.permit.expires_at) == (1, 2 * DAY)
    assert r.key != g.key and r.key == ms.epoch_key("news", 1)
    verify_permit(r.permit, ms.public_key, now=DAY + 11)
    with pytest.raises(InvalidToken):  # two epochs late
        ms.renew_subscription(g.permit, g.ust, "news", now=2 * DAY + 10)
    with pytest.raises(InvalidToken):  # wrong topic
        ms.renew_subscription(g.permit, g.ust, "sports", now=DAY + 10)
    a = ms.advertise("P", bytes(32), "news", now=10.0)
    ra = ms.renew_advertisement(a.permit, a.uat, "news", now=DAY + 10)
    assert ra.permit.ad_id == a.permit.ad_id and ra.key == r.key


def test_bad_input() -> None:
    with pytest.raises(ValidationError):
        MetaService(SecretBytes(b"short"))
    with pytest.raises(ValidationError):
        MetaService(b"x" * 32)  # type: ignore[arg-type]  # must be a SecretBytes
    with pytest.raises(ValidationError):
        MetaService(RK, epoch_length=0)
    ms = _ms()
    with pytest.raises(ValidationError):
        ms.subscribe("", "news", now=1.0)
    with pytest.raises(ValidationError):
        ms.subscribe("alice", "bad\x00topic", now=1.0)
    with pytest.raises(ValidationError):
        ms.subscribe("alice", "news", now=-5.0)
    with pytest.raises(ValidationError):
        ms.advertise("P", b"short", "news", now=1.0)
    with pytest.raises(ValidationError):
        ms.epoch_key("news", -1)
    with pytest.raises(ValidationError):
        SubscriptionPermit(bytes(32), bytes(16), "s", 0, 5.0, 4.0)  # expires before issue
