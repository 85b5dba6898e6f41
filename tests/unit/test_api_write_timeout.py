"""The API's producer gives up on a record when the write that made it does
(``WRITE_TIMEOUT_S``): a record still queued when the API answers 503 is never sent later.
With librdkafka's default (30 s, the other services') it stayed queued past the answer and was
written once the log was reachable again (``tests/partitions/test_api_cut_from_kafka.py``)."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime

import pytest

from events.envelope import new_event
from events.models import BudgetCreated
from events.topics import Topics
from services.api.application import write_producer_config
from services.bus.kafka import KafkaEventPublisher
from services.bus.port import PublishError


def _unreachable() -> str:
    """A bootstrap that refuses connections (bound, never listening)."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    _UNREACHABLE.append(held)
    return f"127.0.0.1:{held.getsockname()[1]}"


_UNREACHABLE: list[socket.socket] = []


def _verdict(config: dict[str, int] | None, wait_s: float) -> str:
    publisher = KafkaEventPublisher(
        _unreachable(), Topics(prefix="t."), client_id="test-api", config=config
    )
    publisher.publish(
        new_event(
            BudgetCreated(budget="lab", weight=1.0, created_by="admin"),
            source="tests",
            time=datetime.now(UTC),
        )
    )
    began = time.monotonic()
    with pytest.raises(PublishError) as refused:
        publisher.flush(wait_s)
    assert time.monotonic() - began <= wait_s + 1.0
    return str(refused.value)


def test_a_record_expires_with_the_write_that_made_it() -> None:
    # a write timeout of 1 s: the producer's own verdict comes within the flush's margin
    assert "_MSG_TIMED_OUT" in _verdict(write_producer_config(1.0), wait_s=4.0)


def test_with_the_services_default_the_record_outlives_the_write() -> None:
    # what the API did before: at the answer the record was still queued, to be sent later
    assert "not acknowledged within" in _verdict(None, wait_s=4.0)
