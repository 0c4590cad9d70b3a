"""``pubguard.ops.soak`` / ``pubguard cluster soak``: a steady stream across key-epoch changes
while brokers are killed and restarted. Every profile loses nothing, duplicates nothing and
keeps the order (durable links and outboxes, replay state committed with its batch, ``T(w)``
surviving epochs, and for psguard and default catch-up routing across the change); the
report's ranges are what the subscribers did not get. Bad arguments are one-line errors before
any broker starts."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from pubguard.cli.main import cli
from pubguard.errors import ConfigError
from pubguard.ops.soak import SubscriberResult, _judge, parse_kill, soak

# The lossless soaks test durability and catch-up, not the timestamp window: under load a
# restart takes 3-6 s instead of ~1 s, back-to-back kills then join into one outage, and the
# first events after it reach the leaf more than the default 10 s max_delay after they were
# signed, where the guard rightly drops them as ``stale`` (docs/network.md, the soak table).
SOAK_WINDOW = 30.0


@pytest.mark.slow
def test_plain_eventguard_and_narada_lose_nothing_across_epochs_and_crashes() -> None:
    """An inner broker and the publishers' broker crash in turn; narada's replay state at
    ``b0`` (committed with its batches) lets the publications the publishers re-send in."""
    profiles = ("plain", "eventguard", "narada")
    r = asyncio.run(
        soak(
            profiles,
            brokers=3,
            epoch=2.0,
            duration=8.0,
            kills=[("b1", 2.5), ("b0", 5.0)],
            outage=1.0,
            rate=25.0,
            max_delay=SOAK_WINDOW,
        )
    )
    assert [o.broker for o in r.outages] == ["b1", "b0"] and len(r.epoch_changes) >= 3
    assert {(s.profile, s.broker) for s in r.subscribers} == {
        (p, b) for p in profiles for b in ("b1", "b2")
    }
    for s in r.subscribers:
        assert s.sent > 120 and s.received == s.sent and s.lost == [], s
        assert s.duplicates == 0 and s.in_order
    assert all(s.renewals >= 3 for s in r.subscribers if s.profile == "eventguard")
    js = r.to_json()
    assert js["lossless"] == dict.fromkeys(profiles, True)
    assert js["outages"][0]["broker"] == "b1" and js["outages"][0]["back_s"] > 3.4


@pytest.mark.slow
def test_psguard_and_default_lose_nothing_when_outages_span_the_renewal_and_the_change() -> None:
    """Each outage (2.6 s, epochs of 2 s) spans an ahead renewal and the change after it: at
    the subscribers' inner broker, the publishers' broker and the leaf. Before catch-up routing
    (``CatchUpRouter.route`` in broker/catch_up.py) the new epoch's events were lost to the subtree until
    the renewals came back, and at the leaf until the next change."""
    profiles = ("psguard", "default")
    r = asyncio.run(
        soak(
            profiles,
            brokers=3,
            epoch=2.0,
            duration=14.0,
            kills=[("b1", 1.5), ("b0", 6.0), ("b2", 10.0)],
            outage=2.6,
            rate=25.0,
            max_delay=SOAK_WINDOW,
        )
    )
    assert [o.broker for o in r.outages] == ["b1", "b0", "b2"]
    for s in r.subscribers:
        assert s.sent > 200 and s.received == s.sent and s.lost == [], s
        assert s.duplicates == 0 and s.in_order
    assert r.to_json()["lossless"] == dict.fromkeys(profiles, True)


@pytest.mark.slow
def test_without_catch_up_routing_psguard_loses_the_new_epoch_while_the_link_is_down() -> None:
    """The control for the test above, and the operator's ``no_catch_up`` across real
    processes: each broker lists its child and subscribers, so an outage of ``b1`` that spans
    a change loses the new epoch's events below ``b0`` until ``b1``'s renewal is back."""
    # down 3 s with 2 s epochs, renewals half a second ahead: some change and the renewal
    # before it both fall inside the outage, whatever the epochs' phase
    r = asyncio.run(
        soak(
            ("psguard",),
            brokers=3,
            epoch=2.0,
            duration=8.0,
            kills=[("b1", 1.5)],
            outage=3.0,
            rate=25.0,
            catch_up=False,
            # lost means never routed (no catch-up): the drain starts once the stream is
            # flushed and every link is back, so two quiet seconds end it (not five per
            # subscriber, the command's default)
            settle=2.0,
        )
    )
    assert r.catch_up is False and r.to_json()["catch_up"] is False
    assert r.to_json()["lossless"] == {"psguard": False}
    (down,) = r.outages
    for s in r.subscribers:
        assert s.lost_count > 0 and s.duplicates == 0 and s.in_order, s
        # each range opens at a change while b1 was down, or before its subscribers had
        # reconnected (client back-off, at most 2 s) with the renewal
        for _, _, t0, _ in s.lost:
            assert any(0 <= t0 - c <= 0.1 for c in r.epoch_changes), (t0, r.epoch_changes)
            assert down.at <= t0 <= down.back + 2.5, (t0, down)


def test_the_report_names_each_lost_range() -> None:
    stamps = {i: 0.1 * i for i in range(10)}
    got = [f"p-{i}" for i in (0, 1, 2, 5, 6, 9)] + ["p-6"]
    s = _judge("p", "b1", stamps, got, 2)
    assert isinstance(s, SubscriberResult)
    assert [(a, b) for a, b, _, _ in s.lost] == [(3, 4), (7, 8)]
    assert [(t0, t1) for _, _, t0, t1 in s.lost] == [(stamps[3], stamps[4]), (stamps[7], stamps[8])]
    assert s.lost_count == 4 and s.received == 6 and s.duplicates == 1 and s.in_order
    assert not _judge("p", "b1", stamps, [f"p-{i}" for i in (1, 0)], 0).in_order


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kill", "b9@3"], "no broker b9 in a chain of 3"),
        (["--kill", "b1"], "expected BROKER@SECONDS"),
        (["--kill", "b1@50", "--duration", "10"], "after the stream ends"),
        (["--kill", "b1@3", "--kill", "b2@4"], "at least outage + 1 s after"),
        (["--profiles", "nope"], "known: plain, psguard, default, eventguard, narada"),
    ],
)
def test_bad_arguments_are_one_line_errors(args: list[str], message: str) -> None:
    r = CliRunner().invoke(cli, ["cluster", "soak", *args])
    assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output


def test_parse_kill() -> None:
    assert parse_kill("b2@18.5") == ("b2", 18.5)
    for bad in ("b2", "@3", "b2@", "b2@-1", "b2@x"):
        with pytest.raises(ConfigError):
            parse_kill(bad)


def test_the_report_prints_each_lost_range_whole_on_a_narrow_terminal() -> None:
    """The ranges used to be a table column, which an 80-column terminal (or a log) wrapped
    into a word per line and cut with an ellipsis."""
    from rich.console import Console

    from pubguard.cli.soak_cmd import render
    from pubguard.ops.soak import Outage, SoakResult

    lost = [(640, 655, 24.69, 25.13), (1210, 1239, 49.68, 50.12)]
    subs = [
        SubscriberResult("default", "b4", 1648, 1602, 0, True, 12, lost),
        SubscriberResult("plain", "b4", 1669, 1669, 0, True, 0),
    ]
    r = SoakResult(
        ("plain", "default"),
        5,
        5.0,
        10.0,
        60.0,
        [4.7, 24.66, 49.66],
        [Outage("b3", 22.0, 25.0), Outage("b4", 47.0, 50.1)],
        subs,
        {},
    )
    out, err = Console(width=80, record=True), Console(width=80, record=True)
    render(r, out, err)
    text = out.export_text()
    assert (
        "  default at b4: default-640..655, sent 24.69-25.13 s: 0.03 s after the epoch "
        "change at 24.66 s; b3 down\n"
    ) in text
    assert (
        "  default at b4: default-1210..1239, sent 49.68-50.12 s: 0.02 s after the epoch "
        "change at 49.66 s; b4 down\n"
    ) in text
    assert "…" not in text and "lossless: plain yes, default no" in text
    assert "Key epochs" in err.export_text()
