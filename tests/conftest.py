"""Shared fixtures. One Spark session per test run (started lazily, only if a test asks); an
event loop in a thread and the 7-broker loopback cluster for the network tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from pubguard.ops.cluster import LocalCluster
from tests.loopback import LoopThread, start_cluster
from tests.native_backends import backend  # noqa: F401 - the both-backends fixture

# make test keeps hypothesis's own default of 100 examples (the suite's time budget);
# PUBGUARD_HYPOTHESIS=deep runs every property with 1,000.
settings.register_profile(
    "pubguard", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "deep", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("PUBGUARD_HYPOTHESIS", "pubguard"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one local Spark session shared by every test that needs Spark."""
    from pubguard.pipeline.session import get_spark

    session = get_spark(master="local[2]", app_name="pubguard-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def aloop() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture(scope="module")
def cluster7(aloop: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The default 7-broker binary tree as real processes with mutual TLS (one per module)."""
    cluster = start_cluster(aloop, tmp_path_factory.mktemp("cluster7"), in_process=False)
    try:
        yield cluster
    finally:
        aloop.run(cluster.stop(), timeout=60)
