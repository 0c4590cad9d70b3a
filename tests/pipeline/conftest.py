"""Pipeline fixtures: tiny workloads, and ONE loopback Spark standalone cluster per test run
(started only if a slow test asks for it)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pubguard.pipeline.cluster import ClusterInfo, cluster_down, cluster_up
from pubguard.sim.workloads import Workload
from tests.pipeline.helpers import FAST_JVM, Runs, make_workload, run


@pytest.fixture(autouse=True, scope="module")
def _few_partitions(spark: Any) -> Iterator[None]:
    """Tiny workloads: two shuffle partitions instead of four halves the tasks of every stage
    (results do not depend on it). Every test here uses Spark; the setting is restored after
    each module for the shared session's other users."""
    session = spark
    old = session.conf.get("spark.sql.shuffle.partitions")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        yield
    finally:
        session.conf.set("spark.sql.shuffle.partitions", old)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[ClusterInfo]]:
    """A master and a worker on 127.0.0.1, shared by every test that needs one, started in
    the background: its JVMs boot while the test's other fixtures (the local runs it compares
    against) are made, and the test takes ``.result()`` when it needs the master. Two cores,
    so the runs a test submits at once share the executor's slots; C1-only JVMs (the
    daemons start in about half the time)."""
    state: Path = tmp_path_factory.mktemp("spark-cluster")
    pool = ThreadPoolExecutor(1, thread_name_prefix="spark-cluster-up")
    starting = pool.submit(cluster_up, state, cores=2, memory="1g", java_opts=FAST_JVM)
    try:
        yield starting
    finally:
        pool.shutdown(wait=True)  # a start still in progress ends (up, or cleaned up) first
        cluster_down(state)


@pytest.fixture(scope="session")
def psguard_run(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Workload, dict[str, Any]]:
    """One end-to-end randomized run on a small psguard workload, shared by several tests."""
    root = tmp_path_factory.mktemp("pipeline")
    d, wl = make_workload(root, "psguard")
    out = root / "out-psguard-randomized"
    return out, wl, run(spark, d, out, "randomized")


@pytest.fixture(scope="session")
def profile_runs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Every profile's batch run on one small workload, each made on first use."""
    return Runs(spark, tmp_path_factory.mktemp("profiles"))
