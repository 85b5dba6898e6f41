"""Who may issue commands: exactly one active scheduler, a standby taking over on failure.

Leadership is membership of one consumer group on a one-partition topic: the member that is
assigned the partition leads. Kafka already runs the failure detector (session timeouts,
heartbeats from a background thread) and the handover, so there is no lease table, clock skew
or renewal loop to get wrong here. Sticky assignment keeps the partition where it is when a
standby joins, so a new instance does not take over from a healthy leader.

A leader that stalls past the session timeout may still publish a few commands after a standby
took over. That is safe by construction: command ids are derived from (kind, workload, attempt),
so both instances can only issue the same command, and agents and folds ignore the repeat.
"""

from __future__ import annotations

import logging
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from events import Topics

log = logging.getLogger(__name__)


class Lease(Protocol):
    def held(self) -> bool:
        """Whether this instance leads now; called on every loop turn (keeps membership)."""

    def close(self) -> None: ...


class SoleInstance:
    """For a deployment that runs one scheduler (and for tests of the loop)."""

    def held(self) -> bool:
        return True

    def close(self) -> None:
        pass


class KafkaGroupLease:
    def __init__(
        self,
        bootstrap: str,
        topics: Topics | None = None,
        *,
        name: str = "scheduler",
        session_timeout_ms: int = 6000,
        timeout_s: float = 30.0,
    ) -> None:
        topics = topics or Topics()
        self.topic = f"{topics.prefix}{name}-lease"
        _ensure_lease_topic(bootstrap, self.topic, timeout_s)
        self._assigned: set[int] = set()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topics.prefix}{name}-leader",
                "enable.auto.commit": False,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned |= {tp.partition for tp in partitions}
        if self._assigned:
            log.info("scheduler lease acquired", extra={"topic": self.topic})

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        was = bool(self._assigned)
        self._assigned -= {tp.partition for tp in partitions}
        if was and not self._assigned:
            log.info("scheduler lease released", extra={"topic": self.topic})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._on_revoke(consumer, partitions)

    def held(self) -> bool:
        self._consumer.poll(0)  # serves the group protocol's callbacks
        return bool(self._assigned)

    def close(self) -> None:
        self._assigned.clear()
        self._consumer.close()


def _ensure_lease_topic(bootstrap: str, topic: str, timeout_s: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return
    future = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic]
    try:
        future.result(timeout=timeout_s)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
