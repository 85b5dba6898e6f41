"""Behaviour every bus adapter must have, written once and run against each backend.

``tests/unit/test_memory_bus.py`` runs these against the in-memory bus; the integration tests run
the very same cases against a real broker (Apache Kafka or noida-db).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from events import TopicKind, Topics, encode_binary, new_event
from events.models import DeadLetter, WorkloadSubmitted
from events.positions import Delivery
from services.bus.partitioning import partition_for_key
from services.bus.port import EventPublisher, EventSubscriber
from tests.factories import T0, sample_events, submitted


class RawPublisher(EventPublisher, Protocol):
    def publish_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None: ...


class BusFactory(Protocol):
    topics: Topics
    partitions: int
    #: How long to keep polling after the expected count, to catch duplicates (0: synchronous bus).
    settle_s: float

    def publisher(self) -> RawPublisher: ...

    def subscriber(self, group: str, kinds: Iterable[TopicKind]) -> EventSubscriber: ...


def drain(
    subscriber: EventSubscriber, count: int, settle_s: float, timeout_s: float = 60.0
) -> list[Delivery]:
    """Poll until ``count`` events arrived (or time out), then ``settle_s`` more for extras."""
    got: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(subscriber.poll(timeout_s=0.5))
    settle = time.monotonic() + settle_s
    while True:
        got.extend(subscriber.poll(timeout_s=0.2))
        if time.monotonic() >= settle:
            return got


def _workloads(n: int, start: int = 0) -> list[Any]:
    return [
        new_event(submitted(f"wl-{i}", gpus=1 + i % 4), source="tests", time=T0)
        for i in range(start, start + n)
    ]


def check_round_trip_of_every_event_type(bus: BusFactory) -> None:
    events = sample_events()
    publisher = bus.publisher()
    for envelope in events:
        publisher.publish(envelope)
    publisher.flush()
    subscriber = bus.subscriber("round-trip", list(TopicKind))
    got = drain(subscriber, len(events), bus.settle_s)
    subscriber.close()
    by_id = {d.envelope.id: d for d in got}
    assert len(got) == len(events), f"expected {len(events)} events, got {len(got)}"
    for envelope in events:
        delivery = by_id[envelope.id]
        assert delivery.envelope == envelope
        assert delivery.position.topic == bus.topics.name(type(envelope.data).topic)
        # Keyed by subject with Kafka's murmur2, whatever client produced it.
        assert delivery.position.partition == partition_for_key(envelope.key, bus.partitions)


def check_commit_restart_resume(bus: BusFactory) -> None:
    publisher = bus.publisher()
    first, second = _workloads(10), _workloads(5, start=10)
    for envelope in first:
        publisher.publish(envelope)
    publisher.flush()
    member = bus.subscriber("resume", [TopicKind.WORKLOADS])
    got = drain(member, 10, bus.settle_s)
    assert sorted(d.envelope.id for d in got) == sorted(e.id for e in first)
    member.commit()
    member.close()
    for envelope in second:
        publisher.publish(envelope)
    publisher.flush()
    restarted = bus.subscriber("resume", [TopicKind.WORKLOADS])
    got = drain(restarted, 5, bus.settle_s)
    restarted.commit()
    restarted.close()
    assert sorted(d.envelope.id for d in got) == sorted(e.id for e in second), (
        "a restarted member must resume after the committed offset: no loss, no duplicate"
    )


@dataclass
class IdempotentGpuCounter:
    """A trivial consumer: sums requested GPUs, applying each event id at most once."""

    applied: set[str] = field(default_factory=set)
    total_gpus: int = 0
    duplicates_seen: int = 0

    def apply(self, delivery: Delivery) -> None:
        if delivery.envelope.id in self.applied:
            self.duplicates_seen += 1
            return
        self.applied.add(delivery.envelope.id)
        assert isinstance(delivery.envelope.data, WorkloadSubmitted)
        self.total_gpus += delivery.envelope.data.gpus


def check_redelivery_after_crash_is_idempotent(bus: BusFactory) -> None:
    publisher = bus.publisher()
    events = _workloads(12)
    for envelope in events:
        publisher.publish(envelope)
    publisher.flush()
    expected = sum(e.data.gpus for e in events)
    counter = IdempotentGpuCounter()
    crashed = bus.subscriber("crash", [TopicKind.WORKLOADS])
    for delivery in drain(crashed, 12, bus.settle_s):
        counter.apply(delivery)
    crashed.close()  # dies before committing
    survivor = bus.subscriber("crash", [TopicKind.WORKLOADS])
    redelivered = drain(survivor, 12, bus.settle_s)
    for delivery in redelivered:
        counter.apply(delivery)
    survivor.commit()
    survivor.close()
    assert len(redelivered) == 12, "uncommitted events must be redelivered"
    assert counter.duplicates_seen == 12
    assert counter.total_gpus == expected


def check_poison_records_go_to_dead_letters(bus: BusFactory) -> None:
    publisher = bus.publisher()
    workloads = bus.topics.name(TopicKind.WORKLOADS)
    good_before, good_after = _workloads(1), _workloads(1, start=1)
    valid = encode_binary(good_before[0])
    heartbeat_on_wrong_topic = encode_binary(sample_events()[21])
    negative_gpus = valid.value.replace(b'"gpus":1', b'"gpus":-1')
    assert negative_gpus != valid.value
    poison: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
        (b"junk", b"\x00\x01 not an event", []),
        (
            heartbeat_on_wrong_topic.key,
            heartbeat_on_wrong_topic.value,
            heartbeat_on_wrong_topic.headers,
        ),
        (valid.key, negative_gpus, valid.headers),
    ]
    publisher.publish(good_before[0])
    publisher.flush()
    for key, value, headers in poison:
        publisher.publish_raw(workloads, key, value, headers)
    publisher.flush()
    publisher.publish(good_after[0])
    publisher.flush()

    consumer = bus.subscriber("poison", [TopicKind.WORKLOADS])
    got = drain(consumer, 2, bus.settle_s)
    assert sorted(d.envelope.id for d in got) == sorted([good_before[0].id, good_after[0].id])
    consumer.commit()
    consumer.close()

    reader = bus.subscriber("deadletter-reader", [TopicKind.DEADLETTER])
    letters = drain(reader, 3, bus.settle_s)
    reader.close()
    data = [d.envelope.data for d in letters]
    assert all(isinstance(letter, DeadLetter) for letter in data)
    reasons = sorted(letter.reason for letter in data)  # type: ignore[union-attr]
    assert len(reasons) == 3, reasons
    assert any(r.startswith("ce_specversion: missing header") for r in reasons)
    assert any("belongs on topic" in r for r in reasons)
    assert any(r.startswith("data.gpus:") for r in reasons)
    kept = {letter.value_b64 for letter in data}  # type: ignore[union-attr]
    for _key, value, _headers in poison:
        assert value is not None
        assert base64.b64encode(value).decode() in kept, "original bytes must be kept whole"
