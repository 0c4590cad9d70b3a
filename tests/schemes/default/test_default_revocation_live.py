"""A default broker reads its revocations live on both backends: a CRL installed after the
guard was built (``update_crl``, narada §IV-A: the CA notifies brokers) refuses the next
publication under a revoked certificate as ``revoked``, as a revoked key does (the native
guard reads the scheme's very sets, with no call back into Python per publication)."""

from __future__ import annotations

import random

import pytest

from pubguard.crypto import SigningKey
from pubguard.crypto.x509 import CertificateAuthority, Role
from pubguard.errors import DropReason
from pubguard.schemes.base import CheckContext, LinkInfo, LinkKind
from pubguard.schemes.default.broker import DEFAULT, DefaultBroker
from pubguard.schemes.default.client import DefaultClient
from pubguard.wire.messages import Publish
from tests.schemes.default.test_default import NOW, authority
from tests.schemes.psguard.test_psguard_net import ev

pytestmark = pytest.mark.usefixtures("backend")


def test_a_crl_installed_later_and_a_key_revoked_later_refuse_the_next_publication(
    tmp_path,
) -> None:
    auth = authority()
    ca = CertificateAuthority.create("ca", tmp_path, passphrase=b"pw", now=NOW)
    cert, _ = ca.issue_signing_identity("hospital", Role.CLIENT, now=NOW)
    other, _ = ca.issue_signing_identity("clinic", Role.CLIENT, now=NOW)
    b = DefaultBroker(auth.public_key, ca_cert=ca.cert, now=NOW)
    client = DefaultClient("hospital", auth, cert_serial=cert.serial)
    ctx = CheckContext(NOW, LinkInfo("c", LinkKind.CLIENT), "b0")
    rng = random.Random(1)

    def check(eid: str) -> DropReason | None:
        pe = client.protect_event(ev(25, eid=eid), now=NOW, rng=rng)
        return b.broker_check(Publish(pe.event_id, DEFAULT, pe.routing, pe.body, pe.meta), ctx)

    assert check("a") is None
    b.update_crl(ca.revoke(other, now=NOW), now=NOW)  # another certificate: still passes
    assert check("b") is None
    b.update_crl(ca.revoke(cert, now=NOW), now=NOW)
    assert check("c") is DropReason.REVOKED
    fresh = DefaultBroker(auth.public_key, now=NOW)
    key = SigningKey.from_seed(b"k" * 32)
    client2 = DefaultClient("hospital", auth, signing_key=key)
    pe = client2.protect_event(ev(25, eid="d"), now=NOW, rng=rng)
    msg = Publish(pe.event_id, DEFAULT, pe.routing, pe.body, pe.meta)
    fresh.revoke(key.public)
    assert fresh.broker_check(msg, ctx) is DropReason.REVOKED
