"""Fixtures of the integration tests (the broker itself is started in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.brokers import BrokerHandle
from tests.integration.kafka_bus import KafkaBus


@pytest.fixture
def bus(broker: BrokerHandle) -> Iterator[KafkaBus]:
    """The session's real broker, with topics of this test's own prefix."""
    bus = KafkaBus(broker)
    yield bus
    bus.close()
