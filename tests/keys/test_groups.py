"""The subscriber-group baseline of psguard.txt §3.2 (pubguard.keys.groups)."""

from __future__ import annotations

import math
import random

import pytest

from pubguard.errors import StateError, ValidationError
from pubguard.keys.groups import SubscriberGroupManager, analytical_ratio, simulate_churn


def test_paper_example_groups_and_rekeys():
    # psguard.txt §3.2.1: S1 on (20, 30); S2 joins on (25, 40) -> G1={S1}, G2={S1,S2}, G3={S2}
    sg = SubscriberGroupManager(100, rng=random.Random(1))
    assert sg.join("S1", 20, 30) == (1, 0)  # the newcomer gets its one group key
    keys, _ = sg.join("S2", 25, 40)
    assert sg.groups == 3
    assert keys == 2 + 2  # S1 is sent fresh keys for both parts of its split group; S2 gets 2
    assert sg.keys_of("S1") == 2 and sg.keys_of("S2") == 2
    # a subset splits S1's group twice: three to four keys for S1 (§3.2.2)
    keys, _ = sg.join("S3", 21, 22)
    assert keys - 1 in (3, 4)


def test_lazy_revocation_merges_and_rekeys_at_epoch_end():
    sg = SubscriberGroupManager(100, rng=random.Random(1), seal=True)
    sg.join("a", 0, 49)
    sg.join("b", 25, 74)
    sg.leave("b")
    assert sg.groups == 3  # lazy: b still in its groups
    keys, nbytes = sg.end_epoch()
    assert sg.groups == 1 and keys == 1 and nbytes > 16  # one merged group, sealed to a
    with pytest.raises(StateError):
        sg.leave("b")
    with pytest.raises(StateError):
        sg.join("a", 0, 1)
    with pytest.raises(ValidationError):
        sg.join("c", 50, 100)


def test_analytical_ratio_reproduces_tables_5_and_6():
    # the paper computed with log2 phi to two decimals (3.32, 6.64, 9.97, 13.28)
    table5 = {10: 1.81, 100: 9.04, 1000: 60.18, 10_000: 451.81}
    for (phi, paper), log2 in zip(table5.items(), (3.32, 6.64, 9.97, 13.28), strict=True):
        assert round(6 * 1000 * phi / (10_000 * log2), 2) == paper
        assert abs(log2 - math.log2(phi)) < 0.01
        assert analytical_ratio(1000, phi, 10_000) == pytest.approx(paper, rel=0.01)
    table6 = {10: 0.09, 100: 0.90, 1000: 9.04, 10_000: 90.36}
    for ns, paper in table6.items():
        assert analytical_ratio(ns, 100, 10_000) == pytest.approx(paper, rel=0.01)
    with pytest.raises(ValidationError):
        analytical_ratio(10, 1, 100)


def test_churn_measurement_tracks_the_bound_for_uniform_ranges():
    def draw(rng):
        lo = rng.randrange(0, 10_000 - 100 + 1)
        return lo, lo + 99

    r = simulate_churn(
        ns=300, draw=draw, range_size=10_000, tree_size=16_384, joins=60, rng=random.Random(4)
    )
    bound = analytical_ratio(300, 100, 10_000)
    assert 0.6 * bound < r.ratio < 1.6 * bound
    assert 5 < r.psg_keys < 9  # ~ log2(phi) = 6.64 authorisation keys (psguard.txt Table 2)
    assert r.psg_keys_per_publisher == 1 and r.sg_keys_per_publisher > 100
    assert r.ns == pytest.approx(300, rel=0.2)
