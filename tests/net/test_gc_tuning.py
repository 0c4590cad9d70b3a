"""The broker process's collector settings (net/gc_tuning.py), in a process of their own:
tuning freezes the start-up heap and raises the thresholds, reference cycles are still
collected, and the pauses are reported. That a cluster's broker processes are tuned is
checked in test_cluster.py."""

from __future__ import annotations

import json
import subprocess
import sys

from pubguard.net import gc_tuning

_SCRIPT = """
import gc, json
from pubguard.net import gc_tuning

before = gc_tuning.status()
start_up = [[i] for i in range(5_000)]  # long-lived start-up state
gc_tuning.tune_for_server()
gc_tuning.tune_for_server()  # idempotent: one pause recorder
tuned = gc_tuning.status()
tuned["counted"] = gc.get_freeze_count()  # what the status reports without walking it again


class Node:
    def __init__(self):
        self.me = self  # a reference cycle: only the collector frees it


for _ in range(3 * gc_tuning.GEN0):
    Node()
after = gc_tuning.status()
left = sum(type(o) is Node for o in gc.get_objects())
print(json.dumps({"before": before, "tuned": tuned, "after": after, "left": left,
                  "callbacks": len(gc.callbacks)}))
"""


def _run() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(out.stdout)


def test_tuning_freezes_start_up_and_raises_the_thresholds_but_cycles_are_still_collected():
    r = _run()
    assert r["before"]["tuned"] is False and "collections" not in r["before"]
    assert r["before"]["thresholds"] == [700, 10, 10]  # CPython's defaults
    tuned = r["tuned"]
    assert tuned["tuned"] is True
    assert tuned["thresholds"] == [gc_tuning.GEN0, gc_tuning.GEN1, gc_tuning.GEN2]
    assert tuned["frozen"] >= 5_000  # the start-up state is out of the collector's reach
    assert tuned["frozen"] == tuned["counted"]  # counted once, at the freeze
    assert r["callbacks"] == 1
    after = r["after"]
    # 3 x GEN0 cycles made two or three young collections, each timed
    assert after["collections"][0] >= 2
    assert after["pause_ms_total"][0] > 0 and after["pause_ms_max"][0] > 0
    assert after["pause_ms_max"][0] <= after["pause_ms_total"][0]
    # and freed the cycles: at most the last GEN0 of them wait for the next collection
    assert r["left"] <= gc_tuning.GEN0


def test_status_of_an_untuned_process_reports_no_pauses():
    st = gc_tuning.status()  # this test process never tunes its collector
    assert st["tuned"] is False
    assert "collections" not in st and len(st["thresholds"]) == 3
