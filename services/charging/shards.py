"""Charging scaled out by partitions of one consumer group (``fairshare charging --instance``).

A workload's facts (submission, start, end) are keyed by its id, so each lies whole on one
partition of the workloads topic: the partitions split the ledger fold cleanly, and instances
of the group ``<prefix>charging`` share them out. What does not split:

* **Heartbeats** are keyed by node, and a node's GPUs may hold runs of workloads on several
  partitions. Every shard reads every heartbeat and confirms only its own runs
  (:class:`~projections.ledger.Ledger`'s ``owns``: the workload id hashes, as the producers'
  partitioner does, to a partition this shard holds).
* **Usage snapshots** carry a pool's whole window. Every shard counts the charges of the
  others as it reads them from the ledger topic, and only the shard that holds partition 0
  publishes snapshots (and dead-letters bad heartbeat records, which every shard reads), so a
  pool gets one complete snapshot stream however many shards run.

The group only assigns partitions: its member reads nothing (its partitions are paused). A
fold is rebuilt whole whenever the assignment changes (an instance joins, leaves or is declared
dead after its session timeout): the shard reads its partitions and every heartbeat from the
first offset again, having first read the ledger topic to its end, so every charge a previous
owner published is known and none is published twice. Charge ids are derived, so two owners
racing over a partition during a rebalance can only post the same charge with the same id,
which every reader dedupes.

Members use static membership (``group.instance.id`` = the instance's name): a shard restarted
within the session timeout gets its partitions back without a rebalance; one that stays away
loses them to the others after it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events import TopicKind, Topics
from events.models import LedgerCharge
from events.positions import Delivery
from services.bus.deadletters import DeadLetters
from services.bus.export import read_to_end
from services.bus.follower import KafkaPartitions
from services.bus.kafka import FatalLatch, KafkaEventPublisher
from services.bus.partitioning import partition_for_key
from services.bus.records import check, raw_record, skip
from services.charging.host import ChargingHost
from services.runtime.gc_pause import gc_paused

log = logging.getLogger(__name__)

#: The name charging shards sign dead letters with (as the plain host does), and their
#: consumer group's name after the deployment's topic prefix (``fairshare.charging``).
GROUP = "charging"


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
        self.group = group = f"{topics.prefix}{GROUP}"
        self.fatal = FatalLatch(f"charging shard {instance}")
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
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


class ShardReader:
    """The facts of one assignment, from the first offset and without a group: the held
    partitions of the workloads topic and every partition of the heartbeats topic. Invalid
    records are dead-lettered as the plain host's subscriber does (heartbeats only by the
    shard that ``speaks`` for the shared inputs; the others skip them)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        owned: frozenset[int],
        dead_letters: DeadLetters,
        *,
        speaks: bool,
    ) -> None:
        self.topics = topics
        self.dead_letters = dead_letters
        self.speaks = speaks
        self.fatal = FatalLatch("charging shard reader")
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"fairshare-charging-shard-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "error_cb": self.fatal.on_error,
            }
        )
        workloads, heartbeats = (
            topics.name(k) for k in (TopicKind.WORKLOADS, TopicKind.HEARTBEATS)
        )
        metadata = self._consumer.list_topics(timeout=10).topics
        if heartbeats not in metadata:
            raise RuntimeError(f"topic {heartbeats} does not exist (run the topic setup first)")
        self._heartbeats = heartbeats
        assignment = [TopicPartition(workloads, p, OFFSET_BEGINNING) for p in sorted(owned)]
        assignment += [
            TopicPartition(heartbeats, p, OFFSET_BEGINNING)
            for p in sorted(metadata[heartbeats].partitions)
        ]
        self._consumer.assign(assignment)

    def poll(self, timeout_s: float, max_records: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        for message in self.fatal.consume(self._consumer, max_records, timeout_s):
            checked = check(raw_record(message), self.topics)
            if isinstance(checked, Delivery):
                deliveries.append(checked)
            elif self.speaks or checked.record.topic != self._heartbeats:
                self.dead_letters.reject(checked)
            else:
                skip(checked, GROUP)
        self.dead_letters.flush()  # before any charge that follows them is published
        return deliveries

    def close(self) -> None:
        self._consumer.close()


class LedgerTail:
    """Every charge on the ledger topic, from the first one: read to its end when a fold is
    (re)built, then followed, so the usage window counts the other shards' charges too."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.source = KafkaPartitions(bootstrap, [topics.name(TopicKind.LEDGER)], topics=topics)
        self.positions = {key: 0 for key in self.source.partitions()}

    def read(self, timeout_s: float = 0.0) -> list[LedgerCharge]:
        charges = []
        for item in self.source.fetch(timeout_s, 5000):
            position = item.position if isinstance(item, Delivery) else item
            self.positions[(position.topic, position.partition)] = position.offset + 1
            if isinstance(item, Delivery) and isinstance(item.envelope.data, LedgerCharge):
                charges.append(item.envelope.data)
        return charges

    def read_to_end(self, timeout_s: float = 60.0) -> list[LedgerCharge]:
        ends = self.source.end_offsets()
        charges: list[LedgerCharge] = []
        deadline = time.monotonic() + timeout_s
        while any(self.positions.get(key, 0) < end for key, end in ends.items()):
            if time.monotonic() > deadline:
                raise TimeoutError("could not read the ledger topic to its end in time")
            charges += self.read(timeout_s=0.2)
        return charges

    def close(self) -> None:
        self.source.close()


class ChargingShard:
    """One instance of the charging group: drives a :class:`ChargingHost` over the
    partitions the group gives it, rebuilding its fold whenever they change."""

    def __init__(
        self,
        host: ChargingHost,
        membership: ShardMembership,
        open_reader: Callable[[frozenset[int], bool], ShardReader],
        open_tail: Callable[[], LedgerTail],
        dead_letters: DeadLetters | None = None,
    ) -> None:
        """``dead_letters``: the office every reader of this shard posts to (closed at the
        end of :meth:`run`)."""
        self.host = host
        self.dead_letters = dead_letters
        self.membership = membership
        self._open_reader = open_reader
        self._open_tail = open_tail
        #: The partitions the fold was built for; how often it was (re)built.
        self.built_for: frozenset[int] = frozenset()
        self.builds = 0
        self._reader: ShardReader | None = None
        self._tail: LedgerTail | None = None

    @property
    def speaks(self) -> bool:
        """Whether this shard publishes the usage snapshots (it holds partition 0)."""
        return 0 in self.built_for

    def _rebuild(self, owned: frozenset[int]) -> None:
        self._close_readers()
        self.built_for = owned
        self.host.reset(owns=owner_test(owned, self.membership.partitions))
        if not owned:
            return
        self.builds += 1
        self._tail = self._open_tail()
        for charge in self._tail.read_to_end():
            self.host.count_recorded(charge)
        self._reader = self._open_reader(owned, self.speaks)
        log.info(
            "charging fold rebuilt",
            extra={"partitions": sorted(owned), "known_charges": len(self.host.ledger.entry_ids)},
        )

    def run(self, should_stop: Callable[[], bool], poll_s: float = 0.5) -> None:
        host = self.host
        try:
            while not should_stop():
                owned = self.membership.poll()
                if owned != self.built_for:
                    host.flush_charges()
                    self._rebuild(owned)
                if self._reader is None or self._tail is None:
                    time.sleep(min(poll_s, 0.2))  # nothing held: wait for the group
                    continue
                with gc_paused():  # decoding and the fold allocate no cycles; see gc_pause.py
                    host.take(self._reader.poll(timeout_s=poll_s, max_records=5000))
                    for charge in self._tail.read():
                        host.count_recorded(charge)
                if self.speaks:
                    host.snapshot_if_due()
            host.flush_charges()
        finally:
            self._close_readers()
            self.membership.close()
            host.publisher.close()
            if self.dead_letters is not None:
                self.dead_letters.close()

    def _close_readers(self) -> None:
        for reader in (self._reader, self._tail):
            if reader is not None:
                reader.close()
        self._reader = self._tail = None


def kafka_charging_shard(
    bootstrap: str, topics: Topics, instance: str, **options: Any
) -> ChargingShard:
    """A charging shard named ``instance`` over Kafka at ``bootstrap`` (``options`` as for
    :class:`ChargingHost`; ``session_timeout_ms`` for the group)."""
    session_timeout_ms = int(options.pop("session_timeout_ms", 10_000))
    host = ChargingHost(
        KafkaEventPublisher(bootstrap, topics, client_id=f"{GROUP}-{instance}"),
        lambda: iter(()),  # a shard learns the recorded charges from its ledger tail
        **options,
    )
    dead_letters = DeadLetters(
        GROUP,
        lambda: KafkaEventPublisher(bootstrap, topics, client_id=f"{GROUP}-deadletter"),
        lambda: read_to_end(bootstrap, [topics.name(TopicKind.DEADLETTER)]),
        topics,
    )
    return ChargingShard(
        host,
        ShardMembership(bootstrap, topics, instance, session_timeout_ms=session_timeout_ms),
        lambda owned, speaks: ShardReader(bootstrap, topics, owned, dead_letters, speaks=speaks),
        lambda: LedgerTail(bootstrap, topics),
        dead_letters,
    )
