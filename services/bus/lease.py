"""The scheduler lease's topic over Kafka: the adapter under
:class:`~services.scheduler.lease.LeaseLog`.

The lease's rules (who claims, who leads, when a leader fences itself) are the pure state
machine of ``services.scheduler.lease``; this module only moves its records: a producer for the
records this instance appends and a group-less consumer that reads the one partition from its
first offset. It deals in bytes, so the bus knows nothing of the scheduler (the scheduler
imports the bus, never the reverse).

Crash-only like every Kafka reader (:class:`~services.bus.fatal.FatalLatch`): a fatal client
error raises :class:`~services.bus.fatal.FatalBusError` from the next call, and the scheduler
exits to be restarted. A dead lease client left running would look like a standby forever, or
worse, keep a leader believing in renewals that never reach the log.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from events import Topics
from services.bus.admin import ensure_compacted_topic
from services.bus.connection import client_config
from services.bus.export import watermarks
from services.bus.fatal import FatalLatch, is_fatal

log = logging.getLogger(__name__)

#: How many records one read takes at most (a lease topic holds a few per epoch).
_READ_BATCH = 1000


def lease_topic(topics: Topics | None = None, name: str = "scheduler") -> str:
    """``<prefix><name>-lease``: where the instances of ``name`` keep their lease."""
    return f"{(topics or Topics()).prefix}{name}-lease"


class KafkaLeaseLog:
    """The one partition of a lease topic (created if missing). Single-threaded: the
    acknowledgements of appended records are served inside :meth:`read`.

    ``record_timeout_s``: how long the producer may try to append a record before giving up;
    the lease's ``ttl_s``, since a record appended later than that is of no use any more.
    ``config``: settings for both clients (tests quiet their logs)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Topics | None = None,
        *,
        name: str = "scheduler",
        record_timeout_s: float = 10.0,
        timeout_s: float = 30.0,
        client_id: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic = lease_topic(topics, name)
        self.timeout_s = timeout_s
        ensure_lease_topic(bootstrap, self.topic, timeout_s)
        self.fatal = FatalLatch(f"lease {self.topic}")
        self._partition = TopicPartition(self.topic, 0)
        self._next_offset = 0
        self._producer = Producer(
            client_config(bootstrap)
            | {
                "acks": "all",
                "linger.ms": 0,
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": int(record_timeout_s * 1000),
                "client.id": client_id or f"{name}-lease",
                **(config or {}),
                "error_cb": self.fatal.on_error,
            }
        )
        self._consumer = Consumer(
            client_config(bootstrap)
            | {
                "group.id": f"fairshare-lease-{uuid.uuid4().hex}",  # never joined or committed
                "enable.auto.commit": False,
                # How long the broker holds an empty fetch: a renewal still comes back as soon
                # as it is written (a fetch returns with its first byte). At 50 ms each
                # scheduler's idle lease reader asked twenty times a second, most of an idle
                # `fairshare up`'s broker work (docs/benchmarks.md, "Idle CPU").
                "fetch.wait.max.ms": 500,
                **(config or {}),
                "error_cb": self.fatal.on_error,
            }
        )
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])

    def read(self) -> list[bytes | None]:
        """Serve the acknowledgements of appended records, then the values appended since the
        last read, in log order (never waits for more)."""
        self.fatal.check()
        self._producer.poll(0)
        values: list[bytes | None] = []
        for message in self.fatal.consume(self._consumer, _READ_BATCH, 0):
            self._next_offset = (message.offset() or 0) + 1
            values.append(message.value())
        return values

    def caught_up(self) -> bool:
        """Whether :meth:`read` has returned every record up to the partition's end now."""
        self.fatal.check()
        try:
            _, high = watermarks(self._consumer, self._partition, self.timeout_s)
        except KafkaException as error:
            self.fatal.raise_if_fatal(error)
            raise
        return self._next_offset >= high

    def append(self, key: bytes, value: bytes, on_appended: Callable[[], None]) -> None:
        """Queue a record; ``on_appended`` runs (inside a later :meth:`read`) once the broker
        has it. A record that cannot be queued or appended is only logged: the lease's rules
        already treat a missing acknowledgement as a lease running out."""
        self.fatal.check()

        def delivered(error: KafkaError | None, _message: Message) -> None:
            if error is None:
                on_appended()
                return
            if is_fatal(error):
                self.fatal.on_error(error)  # raised by the next call
            log.warning("lease record not appended", extra={"reason": str(error)})

        try:
            self._producer.produce(self.topic, key=key, value=value, on_delivery=delivered)
        except BufferError:
            log.warning("lease record not queued: producer queue full")
        except KafkaException as error:
            self.fatal.raise_if_fatal(error)
            raise

    def close(self) -> None:
        """Leaves without a word: a standby takes over ``ttl_s`` after the last renewal. A dead
        producer is not flushed (it would only wait)."""
        if self.fatal.error is None:
            self._producer.flush(1.0)
        self._consumer.close()


def ensure_lease_topic(bootstrap: str, topic: str, timeout_s: float) -> None:
    """One partition, compacted by epoch (a broker that refuses the configuration gets a plain
    topic: it only grows by a small record per renewal)."""
    ensure_compacted_topic(bootstrap, topic, timeout_s)
