"""Canary: a planted master secret and every key derived from it never show up in a repr,
str, exception text or log line of the key services' objects."""

from __future__ import annotations

import base64
import logging
import random
import traceback

import pytest

from pubguard.crypto import SecretBytes, SigningKey
from pubguard.errors import PubguardError
from pubguard.keys import KDC, KeyCache, MetaService, TopicKeys, derive_from

CANARY = bytes.fromhex("5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7")


def _forms(secret: bytes) -> list[str]:
    return [
        secret.hex(),
        secret.hex().upper(),
        secret.hex()[:16],
        base64.b64encode(secret).decode()[:16],
        repr(secret)[2:18],
    ]


def test_no_key_bytes_anywhere(caplog: pytest.LogCaptureFixture) -> None:
    master = SecretBytes(CANARY)
    kdc = KDC(master)
    ms = MetaService(master, epoch_length=100.0)
    log = logging.getLogger("pubguard.keys.canary")
    texts: list[str] = []
    secrets: list[bytes] = [CANARY]

    with caplog.at_level(logging.DEBUG):
        tk = kdc.topic("w")
        auth = kdc.numeric_auth_keys("w", "age", 8, 19, 32, 4)
        leaf, ek = kdc.numeric_event_key("w", "age", 22, 32, 4)
        sub = ms.subscribe("alice", "w", now=1.0, rng=random.Random(1))
        adv = ms.advertise("P", SigningKey.from_seed(b"p" * 32).public, "w", now=1.0)
        cache = KeyCache()
        cache.add_all(("w", "age"), auth)
        cache.derive(("w", "age"), "011")
        objects: list[object] = [
            kdc,
            ms,
            tk,
            TopicKeys(kdc.topic_key("w")),
            cache,
            auth,
            ek,
            sub,
            adv,
        ]
        objects += [kdc.topic_key("w"), kdc.publisher_key("P", "w"), sub.key, sub.ust, adv.uat]
        secrets += [k.reveal() for k in auth.values()]
        secrets += [ek.reveal(), sub.key.reveal(), sub.ust.reveal(), adv.uat.reveal()]
        secrets += [kdc.topic_key("w").reveal(), kdc.numeric_key("w", "age", "").reveal()]
        for obj in objects:
            log.debug("object %s / %r", obj, obj)
            texts += [repr(obj), str(obj), f"{obj}"]
        # failures: derivations refused, forged unsubscription, bad input
        attempts = [
            lambda: derive_from("1", auth["01"], "0110"),
            lambda: cache.derive(("w", "age"), "111"),
            lambda: ms.unsubscribe(sub.permit, CANARY, now=2.0),
            lambda: ms.check_ust(sub.permit, adv.uat),
            lambda: kdc.numeric_auth_keys("w", "age", 9, 19, 32, 4),
            lambda: KDC(SecretBytes(CANARY[:8])),
        ]
        for attempt in attempts:
            with pytest.raises(PubguardError) as exc:
                attempt()
            log.exception("refused: %s", exc.value, exc_info=exc.value)
            texts += [
                str(exc.value),
                repr(exc.value),
                "".join(traceback.format_exception(exc.value)),
            ]
    texts.append(caplog.text)
    assert len(caplog.records) >= len(objects) + len(attempts)

    blob = "\n".join(texts)
    for secret in secrets:
        for form in _forms(secret):
            assert form not in blob, "key material leaked into text"
