"""``pubguard bench network --profile NAME``: the report's keys on a tiny run, and the
in-process per-message cost probes (real crypto, no sockets). Timings are not asserted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from pubguard.cli.main import cli
from pubguard.ops.bench.network import client_costs, measure_network, validation_cost


@pytest.mark.parametrize("profile", ["psguard", "eventguard", "narada", "default"])
def test_validation_and_client_costs_run_every_guard(profile: str) -> None:
    # validation_cost raises if the broker face drops any of the valid publications
    assert validation_cost(profile, 9) > 0
    c = client_costs(profile, 5)
    assert c["protect"] > 0 and c["open"] > 0


def test_merkle_batches_and_uncached_tokens() -> None:
    assert validation_cost("eventguard", 16, batch=8) > 0
    assert validation_cost("narada", 9, token_cache=False) > 0


@pytest.mark.slow
def test_bench_json_for_a_secure_profile_has_baseline_and_paper() -> None:
    r = CliRunner().invoke(
        cli,
        [
            "bench",
            "network",
            "--profile",
            "psguard",
            "--brokers",
            "1",
            "--payload",
            "16",
            "--subscribers",
            "2",
            "--in-process",
            "--quick",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    for k in (
        "profile",
        "brokers",
        "payload",
        "max_throughput_eps",
        "latency_p50_ms",
        "latency_p99_ms",
        "baseline_max_throughput_eps",
        "throughput_ratio",
        "latency_p50_ratio",
        "paper",
        "goal",
        "broker_validation_us",
        "client_cost_us",
    ):
        assert k in obj, k
    assert obj["profile"] == "psguard" and obj["brokers"] == 1 and obj["payload"] == 16
    assert obj["max_throughput_eps"] > 0 and obj["baseline_max_throughput_eps"] > 0
    assert obj["throughput_ratio"] == round(
        obj["max_throughput_eps"] / obj["baseline_max_throughput_eps"], 3
    )
    assert obj["paper_throughput_drop_pct"] == 2.2 and not obj["drops"]
    core, ratio = obj["broker_core_us"], obj["broker_core_ratio"]
    assert set(ratio) == {"psguard", "psguard-paper", "merkle_16", "merkle_64"}
    assert ratio["merkle_64"] == round(core["merkle_64"] / core["plain"], 3)
    assert {"merkle_16", "merkle_64"} <= set(obj["broker_validation_us"])


def _run(eps: float, p50: float) -> dict:
    return {"max_throughput_eps": eps, "latency_p50_ms": p50, "latency_p99_ms": 2 * p50}


def test_psguard_reports_the_papers_brokers_and_default_headlines_its_merkle_form() -> None:
    from pubguard.ops.bench.network import _plan, _report

    assert [t for _, t, _ in _plan("psguard")] == [
        "psguard",
        "plain",
        "psguard-merkle",
        "psguard-paper",
    ]
    series = {
        "psguard": [_run(30, 2)],
        "plain": [_run(100, 1)],
        "psguard-merkle": [_run(60, 1)],
        "psguard-paper": [_run(98, 1)],
    }
    r = _report("psguard", series)
    assert r["throughput_ratio"] == 0.3 and r["signing"] == "one signature per publication"
    paper = r["paper_config"]
    assert paper["label"] == "psguard (paper: honest-but-curious brokers)"
    assert paper["throughput_drop_pct"] == 2.0 and r["merkle_batch"]["throughput_ratio"] == 0.6
    d = _report(
        "default",
        {"default": [_run(20, 2)], "plain": [_run(100, 1)], "default-merkle": [_run(90, 1)]},
    )
    assert d["throughput_ratio"] == 0.9 and d["signing"].startswith("Merkle root per")
    assert d["single_signed"]["throughput_ratio"] == 0.2 and "merkle_batch" not in d
    assert validation_cost("psguard-paper", 9) >= 0


def test_core_cost_delivers_every_publication() -> None:
    from pubguard.ops.bench.costs import core_cost

    # core_cost raises unless each publication reaches exactly one subscriber
    assert core_cost("psguard-paper", 24, run=8, subscribers=4) > 0
    assert core_cost("default", 24, batch=8, subscribers=4) > 0


def test_process_cpu_reads_proc() -> None:
    import os
    import time

    from pubguard.ops.bench.network import _proc_cpu_s

    t0 = _proc_cpu_s(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:  # burn 50 ms of CPU
        pass
    assert _proc_cpu_s(os.getpid()) >= t0 + 0.03


@pytest.mark.slow
def test_a_search_names_what_saturated(tmp_path: Path) -> None:
    """The doubling search stops at the first saturated rate and says which rule fired (a
    node's queue, the publisher falling behind, the drain time or rising latency); a search
    that reached ``max_rate`` without saturating names nothing."""
    r = asyncio.run(
        measure_network(
            "plain",
            1,
            16,
            state_dir=tmp_path,
            in_process=True,
            subscribers=2,
            run_s=0.3,
            bisections=0,
            cpu_rate=None,
        )
    )
    found = r["max_throughput_eps"] * 2 <= 200_000  # without bisection: the next rate saturated
    assert r["max_throughput_eps"] > 0
    assert (r["saturated_by"] is not None) == found
    if found:
        assert r["saturated_by"].startswith(
            ("queue of", "publisher fell", "backlog took", "latency rose")
        )


def test_merkle_batch_size_reaches_the_plan_labels_and_costs() -> None:
    from pubguard.ops.bench.costs import core_costs, validation_costs
    from pubguard.ops.bench.network import _plan, _report

    assert ("psguard", "psguard-merkle", 32) in _plan("psguard", 32)
    d = _report(
        "default",
        {"default": [_run(20, 2)], "plain": [_run(100, 1)], "default-merkle": [_run(90, 1)]},
        32,
    )
    assert d["label"] == "default (amortised: Merkle root per 32)"
    assert d["signing"] == "Merkle root per 32 publications"
    v = validation_costs("eventguard", 12, merkle_batches=(2, 4))
    assert set(v) == {"per_message", "merkle_2", "merkle_4"} and min(v.values()) > 0
    c = core_costs("psguard", 12, merkle_batches=(2,), run=4)
    assert set(c) == {"plain", "psguard", "psguard-paper", "merkle_2"} and min(c.values()) > 0
    # a publication's bytes outside the core: the signed one carries its signature, Merkle
    # path and permit to every subscriber, plain's does not
    from pubguard.ops.bench.costs import wire_costs

    w = wire_costs("default", merkle_batch=4, n=8, run=4, slices=1)
    assert set(w) == {"plain", "default-merkle"}
    assert w["default-merkle"]["deliver_bytes"] > 3 * w["plain"]["deliver_bytes"] > 0
    assert all(e["decode_us"] > 0 and e["pack_us"] > 0 for e in w.values())


def test_bench_network_refuses_a_bad_merkle_batch() -> None:
    for bad in ("1", "0", "70000", "x"):
        r = CliRunner().invoke(cli, ["bench", "network", "--merkle-batch", bad])
        assert r.exit_code == 2 and "--merkle-batch" in r.output, r.output


@given(j=st.integers(0, 255), k=st.integers(0, 255), seed=st.integers(0, 2**32))
def test_each_bench_event_matches_its_own_subscriber_only(j: int, k: int, seed: int) -> None:
    """Fan-out one on both attributes: subscriber ``j``'s events match ``j``'s filter and no
    other's (plain matching, the reference every profile is checked against)."""
    import random

    from pubguard.model import Filter
    from pubguard.ops.bench.costs import ATTRIBUTES, bench_event, bench_filter, bench_type

    for attribute in ATTRIBUTES:
        e = bench_event(attribute, j, random.Random(seed), 16)
        assert e.type == bench_type(attribute).name and len(e.payload) == 16
        assert Filter.parse(bench_filter(attribute, k)).matches(e.attrs) == (j == k)


def test_numeric_ranges_are_routed_by_plain_psguard_and_default_cores() -> None:
    """psguard.txt §5.2.3 measured topic and numeric attributes; the numeric workload routes
    on tokenized key-tree node ids (core_cost raises unless every publication reaches exactly
    the one subscriber whose range holds it)."""
    from pubguard.ops.bench.costs import core_cost, core_costs

    assert core_cost("plain", 24, run=8, subscribers=4, attribute="numeric") > 0
    assert core_cost("psguard-paper", 24, run=8, subscribers=4, attribute="numeric") > 0
    assert core_cost("default", 24, batch=8, subscribers=4, attribute="numeric") > 0
    c = core_costs("psguard", 12, merkle_batches=(2,), run=4, attribute="numeric")
    assert set(c) == {"plain", "psguard", "psguard-paper", "merkle_2"} and min(c.values()) > 0
    assert validation_cost("default", 8, batch=4, attribute="numeric") > 0
    assert set(client_costs("psguard", 4, attribute="numeric")) == {"protect", "open"}


def test_numeric_is_refused_for_profiles_that_route_on_topics_only(tmp_path: Path) -> None:
    for profile in ("eventguard", "narada"):
        r = CliRunner().invoke(
            cli, ["bench", "network", "--profile", profile, "--attribute", "numeric"]
        )
        assert r.exit_code == 2 and "routes on topics only" in r.output, r.output
        with pytest.raises(ValueError, match="topics only"):
            asyncio.run(measure_network(profile, 1, 16, state_dir=tmp_path, attribute="numeric"))


@pytest.mark.slow
def test_bench_network_on_numeric_ranges_delivers_and_says_so() -> None:
    r = CliRunner().invoke(
        cli,
        [
            "bench",
            "network",
            "--profile",
            "default",
            "--brokers",
            "1",
            "--payload",
            "16",
            "--subscribers",
            "3",
            "--in-process",
            "--attribute",
            "numeric",
            "--quick",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["attribute"] == "numeric" and not obj["drops"]
    assert obj["max_throughput_eps"] > 0 and obj["latency_samples"] > 0
    assert obj["baseline_max_throughput_eps"] > 0
    assert {"merkle_16", "merkle_64"} <= set(obj["broker_core_us"])


def test_subscribers_of_one_process_verify_a_batch_root_once() -> None:
    """``subscriber_process_open``: four subscribers in one process, two Merkle batches of
    eight spread over them: one root verify per batch and the publish permit once."""
    from pubguard.ops.bench.costs import shared_open_cost

    c = shared_open_cost("default", 4, batch=8, batches=2)
    assert c["signature_checks_per_batch"] == 1.5 and c["open_us"] > 0
