"""Runs the SQL projector over the bus port: poll a batch, apply it in one transaction (rows
and positions together), then commit the consumer offsets. A crash between the two commits only
causes a redelivery, which the stored positions skip. It speaks only to the port, so it runs on
the in-memory bus in unit tests; ``services.projector.serve`` wires it to Kafka.

Skipping by stored position is only right while the log is the one the positions were stored
against. A topic deleted and recreated (or truncated) puts the stored position beyond the
partition's end, and the consumer's offset reset then delivers old offsets again: skipped, the
new facts would never reach the tables, silently. So the host stops instead, loudly
(:class:`LogTruncatedError`): on start when a stored position lies beyond its partition's end, and
while running when a partition's offsets go backwards and the end is below what was stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

from events import TopicKind
from events.positions import Delivery, TopicPartition
from services.bus.port import EventSubscriber
from services.projector.sql_projector import SqlProjector
from services.runtime.gc_pause import gc_paused

log = logging.getLogger(__name__)

#: The topics whose events change a read model. Heartbeats (the bulk of the log) reach the
#: tables only as charges, usage snapshots are the scheduler's, dead letters are the operators'.
PROJECTED = (
    TopicKind.WORKLOADS,
    TopicKind.COMMANDS,
    TopicKind.CLUSTER,
    TopicKind.BUDGETS,
    TopicKind.LEDGER,
)


class LogTruncatedError(RuntimeError):
    """The read models hold a position the log no longer has: it was truncated or recreated."""

    def __init__(self, topic: str, partition: int, stored: int, end: int, why: str) -> None:
        self.topic, self.partition, self.stored, self.end = topic, partition, stored, end
        super().__init__(
            f"log truncated: {topic} partition {partition}: read models at offset {stored}, "
            f"partition ends at {end} ({why}); refusing to skip or re-project. Restore the "
            "log, or drop the read models' positions and rebuild them from the log"
        )


class TruncationGuard:
    """Watches the positions a projector stored and the offsets it is delivered."""

    def __init__(
        self,
        stored: dict[TopicPartition, int],
        ends: Callable[[], dict[TopicPartition, int]],
        topics: Collection[str] | None = None,
    ) -> None:
        #: Stored positions of the topics read (``topics``; default all).
        self.stored = {k: v for k, v in stored.items() if topics is None or k[0] in topics}
        self._ends = ends
        #: Next offset after the last one delivered in this run, per partition.
        self._delivered: dict[TopicPartition, int] = {}
        #: Partitions whose end was checked against the stored position in this run.
        self._verified: set[TopicPartition] = set()

    def check_start(self) -> None:
        """Every stored position lies within its partition (a missing partition ends at 0)."""
        ends = self._ends()
        for key in sorted(self.stored):
            self._check(key, ends.get(key, 0), "the stored position is beyond the end")
        self._verified.update(self.stored)

    def check_batch(self, batch: Sequence[Delivery]) -> None:
        """Before applying: an offset that goes backwards within this run, or one below the
        stored position (a redelivery, normal after a crash) is checked against the end."""
        suspicious: dict[TopicPartition, str] = {}
        for delivery in batch:
            key = (delivery.position.topic, delivery.position.partition)
            offset = delivery.position.offset
            if offset < self._delivered.get(key, 0):
                suspicious[key] = f"offsets went back from {self._delivered[key]} to {offset}"
            elif offset < self.stored.get(key, 0) and key not in self._verified:
                suspicious.setdefault(key, "redelivered below the stored position")
            self._delivered[key] = offset + 1
        if suspicious:
            ends = self._ends()
            for key, why in sorted(suspicious.items()):
                self._check(key, ends.get(key, 0), why, backwards="went back" in why)
                self._verified.add(key)

    def _check(self, key: TopicPartition, end: int, why: str, *, backwards: bool = False) -> None:
        stored = self.stored.get(key, 0)
        if stored > end or backwards:
            raise LogTruncatedError(key[0], key[1], stored, end, why)

    def applied(self, batch: Sequence[Delivery]) -> None:
        for delivery in batch:
            key = (delivery.position.topic, delivery.position.partition)
            self.stored[key] = max(self.stored.get(key, 0), delivery.position.offset + 1)


def project(
    subscriber: EventSubscriber,
    projector: SqlProjector,
    ends: Callable[[], dict[TopicPartition, int]],
    should_stop: Callable[[], bool],
    *,
    topics: Collection[str] | None = None,
    max_batches: int | None = None,
    commit: Callable[[], None] | None = None,
) -> int:
    """Project from ``subscriber`` until ``should_stop()``; returns the events applied. Raises
    :class:`LogTruncatedError` (before applying anything of the batch) when the log was cut."""
    guard = TruncationGuard(projector.positions(), ends, topics)
    guard.check_start()
    applied = batches = 0
    while not should_stop() and (max_batches is None or batches < max_batches):
        with gc_paused():  # decoding and applying allocate no cycles; see gc_pause.py
            batch = subscriber.poll(timeout_s=0.5, max_records=5000)
            if not batch:
                continue
            guard.check_batch(batch)
            applied += projector.apply(batch)
            guard.applied(batch)
        batches += 1
        if commit is not None:
            # The positions in SQL are the truth; the group's offsets only save re-reading.
            commit()
    return applied
