"""Charging scaled out by partitions of one consumer group (``fairshare charging --instance``).

A workload's facts (submission, start, end) are keyed by its id, so each lies whole on one
partition of the workloads topic: the partitions split the ledger fold cleanly, and instances
of the group ``<prefix>charging`` share them out. What does not split:

* **A job array's elements** are submitted by the array's one fact, on the array's partition;
  their starts, on their own, name their budget (the agents state it), so the shard that holds
  an element charges it without the array's partition.

* **Heartbeats** are keyed by node, and a node's GPUs may hold runs of workloads on several
  partitions. Every shard reads every heartbeat and confirms only its own runs
  (:class:`~projections.ledger.Ledger`'s ``owns``: the workload id hashes, as the producers'
  partitioner does, to a partition this shard holds).
* **Usage snapshots** carry a pool's whole window. Every shard counts the charges of the
  others as it reads them from the ledger topic, and only the shard that holds partition 0
  publishes snapshots (and dead-letters bad heartbeat records, which every shard reads), so a
  pool gets one complete snapshot stream however many shards run.

The group only assigns partitions: its member reads nothing (its partitions are paused).
Whenever the assignment changes (an instance joins, leaves or is declared dead after its session
timeout), the shard's driver (:class:`~services.charging.driver.ChargingDriver`) checkpoints the
fold it had and starts the fold of its new partitions: from that partition set's own checkpoint
where there is one (named after the set, :func:`checkpoint_name`, so a fold is never restored
into a shard that holds other partitions), reading the ledger topic and its inputs from the
checkpoint's positions; otherwise from the first offset, having first read the whole ledger
topic. Either way every charge a previous owner published is known and none is published twice.
Charge ids are derived, so two owners racing over a partition during a rebalance can only post
the same charge with the same id, which every reader dedupes.

Plain charging (no ``--instance``) is the same driver over :class:`WholeLog`: one instance that
holds every partition, without a group. This module holds the memberships and the rules of a
share (which workloads are whose, which checkpoint is whose); the driver runs either.

Members use static membership (``group.instance.id`` = the instance's name): a shard restarted
within the session timeout gets its partitions back without a rebalance; one that stays away
loses them to the others after it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import Consumer, TopicPartition

from events import TopicKind, Topics
from services.bus.connection import client_config
from services.bus.kafka import FatalLatch
from services.bus.partitioning import partition_for_key
from services.charging.reader import GROUP

log = logging.getLogger(__name__)


def owner_test(owned: frozenset[int], partitions: int) -> Callable[[str], bool]:
    """Whether a workload is this shard's: its id (the key of its facts) hashes, as every
    producer's partitioner does, to a partition of ``owned`` (answers cached per id)."""
    answers: dict[str, bool] = {}

    def owns(workload_id: str) -> bool:
        answer = answers.get(workload_id)
        if answer is None:
            answer = partition_for_key(workload_id.encode(), partitions) in owned
            answers[workload_id] = answer
        return answer

    return owns


def checkpoint_name(owned: frozenset[int], partitions: int) -> str:
    """The name of the checkpoints of the fold of ``owned`` (of ``partitions``): ``charging``
    for every partition (plain charging, or a shard that holds them all: the same fold),
    ``charging-0.2-of-3`` for a shard's share."""
    if owned == frozenset(range(partitions)):
        return GROUP
    return f"{GROUP}-{'.'.join(str(p) for p in sorted(owned))}-of-{partitions}"


class Membership(Protocol):
    partitions: int
    group: str | None

    def poll(self) -> frozenset[int]: ...

    def close(self) -> None: ...


class WholeLog:
    """Plain charging: one instance that holds every partition, without a group."""

    group: str | None = None

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.owned = frozenset(range(partitions))

    def poll(self) -> frozenset[int]:
        return self.owned

    def close(self) -> None:
        """Nothing to leave."""


class ShardMembership:
    """This instance's place in the group: which partitions of the workloads topic it holds.

    The eager (round-robin) protocol revokes every partition before a new assignment, so the
    set here is either the whole current assignment or empty while the group rebalances."""

    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        instance: str,
        *,
        session_timeout_ms: int = 10_000,
    ) -> None:
        self.topic = topics.name(TopicKind.WORKLOADS)
        self.group: str | None = f"{topics.prefix}{GROUP}"
        group = self.group
        self.fatal = FatalLatch(f"charging shard {instance}")
        self._consumer = Consumer(
            client_config(bootstrap)
            | {
                "group.id": group,
                "group.instance.id": f"{group}-{instance}",
                "partition.assignment.strategy": "roundrobin",
                "session.timeout.ms": session_timeout_ms,
                "enable.auto.commit": False,
                "error_cb": self.fatal.on_error,
            }
        )
        metadata = self._consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise RuntimeError(f"topic {self.topic} does not exist (run the topic setup first)")
        self.partitions = len(metadata.partitions)
        #: Partitions held now (empty before the first assignment and during a rebalance).
        self.owned: frozenset[int] = frozenset()
        self._consumer.subscribe(
            [self.topic], on_assign=self._on_assign, on_revoke=self._revoked, on_lost=self._revoked
        )

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Held, not read: the shard reads them itself, from the first offset.
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.owned = frozenset(tp.partition for tp in partitions if tp.topic == self.topic)
        log.info("charging partitions assigned", extra={"partitions": sorted(self.owned)})

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.unassign()
        self.owned = frozenset()

    def poll(self) -> frozenset[int]:
        """Serve the group (its callbacks run inside consume; its paused partitions yield no
        records) and say what is held now."""
        self.fatal.consume(self._consumer, 1, 0.0)
        return self.owned

    def close(self) -> None:
        """Close the member. A static member does not leave the group: its partitions move
        to the others after the session timeout, or back to it if it returns before."""
        self._consumer.close()
