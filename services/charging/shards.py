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
Whenever the assignment changes (an instance joins, leaves or is declared dead after its
session timeout), the shard checkpoints the fold it had and starts the fold of its new
partitions: from that partition set's own checkpoint where there is one (named after the set,
:func:`checkpoint_name`, so a fold is never restored into a shard that holds other partitions),
reading the ledger topic and its inputs from the checkpoint's positions; otherwise from the
first offset, having first read the whole ledger topic. Either way every charge a previous
owner published is known and none is published twice. Charge ids are derived, so two owners
racing over a partition during a rebalance can only post the same charge with the same id,
which every reader dedupes.

Plain charging (no ``--instance``) is the same driver over :class:`WholeLog`: one instance that
holds every partition, without a group.

Members use static membership (``group.instance.id`` = the instance's name): a shard restarted
within the session timeout gets its partitions back without a rebalance; one that stays away
loses them to the others after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from events import TopicKind, Topics
from events.models import LedgerCharge
from events.positions import TopicPartition
from projections.charging_state import ChargingState
from services.bus.connection import client_config
from services.bus.kafka import FatalLatch
from services.bus.partitioning import partition_for_key
from services.charging.host import ChargingHost
from services.charging.periods import ReadLedger, Sealer
from services.charging.reader import GROUP, InputReader, LedgerTail
from services.runtime.fold_checkpoints import StateCheckpoints
from services.runtime.gc_pause import gc_paused

log = logging.getLogger(__name__)

OpenReader = Callable[[frozenset[int] | None, bool, Mapping[TopicPartition, int]], InputReader]
OpenTail = Callable[[Mapping[TopicPartition, int]], LedgerTail]
OpenCheckpoints = Callable[[str], StateCheckpoints[ChargingState]]


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

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        # Held, not read: the shard reads them itself, from the first offset.
        consumer.assign(partitions)
        if partitions:
            consumer.pause(partitions)
        self.owned = frozenset(tp.partition for tp in partitions if tp.topic == self.topic)
        log.info("charging partitions assigned", extra={"partitions": sorted(self.owned)})

    def _revoked(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
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


class ChargingShard:
    """One charging instance: drives a :class:`ChargingHost` over the partitions its
    membership gives it, starting the fold again (from a checkpoint where one fits) whenever
    they change, and checkpointing it every ``checkpoints.every_s`` and when it stops."""

    def __init__(
        self,
        host: ChargingHost,
        membership: Membership,
        open_reader: OpenReader,
        open_tail: OpenTail,
        ledger_topic: str,
        dead_letters: Any = None,
        open_checkpoints: OpenCheckpoints | None = None,
        ledger: tuple[Callable[[], dict[TopicPartition, int]], ReadLedger] | None = None,
        workloads_topic: str | None = None,
    ) -> None:
        """``ledger_topic``: its name (a checkpoint's positions on it are the tail's);
        ``dead_letters``: the office every reader of this shard posts to (closed at the end of
        :meth:`run`); ``open_checkpoints``: the checkpoints of a fold by name (None: every
        start rebuilds from the first offset); ``ledger``: the ledger's ends and a reader of a
        range of it, to seal closed periods while this shard holds every partition
        (``services.charging.periods``; None: it seals none); ``workloads_topic``: its name
        (sealing waits for each of its partitions: ``ChargingHost.await_partitions``)."""
        self.host = host
        self.ledger_topic = ledger_topic
        self.dead_letters = dead_letters
        self.membership = membership
        self._open_reader = open_reader
        self._open_tail = open_tail
        self._open_checkpoints = open_checkpoints
        self._ledger = ledger
        self._workloads_topic = workloads_topic
        #: The partitions the fold was built for; how often it was (re)built; whether the
        #: latest build started from a checkpoint.
        self.built_for: frozenset[int] = frozenset()
        self.builds = 0
        self.restored = False
        self.checkpoints: StateCheckpoints[ChargingState] | None = None
        self._reader: InputReader | None = None
        self._tail: LedgerTail | None = None
        #: Since when, and up to which ends, the latest build is reading the backlog.
        self._catching_up: tuple[float, dict[TopicPartition, int]] | None = None

    @property
    def speaks(self) -> bool:
        """Whether this shard publishes the usage snapshots (it holds partition 0)."""
        return 0 in self.built_for

    def _rebuild(self, owned: frozenset[int]) -> None:
        self._close_readers()
        self.built_for = owned
        partitions = self.membership.partitions
        whole = owned == frozenset(range(partitions))
        owns = None if whole else owner_test(owned, partitions)
        self.host.reset(owns=owns)
        self.host.sealer = self._sealer() if whole else None
        self.restored = False
        if not owned:
            return
        self.builds += 1
        name = checkpoint_name(owned, partitions)
        self.checkpoints = self._open_checkpoints(name) if self._open_checkpoints else None
        checkpoint = self.checkpoints.restore() if self.checkpoints is not None else None
        inputs: dict[TopicPartition, int] = {}
        ledger: dict[TopicPartition, int] = {}
        if checkpoint is not None:
            for key, offset in checkpoint.positions.items():
                (ledger if key[0] == self.ledger_topic else inputs)[key] = offset
            self.host.adopt(checkpoint.state, inputs, owns)
            self.restored = True
        self._tail = self._open_tail(ledger)
        self._tail.on_charge = self._note_charge
        known = sum(self.host.count_recorded(charge) for charge in self._tail.read_to_end())
        self._note_seals()
        self._reader = self._open_reader(None if whole else owned, self.speaks, inputs)
        ends = self._reader.ends()
        self._catching_up = (time.monotonic(), ends)
        self.host.await_partitions({k: e for k, e in ends.items() if k[0] == self._workloads_topic})
        log.info(
            "charging fold started",
            extra={
                "partitions": sorted(owned),
                "from_checkpoint": checkpoint is not None,
                "charges_read": known,
            },
        )

    def _sealer(self) -> Sealer | None:
        if self._ledger is None:
            return None
        ends, read = self._ledger
        return Sealer(
            self.host,
            self.ledger_topic,
            ends,
            read,
            lambda: dict(self._tail.positions) if self._tail is not None else {},
            self._open_checkpoints,
            lambda: self.checkpoint(force=True),
        )

    def _note_charge(self, key: TopicPartition, offset: int, charge: LedgerCharge) -> None:
        self.host.state.periods.note_charge(key, offset, int(charge.bucket_start.timestamp()))

    def _note_seals(self) -> None:
        """Seals on the ledger: a rebuilt fold adopts them when it reaches their period."""
        if self._tail is not None:
            for closed in self._tail.take_seals():
                self.host.state.periods.note_on_log(closed)

    def checkpoint(self, force: bool = False) -> bool:
        """Save the fold with the positions it covers when one is due (``force``: now), once
        every charge published so far is acknowledged."""
        if self.checkpoints is None or self._tail is None or not self.built_for:
            return False
        if not (force or self.checkpoints.due()):
            return False
        self.host.flush_charges(always=True)
        positions = {**self.host.positions, **self._tail.positions}
        return self.checkpoints.save(self.host.state, positions)

    def run(self, should_stop: Callable[[], bool], poll_s: float = 0.5) -> None:
        host = self.host
        try:
            while not should_stop():
                owned = self.membership.poll()
                if owned != self.built_for:
                    host.flush_charges()
                    self.checkpoint(force=True)
                    self._rebuild(owned)
                if self._reader is None or self._tail is None:
                    time.sleep(min(poll_s, 0.2))  # nothing held: wait for the group
                    continue
                with gc_paused():  # decoding and the fold allocate no cycles; see gc_pause.py
                    host.take(self._reader.poll(timeout_s=poll_s, max_records=5000))
                    for charge in self._tail.read():
                        host.count_recorded(charge)
                    self._note_seals()
                if self.speaks:
                    host.snapshot_if_due()
                self._note_caught_up()
                self.checkpoint()
            host.flush_charges()
            self.checkpoint(force=True)
        finally:
            self._close_readers()
            self.membership.close()
            host.publisher.close()
            if self.dead_letters is not None:
                self.dead_letters.close()

    def _note_caught_up(self) -> None:
        """Say once per build when the fold has read the backlog its inputs had when it
        started (operators and ``fairshare bench kills`` time restarts by it)."""
        if self._catching_up is None:
            return
        since, ends = self._catching_up
        positions = self.host.positions
        if any(positions.get(key, 0) < end for key, end in ends.items() if end > 0):
            return
        self._catching_up = None
        self.host.awaited.clear()  # records dead-lettered at a backlog's end are no facts
        log.info(
            "charging caught up with the log",
            extra={
                "from_checkpoint": self.restored,
                "seconds": round(time.monotonic() - since, 3),
            },
        )
        if self.checkpoints is not None and not self.restored:
            self.checkpoints.due_now()  # the backlog just read is not read again after a crash

    def _close_readers(self) -> None:
        for reader in (self._reader, self._tail):
            if reader is not None:
                reader.close()
        self._reader = self._tail = None
