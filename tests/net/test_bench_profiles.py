"""``pubguard bench network --profile NAME``: the report's keys on a tiny run, and the
in-process per-message cost probes (real crypto, no sockets). Timings are not asserted."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.net.bench import client_costs, validation_cost


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
    r = CliRunner().invoke(cli, ["bench", "network", "--profile", "psguard", "--brokers", "1",
                                 "--payload", "16", "--subscribers", "2", "--in-process",
                                 "--quick", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    for k in ("profile", "brokers", "payload", "max_throughput_eps", "latency_p50_ms",
              "latency_p99_ms", "baseline_max_throughput_eps", "throughput_ratio",
              "latency_p50_ratio", "paper", "goal", "broker_validation_us", "client_cost_us"):  # fmt: skip
        assert k in obj, k
    assert obj["profile"] == "psguard" and obj["brokers"] == 1 and obj["payload"] == 16
    assert obj["max_throughput_eps"] > 0 and obj["baseline_max_throughput_eps"] > 0
    assert obj["throughput_ratio"] == round(
        obj["max_throughput_eps"] / obj["baseline_max_throughput_eps"], 3
    )
    assert obj["paper_throughput_drop_pct"] == 2.2 and not obj["drops"]
