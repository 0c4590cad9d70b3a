"""Subscribers verify a Merkle batch's root signature once, and a publisher's credential
(MS permit, KMC token, authority permit) once, with the real clients of every signing
profile. What is cached is a verified signature, never a delivery: a tampered publication of
an already-verified batch, a forged credential or a publication of another batch are still
refused."""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Any

import pytest

from pubguard.errors import InvalidToken
from pubguard.model import Event, Filter
from pubguard.schemes.base import ProtectedEvent
from pubguard.schemes.registry import HOSPITAL, KeyBundle

PUB = "hosp"
N = 8


def _pair(tmp: Path, profile: str, now: float) -> tuple[Any, Any]:
    bundle = KeyBundle(tmp, now=now, types=(HOSPITAL,), identities=(PUB,), rng=random.Random(5))
    f = Filter.parse('topic = "onco"')
    sub = bundle.client(profile, "sub", topics=("onco",), now=now)
    sub.protect_filter(f, now=now)
    pub = bundle.client(profile, PUB, topics=("onco",), now=now)
    if profile == "eventguard":
        pub.protect_advertisement(f, now=now)
    return pub, sub


def _events(n: int, tag: str = "") -> list[Event]:
    return [
        Event(
            {"topic": "onco", "age": 20 + i, "patientRecord": f"r{tag}{i}"},
            id=f"e{tag}{i}",
            type="patient",
            payload=b"p",
        )
        for i in range(n)
    ]


def _open(sub: Any, pe: ProtectedEvent, now: float) -> Event:
    return sub.open_event(pe.event_id, pe.routing, pe.body, pe.meta, now=now)  # type: ignore[no-any-return]


def _flip(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 1])


@pytest.mark.parametrize("profile", ["psguard", "default", "eventguard"])
def test_batch_verifies_one_signature_and_refuses_a_tampered_leaf(
    tmp_path: Path, profile: str
) -> None:
    now = time.time()
    pub, sub = _pair(tmp_path, profile, now)
    evs = _events(N)
    pes = pub.protect_events(evs, now=now)
    # one signature shared by the whole batch
    assert len({pe.meta["sig"] for pe in pes}) == 1
    opened = [_open(sub, pe, now) for pe in pes[:4]]
    checks = sub.signature_checks
    opened += [_open(sub, pe, now) for pe in pes[4:]]
    assert [e.attrs["patientRecord"] for e in opened] == [f"r{i}" for i in range(N)]
    # credential (if any) and root: verified on the first delivery, never again
    assert checks == sub.signature_checks <= 2
    # a tampered leaf of the verified batch: its path no longer leads to the cached root
    bad = pes[5]
    for forged in (
        dataclasses.replace(bad, body=_flip(bad.body)),
        dataclasses.replace(bad, meta={**bad.meta, "mi": 6}),
        dataclasses.replace(bad, meta={**bad.meta, "mp": _flip(bad.meta["mp"])}),
    ):
        with pytest.raises(InvalidToken):
            _open(sub, forged, now)
    # a leaf of another batch with this batch's signature
    other = pub.protect_events(_events(N, "x"), now=now)[5]
    with pytest.raises(InvalidToken):
        _open(sub, dataclasses.replace(other, meta={**other.meta, "sig": bad.meta["sig"]}), now)
    assert _open(sub, pes[5], now) == opened[5]  # the genuine one still opens


@pytest.mark.parametrize("profile", ["default", "eventguard", "narada"])
def test_credential_verified_once_per_publisher(tmp_path: Path, profile: str) -> None:
    """Single-signed publications: one publication signature each, the credential once."""
    now = time.time()
    pub, sub = _pair(tmp_path, profile, now)
    pes = [pub.protect_event(e, now=now) for e in _events(5)]
    for pe in pes:
        _open(sub, pe, now)
    assert sub.signature_checks == len(pes) + 1


def test_forged_credential_is_verified_afresh_and_refused(tmp_path: Path) -> None:
    """A cached permit does not vouch for a permit with one byte changed."""
    now = time.time()
    pub, sub = _pair(tmp_path, "default", now)
    pe = pub.protect_event(_events(1)[0], now=now)
    _open(sub, pe, now)
    with pytest.raises(InvalidToken):
        _open(sub, dataclasses.replace(pe, meta={**pe.meta, "pm": _flip(pe.meta["pm"])}), now)


def test_narada_cached_token_still_checked_for_duration(tmp_path: Path) -> None:
    """The token's signature is cached; its validity period is checked on every delivery."""
    now = time.time()
    pub, sub = _pair(tmp_path, "narada", now)
    pe = pub.protect_event(_events(1)[0], now=now)
    _open(sub, pe, now)
    later = now + 31 * 86_400.0  # past the token's not_after (30 days)
    with pytest.raises(InvalidToken):
        _open(sub, pe, later)
