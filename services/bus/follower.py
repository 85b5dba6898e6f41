"""Following topics from their first offset, without a consumer group.

For services whose state is a fold rebuilt on every start (the scheduler): there is nothing to
commit, every instance must read everything, and a standby must know when it has caught up
with the log before it may act on it. Records that are not valid events are skipped and
counted here; the consumers that own them (the projector, the charging host) dead-letter them.
"""

from __future__ import annotations

import heapq
import logging
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events import EventDecodeError, TopicKind, Topics, decode_binary
from events.positions import Delivery, Position
from services.bus.export import watermarks
from services.bus.kafka import raw_record

log = logging.getLogger(__name__)


#: On equal times, what a fact can depend on comes first (a node before a placement on it).
_KIND_RANK = {
    kind: rank
    for rank, kind in enumerate(
        (
            TopicKind.BUDGETS,
            TopicKind.CLUSTER,
            TopicKind.WORKLOADS,
            TopicKind.COMMANDS,
            TopicKind.HEARTBEATS,
            TopicKind.USAGE,
            TopicKind.LEDGER,
            TopicKind.DEADLETTER,
        )
    )
}


def in_time_order(deliveries: list[Delivery], topics: Topics) -> list[Delivery]:
    """Interleave partitions by event time, keeping each partition's own order.

    Kafka orders a partition, not the log: a reader sees the partitions of several topics
    interleaved as the fetches happened to return, so a placement could be folded before the
    registration of its node. Merging by event time (each partition stays in offset order, so
    a producer's skewed clock cannot reorder its own events) gives every reader the order in
    which the facts happened, and the same order on every read.
    """
    by_partition: dict[tuple[str, int], list[Delivery]] = {}
    for delivery in deliveries:
        key = (delivery.position.topic, delivery.position.partition)
        by_partition.setdefault(key, []).append(delivery)
    if len(by_partition) <= 1:
        return deliveries
    last = len(_KIND_RANK)

    def order(delivery: Delivery) -> tuple[float, int, int, str, int]:
        kind = topics.kind_of(delivery.position.topic)
        rank = _KIND_RANK.get(kind, last) if kind is not None else last
        return (
            delivery.envelope.time.timestamp(),
            rank,
            # a parent budget before its children
            delivery.envelope.subject.count("/") if kind is TopicKind.BUDGETS else 0,
            delivery.position.topic,
            delivery.position.partition,
        )

    return list(heapq.merge(*(by_partition[k] for k in sorted(by_partition)), key=order))


class LogFollower:
    def __init__(
        self,
        bootstrap: str,
        kinds: Iterable[TopicKind],
        topics: Topics | None = None,
        *,
        timeout_s: float = 10.0,
    ) -> None:
        self.topics = topics or Topics()
        self.names = [self.topics.name(kind) for kind in kinds]
        self.timeout_s = timeout_s
        self.skipped = 0
        #: Next offset to read, per (topic, partition).
        self.positions: dict[tuple[str, int], int] = {}
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"fairshare-follower-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # End-offset queries share the connection with fetches: a long fetch wait
                # would delay every "have I caught up?" by as much.
                "fetch.wait.max.ms": 50,
            }
        )
        metadata = self._consumer.list_topics(timeout=timeout_s).topics
        assignment = []
        for name in self.names:
            if name not in metadata:
                raise RuntimeError(f"topic {name} does not exist (run the topic setup first)")
            for partition in sorted(metadata[name].partitions):
                self.positions[(name, partition)] = 0
                assignment.append(TopicPartition(name, partition, OFFSET_BEGINNING))
        self._consumer.assign(assignment)

    def poll(self, timeout_s: float = 0.5, max_records: int = 1000) -> list[Delivery]:
        deliveries = []
        for message in self._consumer.consume(num_messages=max_records, timeout=timeout_s):
            if message.error() is not None:
                continue
            record = raw_record(message)
            self.positions[(record.topic, record.partition)] = record.offset + 1
            try:
                envelope = decode_binary(record.value, record.headers)
            except EventDecodeError as error:
                self.skipped += 1
                log.warning(
                    "skipped an invalid record",
                    extra={"topic": record.topic, "offset": record.offset, "reason": str(error)},
                )
                continue
            deliveries.append(
                Delivery(envelope, Position(record.topic, record.partition, record.offset))
            )
        return in_time_order(deliveries, self.topics)

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """The log's current end, per partition (what "caught up" is measured against)."""
        ends = {}
        for topic, partition in self.positions:
            _, high = watermarks(self._consumer, TopicPartition(topic, partition), self.timeout_s)
            ends[(topic, partition)] = high
        return ends

    def caught_up_with(self, ends: dict[tuple[str, int], int]) -> bool:
        return all(self.positions.get(key, 0) >= end for key, end in ends.items())

    def catch_up(self, timeout_s: float = 60.0) -> list[Delivery]:
        """Everything up to the end of the log as it is now."""
        ends = self.end_offsets()
        deliveries: list[Delivery] = []
        deadline = time.monotonic() + timeout_s
        while not self.caught_up_with(ends):
            if time.monotonic() > deadline:
                raise TimeoutError("could not read up to the end of the log in time")
            deliveries += self.poll(timeout_s=0.05, max_records=5000)
        return in_time_order(deliveries, self.topics)

    def close(self) -> None:
        self._consumer.close()
