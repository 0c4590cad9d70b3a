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


@pytest.mark.slow
def test_match_on_standalone_cluster(spark_cluster: Any, psguard_run: Any, tmp_path: Path) -> None:
    out, _, summary = psguard_run
    cmd = [
        sys.executable,
        "-m",
        "pubguard.cli.main",
        "pipeline",
        "match",
        "--protected",
        str(out / "protected"),
        "--out",
        str(tmp_path),
        "--master",
        spark_cluster.master_url,
        "--now-ms",
        str(NOW),
        "--json",
    ]
    env = {
        **os.environ,
        "PUBGUARD_SPARK_DRIVER_MEMORY": "1g",
        "PUBGUARD_SPARK_SHUFFLE_PARTITIONS": "1",  # one worker core: one task per stage
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["deliveries"] == summary["deliveries"] and res["drops"] == {}
    got = pd.read_parquet(tmp_path / "outbox")
    want = pd.read_parquet(out / "outbox")
    assert sorted(zip(got["subscriber"].astype(str), got["event_id"], strict=True)) == sorted(
        zip(want["subscriber"].astype(str), want["event_id"], strict=True)
    )
