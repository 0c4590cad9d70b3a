"""The Spark session the pipeline runs on.

``local[*]`` is the embedded default (nothing to install beyond the package); a
``spark://host:port`` master runs the same job on a standalone cluster (ARCHITECTURE.md,
Pipeline). The session is tuned for small and medium jobs on a laptop-class machine: few
shuffle partitions, adaptive execution, no UI, quiet logs, Arrow for pandas exchange.

``PUBGUARD_SPARK_SHUFFLE_PARTITIONS`` overrides the shuffle and default parallelism (tiny test
jobs run faster with fewer tasks); ``PUBGUARD_SPARK_DRIVER_MEMORY`` the driver memory.

Executors run Python with the driver's interpreter (``spark.pyspark.python``), so on a
loopback cluster they import the same ``pubguard``; on a real cluster install pubguard on
every node (see docs/pipeline.md).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = ["DEFAULT_DRIVER_MEMORY", "DEFAULT_SHUFFLE_PARTITIONS", "get_spark", "spark_home"]

DEFAULT_DRIVER_MEMORY = os.environ.get("PUBGUARD_SPARK_DRIVER_MEMORY", "4g")
DEFAULT_SHUFFLE_PARTITIONS = 8


def spark_home() -> str:
    """The pyspark package directory, which ships ``bin/spark-class`` and the jars."""
    import pyspark

    return os.path.dirname(pyspark.__file__)


def _cores(master: str) -> int:
    if master.startswith("local["):
        n = master[len("local[") : -1].split(",")[0]
        if n == "*":
            return os.cpu_count() or 2
        return max(1, int(n))
    return os.cpu_count() or 2


def get_spark(
    master: str = "local[*]",
    app_name: str = "pubguard",
    *,
    shuffle_partitions: int | None = None,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Return a (possibly already running) Spark session configured for pubguard.

    If a session already exists in this process it is returned as is (Spark allows one
    SparkContext per JVM); callers that need another master must stop it first.
    """
    os.environ.setdefault("SPARK_HOME", spark_home())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    env_parts = os.environ.get("PUBGUARD_SPARK_SHUFFLE_PARTITIONS")
    parts = shuffle_partitions or (int(env_parts) if env_parts else max(2, 2 * _cores(master)))
    conf: dict[str, str] = {
        "spark.sql.shuffle.partitions": str(parts),
        "spark.default.parallelism": str(parts),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": driver_memory,
        "spark.driver.maxResultSize": "2g",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "4096",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.python.worker.reuse": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.log.level": "ERROR",
    }
    if not master.startswith("local"):
        conf["spark.executor.memory"] = os.environ.get("PUBGUARD_SPARK_EXECUTOR_MEMORY", "1g")
    conf.update(extra_conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in conf.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
