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


@pytest.mark.parametrize("profile", ["default", "eventguard"])
def test_subscribers_of_one_process_share_verified_roots_and_permits(
    tmp_path: Path, profile: str
) -> None:
    """Many subscribers in one process: a batch's root and the publisher's credential are
    verified by whichever subscriber meets them first, once for the process; every other
    subscriber still recomputes its leaf's path and refuses a tampered delivery."""
    now = time.time()
    bundle = KeyBundle(
        tmp_path, now=now, types=(HOSPITAL,), identities=(PUB,), rng=random.Random(7)
    )
    f = Filter.parse('topic = "onco"')
    subs = [bundle.client(profile, f"sub{i}", topics=("onco",), now=now) for i in range(4)]
    for s in subs:
        s.protect_filter(f, now=now)
    pub = bundle.client(profile, PUB, topics=("onco",), now=now)
    if profile == "eventguard":
        pub.protect_advertisement(f, now=now)
    pes = pub.protect_events(_events(N), now=now)
    # fan-out one: delivery i goes to subscriber i mod 4 (each meets the batch anew)
    opened = [_open(subs[i % 4], pe, now) for i, pe in enumerate(pes)]
    assert [e.attrs["patientRecord"] for e in opened] == [f"r{i}" for i in range(N)]
    checks = [s.signature_checks for s in subs]
    assert sum(checks) == 2  # the root and the credential, once for the process
    assert checks[0] == 2 and checks[1:] == [0, 0, 0]
    bad = pes[6]
    for s in subs:  # the shared root does not vouch for a leaf that does not lead to it
        with pytest.raises(InvalidToken):
            _open(s, dataclasses.replace(bad, body=_flip(bad.body)), now)
        with pytest.raises(InvalidToken):
            _open(s, dataclasses.replace(bad, meta={**bad.meta, "mp": _flip(bad.meta["mp"])}), now)
    # a subscriber without the keys of the event's topic still cannot open it
    other = bundle.client(profile, "sub-x", topics=("cardio",), now=now)
    other.protect_filter(Filter.parse('topic = "cardio"'), now=now)
    with pytest.raises(InvalidToken):
        _open(other, pes[0], now)


def test_shared_roots_are_safe_across_threads(tmp_path: Path) -> None:
    """Openings in worker threads (a client opens some deliveries off its loop) share the
    process-wide caches under their lock: every delivery opens, the root is verified once."""
    from concurrent.futures import ThreadPoolExecutor

    now = time.time()
    bundle = KeyBundle(
        tmp_path, now=now, types=(HOSPITAL,), identities=(PUB,), rng=random.Random(9)
    )
    f = Filter.parse('topic = "onco"')
    subs = [bundle.client("default", f"sub{i}", topics=("onco",), now=now) for i in range(4)]
    for s in subs:
        s.protect_filter(f, now=now)
    pes = bundle.client("default", PUB, topics=("onco",), now=now).protect_events(
        _events(32), now=now
    )
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda ip: _open(subs[ip[0] % 4], ip[1], now), enumerate(pes)))
    assert [e.id for e in got] == [f"e{i}" for i in range(32)]
    assert sum(s.signature_checks for s in subs) == 2
