"""``bench network`` says which process a publication costs what: the CPU per publication of
the brokers, the publisher and the subscriber process (and their total, which one machine's
throughput follows), each process's share of a core in the run that saturated, and the bytes of
a publication and of its delivery."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from pubguard.net.config import ClusterConfig
from pubguard.ops.bench.costs import PUBLISHER, bench_event, bench_type
from pubguard.ops.bench.network import _frame_bytes, _run_at, _setup, _Sink
from pubguard.ops.bench.report import _paired, _report, _versus
from pubguard.ops.bench.steady import _by_process
from pubguard.ops.cluster import LocalCluster
from pubguard.schemes.plain import PlainScheme
from pubguard.schemes.registry import KeyBundle
from pubguard.wire.framing import pack
from pubguard.wire.messages import publish_wire


def test_frame_bytes_count_what_the_publisher_sends_and_a_subscriber_receives(
    tmp_path: Path,
) -> None:
    now = time.time()
    bundle = KeyBundle(
        tmp_path,
        now=now,
        types=(bench_type("topic"),),
        identities=(PUBLISHER,),
        rng=random.Random(1),
    )
    rng = random.Random(2)
    evs = [bench_event("topic", j, rng, 16) for j in range(4)]
    signed = bundle.client("default", PUBLISHER, topics=("s0", "s1", "s2", "s3"), now=now)
    pe = signed.protect_events(evs, now=now)[1]  # a Merkle leaf: signature, path and permit
    plain = PlainScheme().protect_event(evs[1], now=now)
    secure, base = _frame_bytes(pe, "default"), _frame_bytes(plain, "plain")
    assert secure["publish"] == len(
        pack(publish_wire(pe.event_id, "default", pe.routing, pe.body, pe.meta))
    )
    # a delivery carries every field of the publication (the subscriber checks them itself)
    assert secure["deliver"] > secure["publish"] and base["deliver"] > base["publish"]
    extra = len(pack(pe.meta["sig"])) + len(pack(pe.meta["mp"])) + len(pack(pe.meta["pm"]))
    assert secure["publish"] - base["publish"] >= extra


def test_process_ratios_against_plain_per_role_and_in_total() -> None:
    r = {"max_throughput_eps": 900.0, "latency_p50_ms": 2.0, "broker_cpu_us_per_event": 66.0}
    base = {"max_throughput_eps": 1000.0, "latency_p50_ms": 2.0, "broker_cpu_us_per_event": 60.0}
    r["process_cpu_us_per_event"] = {"brokers": 66.0, "publisher": 20.0, "total": 120.0}
    base["process_cpu_us_per_event"] = {"brokers": 60.0, "publisher": 20.0, "total": 100.0}
    v = _versus(r, base)
    assert v["process_cpu_ratio"] == {"brokers": 1.1, "publisher": 1.0, "total": 1.2}
    assert v["broker_cpu_ratio"] == 1.1
    del base["process_cpu_us_per_event"]  # a run without /proc: no ratio, no error
    assert _versus(r, base)["process_cpu_ratio"] is None


def test_each_round_is_paired_with_plains_run_beside_it() -> None:
    def runs(*eps: float) -> list[dict[str, object]]:
        return [
            {
                "max_throughput_eps": x,
                "latency_p50_ms": 1.0,
                "latency_p99_ms": 2.0,
                "broker_cpu_us_per_event": None,
            }
            for x in eps
        ]

    # the load rose in the second round and fell in the third: both sides moved together
    prof, plain = runs(900.0, 450.0, 1800.0), runs(1000.0, 500.0, 2000.0)
    assert _paired(prof, plain) == {
        "throughput_ratio_rounds": [0.9, 0.9, 0.9],
        "throughput_ratio_paired": 0.9,
    }
    merkle = runs(1000.0, 500.0, 0.0)
    r = _report("eventguard", {"eventguard": prof, "plain": plain, "eventguard-merkle": merkle})
    assert r["throughput_ratio"] == 0.9 and r["throughput_ratio_paired"] == 0.9
    assert r["merkle_batch"]["throughput_ratio_rounds"] == [0.0, 1.0, 1.0]
    assert _paired(prof, runs(0.0, 0.0, 0.0))["throughput_ratio_paired"] is None


def test_steady_rounds_give_each_process_its_median_and_the_total_ratio() -> None:
    plain = [{"brokers": 50.0, "total": 100.0}, {"brokers": 60.0, "total": 120.0}, {}]
    runs = [
        {"brokers": 55.0, "total": 110.0, "io.link_writes": 0.3},
        {"brokers": 70.0, "total": 150.0, "io.link_writes": 0.5},
        {},
    ]
    out = _by_process(runs, plain, "default-merkle")
    assert out["process_cpu_us"] == {"brokers": 62.5, "total": 130.0}
    assert out["io_per_publication"] == {"link_writes": 0.4}  # the brokers' I/O, apart
    assert out["total_cpu_ratio"] == 1.175  # median of 1.1 and 1.25; the empty round skipped
    assert "total_cpu_ratio" not in _by_process(plain, plain, "plain")


def test_a_step_reports_cpu_per_process_and_their_share_of_a_core(tmp_path: Path) -> None:
    """One short step on a real broker process and subscriber process (mutual TLS on
    loopback): every role's CPU per publication is counted from the first send, the total is
    their sum, and each share of a core is a fraction."""

    async def main() -> tuple[
        dict[str, float], dict[str, float], dict[str, int], int, dict[str, float]
    ]:
        cfg = ClusterConfig(
            tmp_path, (), ("b0",), "127.0.0.1", {"profiles": ["plain"]}, publishers=(PUBLISHER,)
        )
        cluster = LocalCluster(cfg)
        await cluster.start()
        net = None
        try:
            net = await _setup(cluster, _Sink(), 2, "plain")
            assert net.pids is not None and len(net.pids["brokers"]) == 1
            await _run_at(net, 400, 16, 0.4, random.Random(3))
            return net.cpu_us, net.util, net.frame_bytes, net.sent, net.io
        finally:
            if net is not None:
                await net.pub.close()
                await net.subs.close()
            await cluster.stop()

    cpu, util, frames, sent, io = asyncio.run(main())
    assert sent > 100
    assert set(cpu) == {"brokers", "publisher", "subscribers", "total"}
    # (/proc counts CPU in 10 ms ticks: a role may read 0 in a step this short)
    assert all(v >= 0 for v in cpu.values()) and cpu["total"] > 0
    assert abs(cpu["total"] - (cpu["brokers"] + cpu["publisher"] + cpu["subscribers"])) < 0.2
    assert set(util) == {"brokers", "publisher", "subscribers"}
    assert all(0.0 <= v <= 1.5 for v in util.values())
    assert frames["publish"] > 0 and frames["deliver"] > frames["publish"]
    # the broker's I/O per publication, from its transport counters: every publication was
    # read, went through a batch and left in some link write carrying its delivery's bytes
    assert 0 < io["batches"] <= 1 and 0 < io["reads"] <= 1 and 0 < io["link_writes"] <= 1
    assert io["link_write_bytes"] >= frames["deliver"]
    assert io["messages_per_batch"] >= 1 and io["messages_per_core_call"] >= 1
