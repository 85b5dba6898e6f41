"""Requests publish side by side: each flush answers for the records its own thread produced.
With one shared error list, a request whose record was acknowledged could be answered 503 for
another's refused record, or (worse, with errors taken by the wrong flush) a refused record
could be answered 201."""

from __future__ import annotations

import os
import threading

import pytest

from events import TopicKind, encode_binary, new_event
from services.bus.kafka import KafkaEventPublisher
from services.bus.port import PublishError
from tests.factories import T0, submitted
from tests.integration.kafka_bus import KafkaBus

pytestmark = [pytest.mark.broker]


def test_concurrent_flushes_report_only_their_own_records(bus: KafkaBus) -> None:
    # the client lets a large record through, so that it is the broker that refuses it (in
    # the delivery report, read by flush), as it refuses what outgrows its max.message.bytes
    publisher = KafkaEventPublisher(
        bus.broker.bootstrap, bus.topics, config={"message.max.bytes": 10_000_000}
    )
    topic = bus.topics.name(TopicKind.WORKLOADS)
    record = encode_binary(new_event(submitted("small"), source="tests", time=T0))
    # past the broker's max.message.bytes even compressed (the producers write zstd batches)
    too_large = os.urandom(3 * 1024 * 1024)
    outcomes: dict[str, str] = {}
    both_queued = threading.Barrier(2)

    def publish(name: str, value: bytes) -> None:
        try:
            publisher.publish_raw(topic, record.key, value, record.headers)
            both_queued.wait(10)
            publisher.flush(30)
            outcomes[name] = "acknowledged"
        except PublishError as error:
            outcomes[name] = f"refused: {error}"
        except threading.BrokenBarrierError:
            outcomes[name] = "barrier"

    threads = [
        threading.Thread(target=publish, args=("small", record.value)),
        threading.Thread(target=publish, args=("large", too_large)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    publisher.close()
    assert outcomes["small"] == "acknowledged", outcomes
    assert outcomes["large"].startswith("refused"), outcomes
    assert "MSG_SIZE_TOO_LARGE" in outcomes["large"], outcomes
