"""The match stage on a real Spark standalone master + worker on loopback (the shared
``spark_cluster`` fixture), driven through the CLI in a separate driver process: a JVM hosts one
SparkContext, and the tests' own session stays local."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.pipeline.helpers import NOW

# the four runs are submitted from one thread each: a tiny job's wall time is mostly driver
# latency (planning, scheduling, task round trips), which then overlaps; the worker's core
# still runs their tasks one at a time, and each run writes its own output folder
_MATCH_EACH = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from pubguard.pipeline.run import match_protected
from pubguard.pipeline.session import get_spark

spark = get_spark(sys.argv[1], "pubguard-profiles-on-cluster")
runs = list(zip(sys.argv[3::2], sys.argv[4::2]))
with ThreadPoolExecutor(len(runs)) as pool:
    got = list(pool.map(lambda r: match_protected(spark, *r, now_ms=int(sys.argv[2])), runs))
for r in got:
    print(json.dumps({k: r[k] for k in ("profile", "deliveries", "drops")}), flush=True)
"""


@pytest.mark.slow
def test_every_profile_matches_on_standalone_cluster(
    spark_cluster: Any, psguard_run: Any, profile_runs: Any, tmp_path: Path
) -> None:
    """One run per profile on the cluster, from one driver process (one driver JVM for all):
    the executors get the protected folder only (no key leaves the driver)."""
    ps_out, _, ps_summary = psguard_run
    runs = {"psguard": (ps_out, ps_summary)} | {
        p: profile_runs.get(p, m)
        for p, m in (
            ("default", "randomized"),
            ("eventguard", "deterministic"),
            ("plain", "deterministic"),
        )
    }
    args = [spark_cluster.master_url, str(NOW)]
    for p, (out, _) in runs.items():
        args += [str(out / "protected"), str(tmp_path / p)]
    env = {
        **os.environ,
        "PUBGUARD_SPARK_DRIVER_MEMORY": "1g",
        "PUBGUARD_SPARK_SHUFFLE_PARTITIONS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", _MATCH_EACH, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = [json.loads(line) for line in proc.stdout.strip().splitlines() if line.startswith("{")]
    assert [g["profile"] for g in got] == list(runs)
    for g in got:
        out, summary = runs[g["profile"]]
        assert g["deliveries"] == summary["deliveries"] and g["drops"] == {}
        theirs = pd.read_parquet(tmp_path / g["profile"] / "outbox")
        ours = pd.read_parquet(out / "outbox")
        assert sorted(
            zip(theirs["subscriber"].astype(str), theirs["event_id"], strict=True)
        ) == sorted(zip(ours["subscriber"].astype(str), ours["event_id"], strict=True))
