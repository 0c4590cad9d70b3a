"""Shared builders for the v-CAPS tests: a publisher per profile and reference routing."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from random import Random

from pubguard.crypto import SigningKey
from pubguard.model.events import Event
from pubguard.model.filters import Filter
from pubguard.schemes.vcaps import VcapsKeyService, VcapsPublisher, VcapsTree, decode_routing
from pubguard.schemes.vcaps.tokens import decode_token

MASTER = b"m" * 32
SEED = b"s" * 32


def publisher(
    profile: str, *, seed: int = 1, name: str = "P", master: bytes = MASTER
) -> VcapsPublisher:
    return VcapsPublisher(
        name,
        profile,
        master=master,
        signing_key=SigningKey.from_seed(SEED),
        keys=VcapsKeyService(b"k" * 32),
        rng=Random(seed),
    )


def f(text: str) -> Filter:
    return Filter.parse(text)


def subscribe(
    tree: VcapsTree, pub: VcapsPublisher, broker: str, sub: str, flt: Filter, **kw: bool
) -> bytes:
    """Stage I then Stage II; returns the token's handle."""
    wire = pub.register(flt, subscriber=sub)
    if kw.get("immediate"):
        fid = pub.filter_id(flt)
        assert fid is not None
        wire = pub.token(fid, immediate=True)
    tok = decode_token(pub.profile, wire)
    tree.subscribe(broker, sub, tok)
    return tok.handle


def route(tree: VcapsTree, pub: VcapsPublisher, event: Event) -> set[str]:
    return tree.route(decode_routing(pub.profile, pub.publish(event, now=0.0).routing))


def reference(subs: Iterable[tuple[str, Filter]], event: Mapping[str, object] | Event) -> set[str]:
    return {s for s, flt in subs if flt.matches(event)}
