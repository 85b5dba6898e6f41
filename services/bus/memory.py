"""An in-memory bus with Kafka's semantics, for unit tests of pure logic only.

It keeps records as bytes and checks them with the same code as the Kafka adapter
(``services.bus.records``), dead-letters through the same office (``services.bus.deadletters``),
partitions keys with Kafka's murmur2, and keeps per-group committed offsets, so a "crash"
(closing without commit) redelivers exactly as a broker would. Integration tests use a real
broker instead.

:class:`InMemorySubscriber` plays both of Kafka's readers: :meth:`~InMemorySubscriber.poll` is
a consumer-group member's (:class:`~services.bus.kafka.KafkaEventSubscriber`: a rejected record
is dead-lettered, once per consumer name), :meth:`~InMemorySubscriber.fetch` a follower's
partition source (:class:`~services.bus.follower.KafkaPartitions`: a rejected record is
skipped, its position handed back, nothing written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from events.envelope import Envelope
from events.positions import Delivery, Position
from events.registry import EventRegistry, default_registry
from events.serde import encode_binary
from events.topics import TopicKind, Topics
from services.bus.deadletters import DeadLetters
from services.bus.partitioning import partition_for_key
from services.bus.port import PublishError
from services.bus.records import RawRecord, Rejected, check, skip


class InMemoryBroker:
    def __init__(self, partitions: int = 3) -> None:
        self.default_partitions = partitions
        self._logs: dict[str, list[list[RawRecord]]] = {}
        self._committed: dict[tuple[str, str, int], int] = {}
        self._round_robin = 0

    def partitions(self, topic: str) -> list[list[RawRecord]]:
        return self._logs.setdefault(topic, [[] for _ in range(self.default_partitions)])

    def append(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
    ) -> RawRecord:
        parts = self.partitions(topic)
        if key is None:
            self._round_robin += 1
            index = self._round_robin % len(parts)
        else:
            index = partition_for_key(key, len(parts))
        record = RawRecord(topic, index, len(parts[index]), key, value, list(headers))
        parts[index].append(record)
        return record

    def records(self, topic: str) -> list[RawRecord]:
        return [record for part in self.partitions(topic) for record in part]

    def committed(self, group: str, topic: str, partition: int) -> int:
        return self._committed.get((group, topic, partition), 0)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._committed[(group, topic, partition)] = offset


class InMemoryPublisher:
    def __init__(self, broker: InMemoryBroker, topics: Topics | None = None) -> None:
        self._broker = broker
        self._topics = topics or Topics()
        #: Set to make every publish fail, to test what callers do when the log is unavailable.
        self.unavailable = False

    def publish(self, envelope: Envelope[Any]) -> None:
        record = encode_binary(envelope)
        self.publish_raw(
            self._topics.name(type(envelope.data).topic), record.key, record.value, record.headers
        )

    def publish_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        if self.unavailable:
            raise PublishError(f"{topic}: broker unavailable")
        self._broker.append(topic, key, value, headers or [])

    def flush(self, timeout_s: float = 30.0) -> None:
        return None

    def close(self) -> None:
        return None


class InMemorySubscriber:
    def __init__(
        self,
        broker: InMemoryBroker,
        group_id: str,
        kinds: Iterable[TopicKind],
        topics: Topics | None = None,
        *,
        consumer: str | None = None,
        registry: EventRegistry | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._broker = broker
        self._group = group_id
        self._topics = topics or Topics()
        self._names = [self._topics.name(kind) for kind in kinds]
        self._registry = registry or default_registry()
        dead_letter_topic = self._topics.name(TopicKind.DEADLETTER)
        self.dead_letters = DeadLetters(
            consumer or group_id,
            lambda: InMemoryPublisher(broker, self._topics),
            lambda: broker.records(dead_letter_topic),
            self._topics,
            registry=self._registry,
            clock=clock,
        )
        self._fetched: dict[tuple[str, int], int] = {}

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        """As a consumer-group member: valid events; the rest dead-lettered (once). Nothing
        read counts as handed out (for :meth:`commit`) until its dead letters are in the log."""
        items, read = self._read(max_records)
        deliveries: list[Delivery] = []
        for item in items:
            if isinstance(item, Delivery):
                deliveries.append(item)
            else:
                self.dead_letters.reject(item)
        self.dead_letters.flush()
        self._fetched.update(read)
        return deliveries

    # -- as a partition source of a follower (services.bus.follower) -----------------------
    def partitions(self) -> list[tuple[str, int]]:
        return [
            (topic, index)
            for topic in self._names
            for index in range(len(self._broker.partitions(topic)))
        ]

    def fetch(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery | Position]:
        """The next records, topic by topic (the worst interleaving for a reader that trusts
        fetch order); a rejected record comes back as its bare position, not dead-lettered."""
        items, read = self._read(max_records)
        self._fetched.update(read)
        return [
            item if isinstance(item, Delivery) else skip(item, f"follower {self._group}")
            for item in items
        ]

    def _read(
        self, max_records: int
    ) -> tuple[list[Delivery | Rejected], dict[tuple[str, int], int]]:
        """The next records, checked, and the next offsets they would move the reader to."""
        items: list[Delivery | Rejected] = []
        read: dict[tuple[str, int], int] = {}
        budget = max_records
        for topic, index in self.partitions():
            part = self._broker.partitions(topic)[index]
            start = self._fetched.get(
                (topic, index), self._broker.committed(self._group, topic, index)
            )
            for record in part[start : start + budget]:
                items.append(check(record, self._topics, self._registry))
                read[(topic, index)] = record.offset + 1
                budget -= 1
            if budget <= 0:
                break
        return items, read

    def end_offsets(self, cached: bool = False) -> dict[tuple[str, int], int]:
        return {
            (topic, index): len(self._broker.partitions(topic)[index])
            for topic, index in self.partitions()
        }

    def commit(self) -> None:
        for (topic, index), offset in self._fetched.items():
            self._broker.commit(self._group, topic, index, offset)

    def close(self) -> None:
        self._fetched.clear()
