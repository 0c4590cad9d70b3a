"""``experiments scaling`` (eventguard.txt Fig. 11/12, psguard.txt Fig. 9/10): the saturation
search on fixed service times, tree growth with fan-out, and exact delivery through the real
broker cores and schemes (small, seeded)."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from pubguard.errors import ValidationError
from pubguard.sim.scaling import (
    FixedCost,
    ProfileKit,
    ScalingParams,
    Workload,
    max_throughput,
    run_once,
    run_scaling,
)
from pubguard.sim.scaling_sim import NoSigEventGuardBroker

SMALL = Workload(topics=6, per_subscriber=2, zipf=1.0, payload=16)


def _setup(profile: str, tmp_path, **kw):
    p = ScalingParams(subscribers=kw.pop("subscribers", 8), workload=SMALL, **kw)
    interests = SMALL.interests(p.subscribers, random.Random(p.seed))
    return p, interests, ProfileKit(profile, p, interests, str(tmp_path / profile))


def test_search_finds_a_known_capacity_with_fixed_service_times(tmp_path):
    # one broker, 10 ms per message, free clients: the capacity is exactly 100 publications/s
    cost = FixedCost(broker=0.010)
    p, interests, kit = _setup("plain", tmp_path, publications=120, observe_every=10, cost=cost)

    def run(q: float):
        return run_once(kit, p, 1, q, interests)

    probe = run(10.0)
    assert probe.saturated is None and probe.capacity_estimate() == pytest.approx(100.0)
    lo, hi, hi_run, runs = max_throughput(run, bisect=6, q0=10.0)
    assert 95.0 <= lo <= 112.0 and lo < hi <= 1.15 * lo
    assert hi_run is not None and hi_run.saturated == "b0"
    assert runs >= 1 + 6
    assert run(150.0).saturated == "b0" and run(80.0).saturated is None


def test_throughput_grows_from_one_to_seven_brokers_with_fan_out(tmp_path):
    cost = FixedCost(broker=0.001, per_output=0.001)  # per-delivery work at the leaves
    p = ScalingParams(
        brokers=(1, 3, 7),
        subscribers=16,
        workload=SMALL,
        publications=60,
        observe_every=10,
        bisect=3,
        cost=cost,
    )
    pts = run_scaling(p, ["plain"])["plain"]
    assert all(pt.mean_fanout > 1.5 for pt in pts)
    tput = [pt.max_throughput for pt in pts]
    assert tput[0] < tput[1] < tput[2], tput
    assert tput[2] > 2 * tput[0]
    # latency includes the 70 ms hops: publisher -> root ... leaf -> subscriber
    lat = [pt.latency_p50_ms for pt in pts]
    assert lat[0] >= 140 and lat[1] >= 210 and lat[2] >= 280


@pytest.mark.parametrize("profile", ["plain", "psguard", "eventguard", "default", "narada"])
def test_every_subscriber_gets_exactly_its_matching_events(profile, tmp_path):
    p, interests, kit = _setup(profile, tmp_path, publications=30, observe_every=5)
    stats = run_once(kit, p, 7, 50.0, interests)
    topics = SMALL.stream(p.publications, random.Random(p.seed + 7))  # the run's stream
    want: dict[str, list[str]] = defaultdict(list)
    for i, t in enumerate(topics):
        for j, mine in enumerate(interests):
            if t in mine:
                want[f"s{j}"].append(f"e{i}")
    assert stats.saturated is None and stats.drops == {}
    for j in range(p.subscribers):
        assert sorted(stats.deliveries[f"s{j}"]) == sorted(want[f"s{j}"]), f"s{j}"
    assert sum(len(v) for v in want.values()) > p.publications  # fan-out > 1
    assert len(stats.latencies) == sum(len(v) for v in want.values())
    assert min(stats.latencies) >= 4 * p.latency  # pub -> b0 -> b1 -> leaf -> subscriber


def test_nosig_broker_skips_only_the_signature_check(tmp_path):
    p, interests, kit = _setup("eventguard-nosig", tmp_path, publications=30, observe_every=5)
    (scheme,) = kit.broker_schemes("b0")
    assert isinstance(scheme, NoSigEventGuardBroker)
    stats = run_once(kit, p, 3, 50.0, interests)
    assert stats.drops == {} and sum(map(len, stats.deliveries.values())) > 0


def test_bad_parameters_are_refused():
    with pytest.raises(ValidationError):
        ScalingParams(brokers=(5,))
    with pytest.raises(ValidationError):
        ScalingParams(publications=30, observe_every=10)  # fewer than six observations
    with pytest.raises(ValidationError):
        Workload(topics=2, per_subscriber=3)
    with pytest.raises(ValidationError):
        FixedCost(broker=0.0)
    with pytest.raises(ValidationError):
        run_scaling(ScalingParams(brokers=(1,)), ["nope"])


def test_subscribers_are_measured_but_brokers_and_publisher_define_saturation():
    # subscribers twice as slow as the broker: the network's capacity is still the broker's
    # (the papers watch "every node"); the busiest subscriber is reported as overloaded
    cost = FixedCost(broker=0.010, subscriber=0.020)
    p = ScalingParams(
        brokers=(1,),
        subscribers=4,
        workload=SMALL,
        publications=60,
        observe_every=10,
        bisect=4,
        cost=cost,
    )
    (pt,) = run_scaling(p, ["plain"])["plain"]
    assert 95.0 <= pt.max_throughput <= 115.0 and pt.bottleneck == "b0"
    assert pt.subscriber_utilisation > 1.0
    assert pt.latency_p99_ms > pt.latency_p50_ms > 140.0  # subscriber queueing is in latency
