"""The bus over confluent-kafka (librdkafka): the adapter every service uses in production.

Producer settings follow docs/design.md section 5: idempotent, ``acks=all``, and the
``murmur2_random`` partitioner so that keys land on the same partitions as with Java clients and
aiokafka (faust). Events travel in CloudEvents binary mode.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from events.envelope import Envelope
from events.positions import Delivery, Position
from events.registry import EventRegistry, default_registry
from events.serde import encode_binary
from events.topics import TopicKind, Topics
from services.bus.port import PublishError
from services.bus.records import RawRecord, route

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def producer_config(bootstrap: str, client_id: str = "fairshare") -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
    }


class KafkaEventPublisher:
    def __init__(
        self,
        bootstrap: str,
        topics: Topics | None = None,
        *,
        client_id: str = "fairshare",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self._topics = topics or Topics()
        self._producer: Producer | None = Producer(
            {**producer_config(bootstrap, client_id), **(config or {})}
        )
        self._errors: list[str] = []
        self._lock = threading.Lock()

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            with self._lock:
                self._errors.append(f"{message.topic()} key={message.key()!r}: {error.str()}")

    def publish(self, envelope: Envelope[Any]) -> None:
        record = encode_binary(envelope)
        topic = self._topics.name(type(envelope.data).topic)
        self.publish_raw(topic, record.key, record.value, record.headers)

    def publish_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Publish bytes as they are (dead-letter replays, tests of poison records)."""
        while True:
            try:
                self._client.produce(
                    topic,
                    key=key,
                    value=value,
                    headers=list(headers or []),
                    on_delivery=self._on_delivery,
                )
                break
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                self._client.poll(0.1)
            except KafkaException as error:
                raise PublishError(f"{topic}: {error}") from error
        self._client.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        remaining = self._client.flush(timeout_s)
        with self._lock:
            errors, self._errors = self._errors, []
        if remaining:
            errors.append(f"{remaining} event(s) not acknowledged within {timeout_s}s")
        if errors:
            raise PublishError("; ".join(errors[:5]) + (" ..." if len(errors) > 5 else ""))

    def close(self) -> None:
        """Deliver what is queued, then release the client (its connections close now, not
        whenever the garbage collector gets to it)."""
        producer = self._producer
        if producer is not None:
            producer.flush(10)
            self._producer = None

    @property
    def _client(self) -> Producer:
        if self._producer is None:
            raise PublishError("publisher is closed")
        return self._producer


class KafkaEventSubscriber:
    """A consumer-group member that yields valid events and dead-letters the rest.

    Offsets are committed only by :meth:`commit`, after the caller has applied the events.
    Dead letters are flushed to the log before the poll that found them returns, so committing
    past a poison record can never lose it.
    """

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        kinds: Iterable[TopicKind],
        topics: Topics | None = None,
        *,
        dead_letters: KafkaEventPublisher | None = None,
        registry: EventRegistry | None = None,
        clock: Clock = _utc_now,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self._topics = topics or Topics()
        self._group_id = group_id
        self._registry = registry or default_registry()
        self._clock = clock
        self._bootstrap = bootstrap
        # Created on first use: most consumers never meet a poison record.
        self._dead_letters: KafkaEventPublisher | None = dead_letters
        self._owns_dead_letters = dead_letters is None
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "partition.assignment.strategy": "cooperative-sticky",
                **(config or {}),
            }
        )
        self._pending: dict[tuple[str, int], int] = {}
        self._consumer.subscribe(
            [self._topics.name(kind) for kind in kinds], on_revoke=self._on_revoke
        )

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # What we handed out but did not commit will be redelivered to the new owner.
        for tp in partitions:
            self._pending.pop((tp.topic, tp.partition), None)

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        messages = self._consumer.consume(num_messages=max_records, timeout=timeout_s)
        deliveries: list[Delivery] = []
        dead = 0
        for message in messages:
            error = message.error()
            if error is not None:
                if error.fatal():
                    raise KafkaException(error)
                log.warning("consumer error", extra={"group": self._group_id, "error": str(error)})
                continue
            record = raw_record(message)
            routed = route(
                record,
                topics=self._topics,
                registry=self._registry,
                consumer=self._group_id,
                now=self._clock(),
            )
            if isinstance(routed, Delivery):
                deliveries.append(routed)
            else:
                self._dead_letter_publisher().publish(routed)
                dead += 1
                log.warning(
                    "dead-lettered record",
                    extra={
                        "group": self._group_id,
                        "position": routed.data.source_position,
                        "reason": routed.data.reason,
                    },
                )
            self._pending[(record.topic, record.partition)] = record.offset + 1
        if dead:
            self._dead_letter_publisher().flush()
        return deliveries

    def _dead_letter_publisher(self) -> KafkaEventPublisher:
        if self._dead_letters is None:
            self._dead_letters = KafkaEventPublisher(
                self._bootstrap, self._topics, client_id=f"{self._group_id}-deadletter"
            )
        return self._dead_letters

    def commit(self, asynchronous: bool = False) -> None:
        """Commit what was handed out. ``asynchronous`` suits consumers that store their
        positions with their effects (the offsets are then only a hint)."""
        if not self._pending:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self._pending.items())]
        if asynchronous:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        else:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        self._pending.clear()

    def committed(self, positions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed next offsets (-1001 when none), for tests and operators."""
        requested = [TopicPartition(t, p) for t, p in positions]
        result = self._consumer.committed(requested, timeout=10)
        return {(tp.topic, tp.partition): tp.offset for tp in result}

    def close(self) -> None:
        """Leave the group without committing: uncommitted work is redelivered, never lost."""
        self._consumer.close()
        if self._owns_dead_letters and self._dead_letters is not None:
            self._dead_letters.close()


def raw_record(message: Message) -> RawRecord:
    headers = message.headers() or []
    pairs = list(headers.items()) if isinstance(headers, dict) else headers
    return RawRecord(
        topic=message.topic() or "",
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        key=message.key(),
        value=message.value(),
        headers=[(name, v.encode() if isinstance(v, str) else v) for name, v in pairs],
    )


def last_position(deliveries: list[Delivery]) -> Position | None:
    return max((d.position for d in deliveries), default=None)
