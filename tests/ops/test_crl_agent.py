"""The CRL is renewed before it expires: the pure schedule (crypto/crl_renewal.py) and the
agent that holds the CA key (ops/crl_agent.py), over a real CA and real CRL files, driven by
an injected clock across 30 days."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pubguard.crypto.crl_renewal import DAY, CrlRenewal
from pubguard.crypto.x509 import CRL_FILE, CertificateAuthority, Role, load_crl
from pubguard.errors import ValidationError
from pubguard.ops.crl_agent import CrlAgent, crl_health

T0 = 1_700_000_000.0
HOUR = 3600.0


def test_schedule_is_due_lead_before_next_update() -> None:
    r = CrlRenewal(validity=7 * DAY, lead=2 * DAY)
    assert r.due(T0)  # no CRL yet
    w = r.renew(T0)
    assert (w.last_update, w.next_update, w.days) == (T0, T0 + 7 * DAY, 7.0)
    assert not r.due(T0 + 5 * DAY - 1)
    assert r.due(T0 + 5 * DAY)
    assert r.wait(T0) == 5 * DAY and r.wait(T0 + 6 * DAY) == 0.0
    for validity, lead in ((DAY, DAY), (DAY, 2 * DAY), (DAY, 0.0), (-1.0, -2.0)):
        with pytest.raises(ValidationError):
            CrlRenewal(validity=validity, lead=lead)


def test_agent_never_lets_the_crl_lapse_across_30_days(tmp_path: Path) -> None:
    """Every hour for 30 days (a fake clock): the CRL on disk is signed by the CA and valid at
    that hour, every renewal happens before the old list's next update, and a revocation made
    meanwhile by another holder of the CA (its own process) is never dropped by a renewal."""
    ca = CertificateAuthority.create("ca", tmp_path / "ca", passphrase=b"pw", now=T0)
    other = CertificateAuthority.load(tmp_path / "ca", passphrase=b"pw")  # e.g. `revoke`
    victim = ca.issue_signing_identity("mallory", Role.CLIENT, now=T0)[0]
    agent = CrlAgent(ca, CrlRenewal(validity=7 * DAY, lead=2 * DAY), clock=lambda: T0)
    renewed_at: list[float] = []
    t = T0
    while t <= T0 + 30 * DAY:
        if t == T0 + 10 * DAY:
            other.revoke(victim, now=t)
        before = load_crl(tmp_path / "ca" / CRL_FILE).next_update
        assert before is not None
        if agent.tick(t) is not None:
            renewed_at.append(t)
            assert t < before.timestamp(), "renewed only after the CRL had expired"
            assert t == before.timestamp() - 2 * DAY  # exactly the lead before (hourly ticks)
        crl = load_crl(tmp_path / "ca" / CRL_FILE)
        crl.check(ca.cert, t)  # InvalidToken if expired or not the CA's
        assert not crl.expired(t)
        if t >= T0 + 10 * DAY:
            assert crl.is_revoked(victim)
        t += HOUR
    # a 7-day list renewed 2 days early, every 5 days; the revocation on day 10 re-signed it
    assert [round((r - T0) / DAY, 3) for r in renewed_at] == [5.0, 15.0, 20.0, 25.0, 30.0]


def test_without_renewal_the_same_crl_lapses(tmp_path: Path) -> None:
    """The failure the agent prevents: the CRL made with the CA is expired after 7 days."""
    ca = CertificateAuthority.create("ca", tmp_path / "ca", passphrase=b"pw", now=T0)
    crl = load_crl(tmp_path / "ca" / CRL_FILE)
    assert not crl.expired(T0 + 7 * DAY - 1) and crl.expired(T0 + 7 * DAY + 1)
    assert ca.cert.name == "ca"


def test_agent_renews_a_crl_that_is_not_the_cas(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("ca", tmp_path / "ca", passphrase=b"pw", now=T0)
    stranger = CertificateAuthority.create("ca", tmp_path / "x", passphrase=b"pw", now=T0)
    stranger.crl(now=T0, days=365)
    (tmp_path / "ca" / CRL_FILE).write_bytes((tmp_path / "x" / CRL_FILE).read_bytes())
    agent = CrlAgent(ca, CrlRenewal(), clock=lambda: T0)
    assert agent.tick(T0 + HOUR) is not None
    load_crl(tmp_path / "ca" / CRL_FILE).check(ca.cert, T0 + HOUR)


def test_crl_health_reads_the_files(tmp_path: Path) -> None:
    state = tmp_path / "s"
    now = dt.datetime.now(dt.UTC).timestamp()
    ca = CertificateAuthority.create("ca", state / "pki" / "ca", passphrase=b"pw", now=now)
    h = crl_health(state, now=now)
    assert h["healthy"] and h["state"] == "ok" and h["agent"] is None
    ca.crl(now=now - 8 * DAY)  # an 8-day-old, 7-day CRL
    h = crl_health(state, now=now)
    assert not h["healthy"] and h["state"] == "expired"
    assert "expired at" in h["summary"] and "pubguard ca renew-crl" in h["summary"]
    assert "\n" not in h["summary"]
