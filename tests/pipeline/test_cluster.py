"""The match stage on a real Spark standalone master + worker on loopback (the shared
``spark_cluster`` fixture), driven from a separate driver process: a JVM hosts one
SparkContext, and the tests' own session stays local."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from pubguard.pipeline.cluster import ClusterInfo
from tests.pipeline.helpers import FAST_JVM, NOW

# The driver starts first and warms up (its JVM, the executor's registration and Python
# daemon, the SQL planner) while the test makes the local runs it compares against; it then
# reads the runs from stdin, one JSON line each, and submits each from its own thread as soon
# as it arrives: a tiny job's wall time is mostly driver latency (planning, scheduling, task
# round trips), which then overlaps with the other runs and the local ones, on the worker's two
# cores. Each run writes its own output folder; the results are printed in the runs' order.
_MATCH_EACH = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from pubguard.pipeline.run import match_protected
from pubguard.pipeline.session import get_spark

opts = sys.argv[3]
spark = get_spark(
    sys.argv[1],
    "pubguard-profiles-on-cluster",
    extra_conf={"spark.driver.extraJavaOptions": opts, "spark.executor.extraJavaOptions": opts},
)
spark.sparkContext.parallelize(range(2), 2).count()
spark.range(2).groupBy("id").count().collect()
with ThreadPoolExecutor(4) as pool:
    runs = [
        pool.submit(match_protected, spark, *json.loads(line), now_ms=int(sys.argv[2]))
        for line in sys.stdin
    ]
    for r in runs:
        got = r.result()
        print(json.dumps({k: got[k] for k in ("profile", "deliveries", "drops")}), flush=True)
"""


@pytest.mark.slow
def test_every_profile_matches_on_standalone_cluster(
    spark_cluster: Future[ClusterInfo], psguard_run: Any, profile_runs: Any, tmp_path: Path
) -> None:
    """One run per profile on the cluster, from one driver process (one driver JVM for all):
    the executors get the protected folder only (no key leaves the driver)."""
    env = {
        **os.environ,
        "PUBGUARD_SPARK_DRIVER_MEMORY": "1g",
        "PUBGUARD_SPARK_SHUFFLE_PARTITIONS": "1",
    }
    master = spark_cluster.result().master_url
    ps_out, _, ps_summary = psguard_run
    runs = {"psguard": (ps_out, ps_summary)}
    # files, not pipes, for its output: nothing is read from it until it ends
    with (
        (tmp_path / "driver.out").open("w+") as out_f,
        (tmp_path / "driver.err").open("w+") as err_f,
    ):
        driver = subprocess.Popen(
            [sys.executable, "-c", _MATCH_EACH, master, str(NOW), FAST_JVM],
            stdin=subprocess.PIPE,
            stdout=out_f,
            stderr=err_f,
            text=True,
            env=env,
        )
        assert driver.stdin is not None
        try:
            for p, m in (
                ("psguard", "randomized"),
                ("default", "randomized"),
                ("eventguard", "deterministic"),
                ("plain", "deterministic"),
            ):
                if p not in runs:  # made locally while the driver matches the previous ones
                    runs[p] = profile_runs.get(p, m)
                todo = [str(runs[p][0] / "protected"), str(tmp_path / p)]
                driver.stdin.write(json.dumps(todo) + "\n")
                driver.stdin.flush()
            driver.stdin.close()
            driver.wait(timeout=600)
        except BrokenPipeError:  # it ended early: its stderr says why (asserted below)
            driver.wait(timeout=600)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        out_f.seek(0)
        err_f.seek(0)
        stdout, stderr = out_f.read(), err_f.read()
    assert driver.returncode == 0, stderr[-2000:]
    got = [json.loads(line) for line in stdout.strip().splitlines() if line.startswith("{")]
    assert [g["profile"] for g in got] == list(runs)
    for g in got:
        out, summary = runs[g["profile"]]
        assert g["deliveries"] == summary["deliveries"] and g["drops"] == {}
        theirs = pd.read_parquet(tmp_path / g["profile"] / "outbox")
        ours = pd.read_parquet(out / "outbox")
        assert sorted(
            zip(theirs["subscriber"].astype(str), theirs["event_id"], strict=True)
        ) == sorted(zip(ours["subscriber"].astype(str), ours["event_id"], strict=True))
