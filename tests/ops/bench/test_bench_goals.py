"""``bench network`` judges each goal of the profile: met, missed or not measured (a pure
function of the report), and every profile with a goal text has its checks."""

from __future__ import annotations

from pubguard.ops.bench.report import GOALS, PAPER, goal_verdicts


def test_every_goal_text_has_checks_and_plain_has_none() -> None:
    assert set(GOALS) == set(PAPER)
    for profile, paper in PAPER.items():
        assert bool(GOALS[profile]) == ("goal" in paper), profile
        for g in GOALS[profile]:  # the check says what the text says
            assert f"{g.limit:g}{g.text_unit}" in paper["goal"], (profile, g.name)
    assert goal_verdicts("plain", {"throughput_drop_pct": 50.0}) == []


def test_psguard_goals_met_missed_and_not_measured() -> None:
    r = {"throughput_drop_pct": 1.9, "latency_increase_pct": 7.5}
    assert goal_verdicts("psguard", r) == [
        {
            "name": "throughput drop",
            "goal": "<= 2%",
            "limit": 2.0,
            "unit": "%",
            "ours": 1.9,
            "met": True,
        },
        {
            "name": "latency increase",
            "goal": "<= 1.5%",
            "limit": 1.5,
            "unit": "%",
            "ours": 7.5,
            "met": False,
        },
    ]
    edge = goal_verdicts("psguard", {"throughput_drop_pct": 2.0, "latency_increase_pct": -3.0})
    assert [g["met"] for g in edge] == [True, True]  # at the limit, and faster than plain
    unknown = goal_verdicts("psguard", {"throughput_drop_pct": None})
    assert [(g["ours"], g["met"]) for g in unknown] == [(None, None), (None, None)]


def test_eventguard_default_and_narada_goals() -> None:
    (eg,) = goal_verdicts("eventguard", {"throughput_drop_pct": 12.0})
    assert (eg["goal"], eg["met"]) == ("<= 10%", False)
    (d,) = goal_verdicts("default", {"throughput_drop_pct": 9.9})
    assert (d["goal"], d["met"]) == ("<= 10%", True)
    # narada's goal is per message in ms; the report measures microseconds
    (n,) = goal_verdicts("narada", {"broker_validation_us": {"per_message": 189.5}})
    assert (n["name"], n["goal"], n["ours"], n["unit"], n["met"]) == (
        "broker-side validation",
        "<= 0.3 ms",
        0.1895,
        "ms",
        True,
    )
    (slow,) = goal_verdicts("narada", {"broker_validation_us": {"per_message": 301.0}})
    assert slow["met"] is False
    (none,) = goal_verdicts("narada", {})
    assert none["met"] is None


def test_steady_goal_per_backend_including_psguard_paper_run_alone() -> None:
    from pubguard.ops.bench.steady import steady_goal

    steady = {
        "python": {"psguard-paper": {"cpu_ratio": 1.01}},
        "native": {"psguard-paper": {"cpu_ratio": 1.05}},
    }
    for profile in ("psguard", "psguard-paper"):  # psguard's headline run, or the profile
        got = steady_goal(profile, "psguard-paper", steady)
        assert [(g["name"], g["limit"], g["ours"], g["met"]) for g in got] == [
            ("broker CPU ratio, steady (python)", 1.02, 1.01, True),
            ("broker CPU ratio, steady (native)", 1.02, 1.05, False),
        ]
    missing = steady_goal("default", "default-merkle", {"native": {}})
    assert [(g["ours"], g["met"]) for g in missing] == [(None, None)]
    assert steady_goal("plain", "plain", steady) == []
