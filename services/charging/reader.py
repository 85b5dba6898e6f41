"""What a charging instance reads, without a consumer group: its inputs (some or all
partitions of the workloads topic, every heartbeat) and the ledger topic, each from given
positions (a checkpoint's) or from the first offset.

Both readers are assigned their partitions: nothing is committed, since what charging has read
is what its fold (and its checkpoint) says it has folded. Invalid input records are
dead-lettered as every owner of a topic does (heartbeats only by the instance that ``speaks``
for the shared inputs; the others skip them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events import TopicKind, Topics
from events.models import LedgerCharge, PeriodClosed
from events.positions import Delivery
from services.bus.deadletters import DeadLetters
from services.bus.follower import KafkaPartitions
from services.bus.kafka import FatalLatch
from services.bus.records import check, raw_record, skip

#: The name charging signs its dead letters with, and its consumer group's name after the
#: deployment's topic prefix (``fairshare.charging``).
GROUP = "charging"
Key = tuple[str, int]


class InputReader:
    """The held partitions of the workloads topic (``owned``; None: all) and every partition
    of the heartbeats topic, each from ``start`` (others from their first offset)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        owned: frozenset[int] | None,
        dead_letters: DeadLetters,
        *,
        speaks: bool,
        start: Mapping[Key, int] | None = None,
    ) -> None:
        self.topics = topics
        self.dead_letters = dead_letters
        self.speaks = speaks
        self.fatal = FatalLatch("charging reader")
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"fairshare-charging-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # What librdkafka fetches ahead is memory too: 16 MiB keeps a catch-up busy
                # and keeps the process's peak from growing with the backlog (64 MiB default).
                "queued.max.messages.kbytes": 16384,
                "error_cb": self.fatal.on_error,
            }
        )
        workloads, heartbeats = (
            topics.name(k) for k in (TopicKind.WORKLOADS, TopicKind.HEARTBEATS)
        )
        metadata = self._consumer.list_topics(timeout=10).topics
        for name in (workloads, heartbeats):
            if name not in metadata:
                raise RuntimeError(f"topic {name} does not exist (run the topic setup first)")
        self._heartbeats = heartbeats
        held = sorted(metadata[workloads].partitions) if owned is None else sorted(owned)
        first = start or {}
        self._consumer.assign(
            [
                TopicPartition(topic, p, first.get((topic, p), OFFSET_BEGINNING))
                for topic, partitions in (
                    (workloads, held),
                    (heartbeats, metadata[heartbeats].partitions),
                )
                for p in sorted(partitions)
            ]
        )

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

    def ends(self) -> dict[Key, int]:
        """The end of every partition read, as the broker has it now: what this reader has
        caught up with once the fold's positions reach it."""
        ends: dict[Key, int] = {}
        for tp in self._consumer.assignment():
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=10
            )
            ends[(tp.topic, tp.partition)] = int(high)
        return ends

    def close(self) -> None:
        self._consumer.close()


class LedgerTail:
    """The charges on the ledger topic from ``start`` (others from the first offset): read to
    its end when a fold is (re)built or restored, then followed, so the fold knows every charge
    already published (its own before a crash, other shards') and usage counts them all."""

    def __init__(
        self, bootstrap: str, topics: Topics, start: Mapping[Key, int] | None = None
    ) -> None:
        self.source = KafkaPartitions(
            bootstrap, [topics.name(TopicKind.LEDGER)], topics=topics, start=start
        )
        #: Per partition, the first offset not read yet.
        self.positions = {key: (start or {}).get(key, 0) for key in self.source.partitions()}
        #: Seals of closed periods read and not taken yet (:meth:`take_seals`).
        self.seals: list[PeriodClosed] = []

    def read(self, timeout_s: float = 0.0) -> list[LedgerCharge]:
        charges = []
        for item in self.source.fetch(timeout_s, 5000):
            position = item.position if isinstance(item, Delivery) else item
            self.positions[(position.topic, position.partition)] = position.offset + 1
            if isinstance(item, Delivery):
                data = item.envelope.data
                if isinstance(data, LedgerCharge):
                    charges.append(data)
                elif isinstance(data, PeriodClosed):
                    self.seals.append(data)
        return charges

    def take_seals(self) -> list[PeriodClosed]:
        seals, self.seals = self.seals, []
        return seals

    def read_to_end(self, stall_timeout_s: float = 60.0) -> Iterator[LedgerCharge]:
        """Up to the end the topic has now, as read (never the whole ledger in one list); gives
        up only when nothing came for ``stall_timeout_s``."""
        ends = self.source.end_offsets()
        progress_at = time.monotonic()
        while any(self.positions.get(key, 0) < end for key, end in ends.items()):
            before = dict(self.positions)
            yield from self.read(timeout_s=0.2)
            if self.positions != before:
                progress_at = time.monotonic()
            elif time.monotonic() - progress_at > stall_timeout_s:
                raise TimeoutError("could not read the ledger topic to its end in time")

    def close(self) -> None:
        self.source.close()
