"""Shared fixtures. One Spark session per test run (started lazily, only if a test asks)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "pubguard", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "pubguard")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The one local Spark session shared by every test that needs Spark."""
    from pubguard.pipeline.session import get_spark

    session = get_spark(master="local[2]", app_name="pubguard-tests")
    yield session
    session.stop()
