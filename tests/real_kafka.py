"""Apache Kafka for the tests that start their own (``fairshare up``, the benchmarks, crash
scenarios): without a Java 17 and the broker jars such a test is skipped visibly, or fails
where CI requires real brokers (``FAIRSHARE_REQUIRE_BROKER=1``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from services.brokers.apache_kafka import KafkaUnavailableError, kafka_runtime
from services.brokers.java import JavaRuntime


def no_kafka(error: Exception) -> NoReturn:
    """Skip for ``error`` (no Java or jars), or fail where CI requires real brokers."""
    if os.environ.get("FAIRSHARE_REQUIRE_BROKER") == "1":
        pytest.fail(f"Apache Kafka required but unavailable: {error}")
    pytest.skip(f"Apache Kafka unavailable: {error}")


def kafka_runtime_or_skip() -> tuple[JavaRuntime, Path]:
    """The Java and the jar directory Apache Kafka runs with, or `no_kafka`."""
    try:
        return kafka_runtime()
    except KafkaUnavailableError as error:
        no_kafka(error)
