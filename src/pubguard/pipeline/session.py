"""The Spark session the pipeline runs on.

``local[*]`` is the embedded default (nothing to install beyond the package); a
``spark://host:port`` master runs the same job on a standalone cluster (ARCHITECTURE.md,
Pipeline). The session is tuned for small and medium jobs on a laptop-class machine: few
shuffle partitions, adaptive execution, no UI, quiet logs, Arrow for pandas exchange.

Quiet logs: the driver JVM logs errors only, through the ``log4j2.properties`` shipped beside
this module (``spark.driver.extraJavaOptions``; Spark and Hadoop print their start-up lines
before ``setLogLevel`` could apply), and the one line the JVM prints itself before any logging
is configured ("WARNING: Using incubator modules", from Spark's own ``--add-modules``) is taken
out of its stderr, which is otherwise copied to ours unchanged.

``PUBGUARD_SPARK_SHUFFLE_PARTITIONS`` overrides the shuffle and default parallelism (tiny test
jobs run faster with fewer tasks); ``PUBGUARD_SPARK_DRIVER_MEMORY`` the driver memory.

Executors run Python with the driver's interpreter (``spark.pyspark.python``), so on a
loopback cluster they import the same ``pubguard``; on a real cluster install pubguard on
every node (see docs/pipeline.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_DRIVER_MEMORY",
    "DEFAULT_SHUFFLE_PARTITIONS",
    "LOG4J2_CONFIG",
    "get_spark",
    "spark_home",
]

DEFAULT_DRIVER_MEMORY = os.environ.get("PUBGUARD_SPARK_DRIVER_MEMORY", "4g")
DEFAULT_SHUFFLE_PARTITIONS = 8
LOG4J2_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
# What the JVM itself writes to stderr at start-up, outside any logging configuration.
_JVM_NOTICES: Final = re.compile(rb"WARNING: Using incubator modules: ")


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
    # first, so that a -Dlog4j2.configurationFile of the caller's own (later) wins
    opts = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = (
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()} {opts}".strip()
    )
    _start_context(master, app_name, conf)
    session = SparkSession.builder.getOrCreate()  # on the context just started
    session.sparkContext.setLogLevel("ERROR")
    return session


def _start_context(master: str, app_name: str, conf: dict[str, str]) -> None:
    """Start the SparkContext, launching the driver JVM with its stderr through
    :func:`_copy_jvm_stderr` (a JVM this process already runs is reused as is)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    spark_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    spark_conf.setAll(list(conf.items()))
    gateway = None
    if SparkContext._gateway is None:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE})
        threading.Thread(
            target=_copy_jvm_stderr, args=(gateway.proc.stderr,), name="jvm-stderr", daemon=True
        ).start()
    SparkContext(conf=spark_conf, gateway=gateway)


def _copy_jvm_stderr(pipe: IO[bytes]) -> None:
    """Copy the driver JVM's stderr (and that of the Python workers it starts) to this
    process's, line by line, without the JVM's own start-up notices; ends with the JVM."""
    with pipe:
        for line in iter(pipe.readline, b""):
            if not _JVM_NOTICES.match(line):
                try:
                    os.write(2, line)
                except OSError:  # our stderr is gone: keep draining so the JVM never blocks
                    pass
