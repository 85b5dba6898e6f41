"""What a charging instance reads, without a consumer group: its inputs (some or all
partitions of the workloads topic, every heartbeat) and the ledger topic, each from given
positions (a checkpoint's) or from the first offset.

Both readers are assigned their partitions: nothing is committed, since what charging has read
is what its fold (and its checkpoint) says it has folded. Invalid input records are
dead-lettered as every owner of a topic does (heartbeats only by the instance that ``speaks``
for the shared inputs; the others skip them), and so are the records its ``trust`` does not
believe (``services.bus.trust``: a start by another cluster's agent, a forged end); a charge on
the ledger topic that charging did not sign is not counted (the projector dead-letters it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from events import TopicKind, Topics
from events.models import LedgerCharge, PeriodClosed
from events.positions import Delivery, Position, TopicPartition
from services.bus.deadletters import DeadLetters
from services.bus.follower import Follower, KafkaPartitions
from services.bus.records import Rejected, record_of, skip
from services.bus.trust import KeysFromLog, not_believed
from services.metrics import lag as lag_metrics

#: The name charging signs its dead letters with, and its consumer group's name after the
#: deployment's topic prefix (``fairshare.charging``).
GROUP = "charging"


class InputReader:
    """The held partitions of the workloads topic (``owned``; None: all) and every partition
    of the heartbeats topic, each from ``start`` (others from their first offset), merged by
    event time (:class:`~services.bus.follower.Follower`).

    Why merged: the consumer fetches partitions evenly in bytes, not in time, so during a
    catch-up the small workload facts ran hours or days ahead of the heartbeats, and one
    partition could be read to its end before another was touched. What each run-hour nets
    is the same either way, but how it splits into revisions is not: merged by event time and
    topic rank, the fold reads in the canonical order of the log's specification
    (``events.fact_order``, docs/spec/log-v1.md 8.9), which the audit sorts into, except for a
    record that reaches its partition after the merge has passed its time. And where charging
    stands when it enters a period is where the audit of that period starts reading: a
    partition left far behind there made the audit read its whole history. Read abreast, the
    fold enters a period with every partition at that period's start."""

    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        owned: frozenset[int] | None,
        dead_letters: DeadLetters,
        *,
        speaks: bool,
        start: Mapping[TopicPartition, int] | None = None,
        trust: KeysFromLog | None = None,
    ) -> None:
        self.topics = topics
        self.dead_letters = dead_letters
        self.speaks = speaks
        self.trust = trust
        workloads, heartbeats = (
            topics.name(k) for k in (TopicKind.WORKLOADS, TopicKind.HEARTBEATS)
        )
        self._heartbeats = heartbeats
        self._source = KafkaPartitions(
            bootstrap,
            [workloads, heartbeats],
            topics=topics,
            start=start,
            only=None if owned is None else {workloads: owned},
            on_invalid=self._invalid,
        )
        self.fatal = self._source.fatal
        self._follower = Follower(self._source, topics, start=self._source.start)

    def _invalid(self, rejected: Rejected) -> Position:
        if self.speaks or rejected.record.topic != self._heartbeats:
            self.dead_letters.reject(rejected)
            return rejected.position
        return skip(rejected, GROUP)

    def poll(self, timeout_s: float, max_records: int) -> list[Delivery]:
        deliveries = self._follower.poll(timeout_s, max_records)
        if self.trust is not None:
            deliveries = [d for d in deliveries if self._believed(d)]
        self.dead_letters.flush()  # before any charge that follows them is published
        return deliveries

    def _believed(self, delivery: Delivery) -> bool:
        assert self.trust is not None
        verdict = self.trust.judge(delivery.envelope)
        if verdict is None:
            return True
        self._invalid(not_believed(record_of(delivery), verdict))
        return False

    def ends(self) -> dict[TopicPartition, int]:
        """The end of every partition read, as the broker has it now: what this reader has
        caught up with once the fold's positions reach it."""
        return self._follower.end_offsets()

    def close(self) -> None:
        self._source.close()


class LedgerTail:
    """The charges on the ledger topic from ``start`` (others from the first offset): read to
    its end when a fold is (re)built or restored, then followed, so the fold knows every charge
    already published (its own before a crash, other shards') and usage counts them all."""

    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        start: Mapping[TopicPartition, int] | None = None,
        trust: KeysFromLog | None = None,
    ) -> None:
        self.trust = trust
        self.source = KafkaPartitions(
            bootstrap, [topics.name(TopicKind.LEDGER)], topics=topics, start=start
        )
        #: Per partition, the first offset not read yet.
        self.positions = {key: (start or {}).get(key, 0) for key in self.source.partitions()}
        #: Seals of closed periods read and not taken yet (:meth:`take_seals`).
        self.seals: list[PeriodClosed] = []
        #: Told where each charge lies as it is read (the period book's ledger index).
        self.on_charge: Callable[[TopicPartition, int, LedgerCharge], None] | None = None
        #: The end of each partition as the last fetch saw it (for :meth:`lag`).
        self._ends: dict[TopicPartition, int] = {}
        lag_metrics.watch(self)

    def lag(self) -> dict[TopicPartition, int]:
        """Charges on the ledger topic not read yet, up to the ends of the last fetch (noted
        by :meth:`read`: any thread may ask, and the client is never called from it)."""
        ends = dict(self._ends)
        return {key: max(0, ends.get(key, at) - at) for key, at in dict(self.positions).items()}

    def read(self, timeout_s: float = 0.0) -> list[LedgerCharge]:
        charges = []
        for item in self.source.fetch(timeout_s, 5000):
            position = item.position if isinstance(item, Delivery) else item
            self.positions[(position.topic, position.partition)] = position.offset + 1
            if isinstance(item, Delivery):
                data = item.envelope.data
                if self.trust is not None and self.trust.judge(item.envelope) is not None:
                    continue  # not charging's: no charge, no seal (the projector dead-letters it)
                if isinstance(data, LedgerCharge):
                    charges.append(data)
                    if self.on_charge is not None:
                        key = (position.topic, position.partition)
                        self.on_charge(key, position.offset, data)
                elif isinstance(data, PeriodClosed):
                    self.seals.append(data)
        self._ends.update(self.source.end_offsets(cached=True))
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
        lag_metrics.unwatch(self)
        self.source.close()
