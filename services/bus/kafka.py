"""The bus over confluent-kafka (librdkafka): the adapter every service uses in production.

Producer settings follow docs/design.md section 5: idempotent, ``acks=all``, and the
``murmur2_random`` partitioner so that keys land on the same partitions as with Java clients and
aiokafka (faust). Events travel in CloudEvents binary mode.

Crash-only: a client that librdkafka declares fatally broken (an idempotent producer whose
sequence numbers no longer match a broker that came back without some of its writes, a fenced
producer, a consumer whose membership cannot be recovered) never works again, and retrying in
the same process made zombies that published nothing and looked alive. Such an error is
recorded when librdkafka reports it and raised as :class:`FatalBusError` on the client's next
call (:mod:`services.bus.fatal`, the one latch of every client here and of every Kafka reader);
``services.runtime`` turns it into a non-zero exit, and the supervisor restarts the process,
which rebuilds its clients and folds from the log.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from events.envelope import Envelope
from events.positions import Delivery, Position
from events.registry import EventRegistry, default_registry
from events.serde import encode_binary
from events.topics import TopicKind, Topics
from services.bus.connection import client_config
from services.bus.deadletters import DeadLetters
from services.bus.export import read_to_end
from services.bus.fatal import FatalBusError as FatalBusError  # where the services import it
from services.bus.fatal import FatalLatch as FatalLatch
from services.bus.fatal import is_fatal as is_fatal
from services.bus.port import PublishError
from services.bus.records import check, raw_record
from services.metrics import lag as lag_metrics

log = logging.getLogger(__name__)

#: How long closing a subscriber serves the group's rebalance before it closes anyway.
_LEAVE_TIMEOUT_S = 10.0

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def producer_config(bootstrap: str, client_id: str = "fairshare") -> dict[str, Any]:
    return client_config(
        bootstrap,
        {
            "client.id": client_id,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "message.timeout.ms": 30_000,
            # Heartbeats are most of the log and compress well (readings repeat): zstd batches
            # cut what the broker keeps several-fold; every consumer decompresses transparently.
            "compression.type": "zstd",
        },
    )


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
        self.fatal = FatalLatch(f"producer {client_id}")
        self._producer: Producer | None = Producer(
            {
                **producer_config(bootstrap, client_id),
                **(config or {}),
                "error_cb": self.fatal.on_error,
            }
        )
        #: Delivery failures by the thread that produced the record: each caller's flush
        #: answers for its own records, so threads publishing at once (the API's requests) do
        #: not wait for one another nor report one another's failures.
        self._errors: dict[int, list[str]] = {}
        #: Records each thread produced and not yet acknowledged (or refused): its flush waits
        #: for these only. librdkafka's flush waits until the whole queue is empty, which
        #: under requests publishing side by side is rarely: each request waited for the
        #: others' later records too (16 clients: ~180 ms a submission).
        self._unacknowledged: dict[int, int] = {}
        self._lock = threading.Lock()

    def _answered(self, thread: int) -> None:
        with self._lock:
            left = self._unacknowledged.get(thread, 0) - 1
            if left > 0:
                self._unacknowledged[thread] = left
            else:
                self._unacknowledged.pop(thread, None)

    def _on_delivery(self, thread: int, error: KafkaError | None, message: Message) -> None:
        self._answered(thread)
        if error is not None:
            if is_fatal(error):
                self.fatal.on_error(error)
            with self._lock:
                self._errors.setdefault(thread, []).append(
                    # the code's name too: callers tell a refusal no retry can cure by it
                    f"{message.topic()} key={message.key()!r}: {error.name()} ({error.str()})"
                )

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
        self.fatal.check()
        thread = threading.get_ident()
        on_delivery = functools.partial(self._on_delivery, thread)
        while True:
            try:
                with self._lock:  # counted first: the report may come before produce returns
                    self._unacknowledged[thread] = self._unacknowledged.get(thread, 0) + 1
                try:
                    self._client.produce(
                        topic,
                        key=key,
                        value=value,
                        headers=list(headers or []),
                        on_delivery=on_delivery,
                    )
                except BaseException:
                    self._answered(thread)  # not queued: nothing to wait for
                    raise
                break
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                self._client.poll(0.1)
                self.fatal.check()
            except KafkaException as error:
                self.fatal.raise_if_fatal(error)
                raise PublishError(f"{topic}: {error}") from error
        self._client.poll(0)
        self.fatal.check()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait for the acknowledgement of every record this thread produced; FatalBusError
        before PublishError, so a dead producer is never mistaken for a failure worth
        retrying. Safe to call from several threads at once: each waits for, and raises for,
        the records it produced (any thread's poll serves every thread's reports)."""
        self.fatal.check()
        thread = threading.get_ident()
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                remaining = self._unacknowledged.get(thread, 0)
            left_s = deadline - time.monotonic()
            if not remaining or left_s <= 0:
                break
            self._client.poll(min(0.01, left_s))
            self.fatal.check()
        self.fatal.check()
        with self._lock:
            errors = self._errors.pop(thread, [])
        if remaining:
            errors.append(f"{remaining} event(s) not acknowledged within {timeout_s}s")
        if errors:
            raise PublishError("; ".join(errors[:5]) + (" ..." if len(errors) > 5 else ""))

    def close(self) -> None:
        """Deliver what is queued, then release the client (its connections close now, not
        whenever the garbage collector gets to it)."""
        producer = self._producer
        if producer is not None and self.fatal.error is None:  # a dead one would only wait
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
    past a poison record can never lose it. They are signed with ``consumer``, the stable name
    of the consumer (default: the group), never with a group made up per start, and each is
    published once however often the record is redelivered (``services.bus.deadletters``).
    """

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        kinds: Iterable[TopicKind],
        topics: Topics | None = None,
        *,
        consumer: str | None = None,
        dead_letters: KafkaEventPublisher | None = None,
        registry: EventRegistry | None = None,
        clock: Clock = _utc_now,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self._topics = topics or Topics()
        self._group_id = group_id
        self.consumer = consumer or group_id
        self._registry = registry or default_registry()
        dead_letter_topic = self._topics.name(TopicKind.DEADLETTER)
        self.dead_letters = DeadLetters(
            self.consumer,
            (lambda: dead_letters)
            if dead_letters is not None
            else (
                lambda: KafkaEventPublisher(
                    bootstrap, self._topics, client_id=f"{self.consumer}-deadletter"
                )
            ),
            lambda: read_to_end(bootstrap, [dead_letter_topic]),
            self._topics,
            registry=self._registry,
            clock=clock,
        )
        self._owns_dead_letters = dead_letters is None
        self.fatal = FatalLatch(f"consumer {group_id}")
        self._consumer = Consumer(
            client_config(bootstrap)
            | {
                "group.id": group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "partition.assignment.strategy": "cooperative-sticky",
                **(config or {}),
                "error_cb": self.fatal.on_error,
            }
        )
        self._pending: dict[tuple[str, int], int] = {}
        #: Next offset to hand out, and the high watermark of the last fetch, per partition
        #: held (for :meth:`lag`).
        self._handed_out: dict[tuple[str, int], int] = {}
        self._ends: dict[tuple[str, int], int] = {}
        self._consumer.subscribe(
            [self._topics.name(kind) for kind in kinds], on_revoke=self._on_revoke
        )
        lag_metrics.watch(self)

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # What we handed out but did not commit will be redelivered to the new owner.
        for tp in partitions:
            self._pending.pop((tp.topic, tp.partition), None)
            self._handed_out.pop((tp.topic, tp.partition), None)
            self._ends.pop((tp.topic, tp.partition), None)

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        deliveries: list[Delivery] = []
        read: dict[tuple[str, int], int] = {}
        for message in self.fatal.consume(self._consumer, max_records, timeout_s):
            record = raw_record(message)
            checked = check(record, self._topics, self._registry)
            if isinstance(checked, Delivery):
                deliveries.append(checked)
            else:
                self.dead_letters.reject(checked)
            read[(record.topic, record.partition)] = record.offset + 1
        # Only once the dead letters are in the log may a commit pass their records.
        self.dead_letters.flush()
        self._pending.update(read)
        self._handed_out.update(read)
        for topic, partition in read:  # librdkafka's cache of the fetch: no broker asked
            marks = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True
            )
            if marks is not None and marks[1] >= 0:
                self._ends[(topic, partition)] = int(marks[1])
        return deliveries

    def lag(self) -> dict[tuple[str, int], int]:
        """Per partition held and read from: records between what was handed out and the high
        watermark of its last fetch, both noted by :meth:`poll`. Any thread may ask: nothing
        here calls the client, which blocks a caller while another thread consumes (a scrape
        of the projector waited out whole polls)."""
        ends = dict(self._ends)
        return {key: max(0, ends.get(key, at) - at) for key, at in dict(self._handed_out).items()}

    def commit(self, asynchronous: bool = False) -> None:
        """Commit what was handed out. ``asynchronous`` suits consumers that store their
        positions with their effects (the offsets are then only a hint)."""
        if not self._pending:
            return
        self.fatal.check()
        offsets = [TopicPartition(t, p, o) for (t, p), o in sorted(self._pending.items())]
        try:
            if asynchronous:
                self._consumer.commit(offsets=offsets, asynchronous=True)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            self.fatal.raise_if_fatal(error)
            raise
        self._pending.clear()

    def committed(self, positions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The group's committed next offsets (-1001 when none), for tests and operators."""
        requested = [TopicPartition(t, p) for t, p in positions]
        result = self._consumer.committed(requested, timeout=10)
        return {(tp.topic, tp.partition): tp.offset for tp in result}

    def close(self) -> None:
        """Leave the group without committing: uncommitted work is redelivered, never lost.

        The group is left first, serving its rebalance here: librdkafka's close never returned
        when an assignment had arrived that no poll had served yet (a projector, a static
        member, told to stop just after it joined). What the serving polls fetch is neither
        handed out nor committed."""
        lag_metrics.unwatch(self)
        try:
            self._consumer.unsubscribe()
            deadline = time.monotonic() + _LEAVE_TIMEOUT_S
            while True:
                self._consumer.consume(num_messages=1000, timeout=0.05)
                if not self._consumer.assignment() or time.monotonic() > deadline:
                    break
        except (KafkaException, RuntimeError) as error:
            log.warning(
                "leaving the group failed", extra={"group": self._group_id, "error": str(error)}
            )
        self._consumer.close()
        if self._owns_dead_letters:
            self.dead_letters.close()


def last_position(deliveries: list[Delivery]) -> Position | None:
    return max((d.position for d in deliveries), default=None)
