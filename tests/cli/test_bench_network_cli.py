"""``pubguard bench network``: progress while it searches (plain lines when stderr is not a
terminal) and a verdict per goal, in the table and in the JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.ops.bench import network, steady
from pubguard.ops.bench.report import PAPER, SHARED_MACHINE, _plan, _report, goal_verdicts


def _run(profile: str, eps: float, p50: float) -> dict[str, Any]:
    """A search's result with every key ``measure_network`` returns."""
    return {
        "profile": profile,
        "attribute": "topic",
        "brokers": 1,
        "payload": 16,
        "subscribers": 2,
        "max_throughput_eps": eps,
        "latency_p50_ms": p50,
        "latency_p99_ms": 2 * p50,
        "latency_idle_p50_ms": p50 / 2,
        "latency_samples": 100,
        "in_process": True,
        "drops": {},
        "broker_cpu_us_per_event": None,
        "saturated_by": None,
    }


@pytest.fixture
def fake_bench(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``run_network_bench`` replaced by two instant searches of psguard against plain:
    throughput 1% lower (goal met), latency 10% higher (goal missed)."""
    calls: list[str] = []

    async def fake(profile: str, brokers: list[int], payloads: list[int], **kw: Any) -> Any:
        kw["on_step"](f"{profile}: broker validation and client costs per message")
        kw["on_searches"](0, 2)
        for i, tag in enumerate((profile, "plain")):
            kw["on_step"](f"[{tag}] {tag}: 1 brokers, 16 B: 1000 ev/s")
            kw["on_searches"](i + 1, 2)
        calls.append(profile)
        series = {
            tag: [_run(tag, 1000.0, 1.0) if tag == "plain" else _run(tag, 990.0, 1.1)]
            for _, tag, _ in _plan(profile)
        }
        r = _report(profile, series)
        r.update(PAPER[profile])
        r["goals"] = goal_verdicts(profile, r)
        r["machine"] = SHARED_MACHINE
        return [r]

    monkeypatch.setattr(network, "run_network_bench", fake)

    async def fake_steady(profile: str, brokers: int, payload: int, plan: Any, rate: float, **kw):
        # the steady runs' aggregate for a profile 5% above plain on each backend
        per = {tag: {"cpu_us": 100.0, "cpu_runs_us": [100.0]} for _, tag, _ in plan}
        for _, tag, _ in plan[1:]:
            per[tag] = {"cpu_us": 105.0, "cpu_ratio": 1.05, "cpu_ratio_spread": [1.0, 1.1]}
        return {"rate_eps": rate, "seconds": 4.0, "rounds": kw["repeat"], "python": per}

    monkeypatch.setattr(steady, "run_steady", fake_steady)
    monkeypatch.setattr(steady, "core_costs_by_backend", lambda *a, **k: {"python": {"plain": 9.0}})
    return calls


ARGS = ["bench", "network", "--profile", "eventguard", "--brokers", "1", "--payload", "16"]


def test_the_table_says_met_or_missed_and_stderr_shows_each_step(fake_bench: list[str]) -> None:
    res = CliRunner().invoke(cli, [*ARGS[:3], "narada", *ARGS[4:]])
    assert res.exit_code == 0, res.output
    (row,) = [ln for ln in res.stdout.splitlines() if "broker-side validation <= 0.3 ms" in ln]
    assert row.split()[-3:] == ["-", "not", "measured"]  # the fake measured no validation
    res = CliRunner().invoke(cli, ARGS)
    assert res.exit_code == 0, res.output
    (row,) = [ln for ln in res.stdout.splitlines() if "throughput drop <= 10%" in ln]
    assert row.split()[-2:] == ["1%", "met"]
    assert "goal: " not in res.stdout  # the bare goal text gave no verdict
    # stderr is not a terminal here: one plain line per step, with the searches done
    steps = res.stderr.splitlines()
    assert any(
        ln.endswith("eventguard: broker validation and client costs per message") for ln in steps
    )
    assert any("1/2 searches done] [plain] plain: 1 brokers, 16 B: 1000 ev/s" in ln for ln in steps)


def test_the_json_carries_a_verdict_per_goal(fake_bench: list[str]) -> None:
    res = CliRunner().invoke(cli, [*ARGS[:3], "psguard", *ARGS[4:], "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    assert [(g["name"], g["goal"], g["ours"], g["met"]) for g in obj["goals"]] == [
        ("throughput drop", "<= 2%", 1.0, True),
        ("latency increase", "<= 1.5%", 10.0, False),
        ("broker CPU ratio, steady (python)", "<= 1.02", 1.05, False),  # on psguard-paper
    ]
    assert obj["goal"] == PAPER["psguard"]["goal"]  # the text stays beside the verdicts


def test_the_steady_headline_runs_near_the_slowest_and_is_judged(fake_bench: list[str]) -> None:
    res = CliRunner().invoke(cli, [*ARGS, "--json"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    # plain searched 1000 ev/s, the Merkle form 990: 0.8 x the slower one
    assert obj["steady"]["rate_eps"] == pytest.approx(0.8 * 990.0)
    assert obj["steady_headline_run"] == "eventguard-merkle" and obj["backend"] in (
        "python",
        "native",
    )
    (g,) = [g for g in obj["goals"] if g["name"].startswith("broker CPU ratio, steady")]
    assert (g["ours"], g["limit"], g["met"]) == (1.05, 1.11, True)
    res = CliRunner().invoke(cli, ARGS)
    assert "steady (headline): broker CPU us per publication at 792 ev/s" in res.stdout
    assert "eventguard-merkle 105.0 (x1.05 [1.0, 1.1])" in res.stdout


@pytest.mark.slow
def test_a_real_quick_run_judges_narada_validation() -> None:
    res = CliRunner().invoke(
        cli,
        [
            *["bench", "network", "--profile", "narada", "--brokers", "1", "--payload", "16"],
            *["--subscribers", "2", "--in-process", "--quick", "--json"],
        ],
    )
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    (g,) = obj["goals"]
    per_ms = obj["broker_validation_us"]["per_message"] / 1000
    assert g["name"] == "broker-side validation" and g["ours"] == round(per_ms, 4)
    assert g["met"] == (per_ms <= 0.3)
    assert "2/2 searches done" in res.stderr


def test_on_a_terminal_the_steps_redraw_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from pubguard.cli import common

    buf = io.StringIO()
    monkeypatch.setattr(common, "err_console", Console(file=buf, force_terminal=True, width=80))
    with common.StepProgress("bench network", unit="searches done") as p:
        assert p.live
        p.units(0, 2)
        p.step("[plain] plain: 1 brokers, 16 B: 1000 ev/s")  # brackets are text, not markup
        p.units(1, 2)
    out = buf.getvalue()
    assert "[plain] plain: 1 brokers, 16 B: 1000 ev/s" in out and "1/2" in out
    assert "\r" in out and "searches done]" not in out  # redrawn in place, no log lines
