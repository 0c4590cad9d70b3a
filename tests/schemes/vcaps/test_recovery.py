"""Publisher recovery (vcaps.txt §8): a restarted publisher rebuilds its PFPoset, with the same
filter IDs, from the ``E_ks(F)`` its brokers hold."""

from __future__ import annotations

import pytest

from pubguard.model.events import Event
from pubguard.schemes.vcaps import FAST, RV, SRV
from pubguard.schemes.vcaps.tokens import decode_routing, decode_token
from tests.schemes.vcaps.helpers import f, publisher, reference
from tests.schemes.vcaps.test_stage import FIG2, FIG2_AT, fig2

EVENTS = [Event({"a": 30, "d": 1}), Event({"a": 25, "c": 1}), Event({"a": 12, "b": 1})]


@pytest.mark.parametrize("profile", [RV, SRV, FAST])
def test_restarted_publisher_recovers_from_brokers(profile: str) -> None:
    tree, pub, _ = fig2(profile)
    old_ids = {n: pub.filter_id(flt) for n, flt in FIG2.items()}
    # the root broker alone holds only root filters: recovery needs every broker's poset
    root_only = {t.ef for t in tree.posets[tree.root].tokens.values()}
    assert len(root_only) < len(FIG2)

    restarted = publisher(profile)  # same keys, empty PFPoset
    assert len(restarted) == 0
    efs = [t.ef for bf in tree.posets.values() for t in bf.tokens.values()]
    foreign_pub = publisher(profile, name="Q", master=b"x" * 32)  # another publisher's k_s
    foreign_pub.register(f("z = 1"), subscriber="s")
    assert restarted.recover([*efs, *foreign_pub.held_ciphertexts()]) == len(FIG2)
    assert {n: restarted.filter_id(flt) for n, flt in FIG2.items()} == old_ids

    subs = [(s, FIG2[f"F{i}"]) for i, s in enumerate(FIG2_AT, start=1)]
    for e in EVENTS:
        got = tree.route(decode_routing(profile, restarted.publish(e, now=0.0).routing))
        assert got == reference(subs, e)
    # a new subscription after the restart joins the existing posets consistently
    tok = decode_token(profile, restarted.register(FIG2["F2"], subscriber="S6"))
    tree.subscribe("B8", "S6", tok)
    subs.append(("S6", FIG2["F2"]))
    for e in EVENTS:
        got = tree.route(decode_routing(profile, restarted.publish(e, now=0.0).routing))
        assert got == reference(subs, e)
