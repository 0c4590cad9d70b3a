"""``pubguard demo --in-process``: the brokers' own warnings do not interleave with the demo's
narration (they report what the demo checks anyway), and the logger is restored after."""

from __future__ import annotations

import logging

from pubguard.cli.demo_cmd import BROKER_LOGGER, quiet_in_process_brokers


def test_in_process_demo_quiets_broker_warnings_only_for_its_run() -> None:
    log = logging.getLogger(BROKER_LOGGER)
    before = log.level
    with quiet_in_process_brokers(True):
        assert not log.isEnabledFor(logging.WARNING) and log.isEnabledFor(logging.ERROR)
    assert log.level == before
    with quiet_in_process_brokers(False):  # broker processes log to their own files
        assert log.level == before
