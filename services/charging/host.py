"""Hosts the ledger fold over the bus: facts in (workloads, heartbeats), charges and usage
snapshots out.

State is :class:`~projections.charging_state.ChargingState`: the ledger fold and the usage
window. A host starts from a checkpoint of it where its driver has one
(``services.charging.driver``: the state, and the input and ledger positions it covers) and
reads only the tail; otherwise it rebuilds it from the first offset. The fold is
deterministic, so either way the state is the one a never-stopped host would have.

Charges already on the ledger topic are never published again. After a rebuild, the whole
ledger topic is read first; after a restore, only its tail from the checkpoint's positions: the
charges before them are known to the restored fold itself (each run remembers the revisions it
derived, and runs that left the fold their workload's last attempt), and a charge published
after the checkpoint, just before a crash, is on that tail. A checkpoint is saved only once
every charge published so far is acknowledged, so it never claims a charge the log lacks.
Consumers dedupe by charge id in any case (at-least-once everywhere).

A run's facts are held by the ledger fold itself while the submission that names its budget has
not been read (possible when a broker came back without its last writes): folded at once, that
start would post charges to the empty budget, which made the usage snapshot invalid
(``BudgetUsage budget ''``). The fold holds them, so the audit's replay agrees with this host.

Usage snapshots carry, per pool, each leaf budget's allocated and unallocated GPU-seconds in the
window as the ledger has confirmed them, with the input positions they were computed at.

The host speaks only to the bus port (a publisher, a subscriber, the charges already recorded),
so it runs on the in-memory bus in unit tests; ``services.charging.serve`` wires it to Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from events import new_event
from events.envelope import Envelope, derived_event_id, envelope_class
from events.models import (
    InputPosition,
    LedgerCharge,
    UsageSnapshot,
)
from events.positions import Delivery, TopicPartition
from events.prevalidated import prevalidated
from events.times import DEFAULT_WINDOW_S
from projections.charging_state import ChargingState
from projections.ledger import Ledger, charge_event_id
from projections.usage_snapshots import usage_snapshots
from projections.usage_window import UsageWindow
from services.bus.port import EventPublisher, EventSubscriber
from services.charging.metrics import CHARGES, USAGE_SNAPSHOTS
from services.runtime.gc_pause import gc_paused

log = logging.getLogger(__name__)
SOURCE = "fairshare/charging"


class PeriodSealer(Protocol):
    """Seals closed periods for a host (``services.charging.periods``): the host says when,
    from its fold's period book, the sealer does the I/O."""

    def open(self, start: int) -> None:
        """The fold is about to fold its first fact at or after ``start``."""

    def close(self, start: int) -> None:
        """The horizon has passed the end of the period that starts at ``start``."""


class ChargingHost:
    def __init__(
        self,
        publisher: EventPublisher,
        recorded_charges: Callable[[], Iterable[LedgerCharge]],
        subscribe: Callable[[], EventSubscriber] | None = None,
        *,
        window_s: int = DEFAULT_WINDOW_S,
        horizon_s: int | None = DEFAULT_WINDOW_S,
        snapshot_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        period_length: str = "month",
    ) -> None:
        """``recorded_charges`` reads the charges already on the ledger topic; ``subscribe``
        opens a subscriber of the input topics from their first offset (needed by :meth:`run`
        only: a faust worker feeds :meth:`handle` itself); ``horizon_s``: how long after its
        end a run leaves the fold (``ChargingState``; None: never); ``period_length``: of the
        ledger's closed periods (month, day or hour), sealed while a :attr:`sealer` is set."""
        self._recorded_charges = recorded_charges
        self._subscribe = subscribe
        self.window_s = window_s
        self.horizon_s = horizon_s
        self.period_length = period_length
        #: Who seals closed periods (None: no one; only a fold of every partition may).
        self.sealer: PeriodSealer | None = None
        self.published = 0
        self.snapshot_every_s = snapshot_every_s
        self.clock = clock
        self._last_snapshot = -1e18
        #: The window end (epoch seconds) of the newest usage snapshot published; None: none yet.
        self.last_snapshot_end: float | None = None
        self.publisher = publisher
        #: Charges published since the last flush.
        self._unflushed = 0
        self.reset()

    def reset(self, owns: Callable[[str], bool] | None = None) -> None:
        """Start the fold over (a shard whose partitions changed rebuilds it), charging only
        the workloads ``owns`` accepts (default: every one)."""
        # The host publishes each charge as it is posted and keeps no copy of the ledger.
        self.state = ChargingState.new(self.window_s, owns, self.horizon_s, self.period_length)
        #: Per input (topic, partition): the first offset the state has not folded.
        self.positions: dict[TopicPartition, int] = {}
        #: Workloads partitions with a backlog not one fact of which is folded yet, and the
        #: end of that backlog: the horizon cannot vouch for them (:meth:`await_partitions`).
        self.awaited: dict[TopicPartition, int] = {}

    def adopt(
        self,
        state: ChargingState,
        positions: Mapping[TopicPartition, int],
        owns: Callable[[str], bool] | None,
    ) -> None:
        """Continue from a checkpoint: ``state`` has folded every input before ``positions``
        (``owns`` is no state: it is the caller's partitions)."""
        state.ledger.owns = owns
        if state.periods.length != self.period_length:
            log.warning(
                "the checkpoint's periods are of another length: a new chain of seals starts",
                extra={"checkpoint": state.periods.length, "now": self.period_length},
            )
            state.periods = ChargingState.new(period_length=self.period_length).periods
        self.state = state
        self.positions = dict(positions)
        self.awaited = {}

    def await_partitions(self, ends: Mapping[TopicPartition, int]) -> None:
        """No period is sealed while one of these workloads partitions, with a backlog up to
        ``ends``, is unread: the horizon is measured on the partitions folded from (a run's
        facts all lie on one), so a catch-up that reads one partition far ahead of another
        it has not touched yet would otherwise see the horizon pass hours whose charges the
        untouched partition still holds, and seal them without. A partition leaves the wait
        at its first workload fact (the horizon then counts it) or at its backlog's end (an
        empty one never blocks)."""
        self.awaited = {
            key: end
            for key, end in ends.items()
            if key not in self.state.progress and self.positions.get(key, 0) < end
        }

    def _still_awaited(self, key: TopicPartition) -> None:
        end = self.awaited.get(key)
        if end is not None and (key in self.state.progress or self.positions[key] >= end):
            del self.awaited[key]

    @property
    def ledger(self) -> Ledger:
        return self.state.ledger

    @property
    def usage(self) -> UsageWindow:
        return self.state.usage

    def restore(self) -> None:
        """Learn every charge already on the ledger topic, so none is published twice."""
        for charge in self._recorded_charges():
            self.count_recorded(charge)

    def count_recorded(self, charge: LedgerCharge) -> bool:
        """A charge read from the ledger topic: known from now on (never published again) and
        counted in the usage window, unless it was known already (one this host posted)."""
        return self.state.count_recorded(charge)

    def handle(self, delivery: Delivery) -> list[LedgerCharge]:
        """Fold one delivery; with a sealer, open the periods it enters first (their
        positions exclude it) and close those its horizon passes after (theirs include it)."""
        key = (delivery.position.topic, delivery.position.partition)
        sealer = self.sealer
        if sealer is not None:
            for start in self.state.periods.entering(delivery.envelope.epoch_seconds):
                sealer.open(start)
        self.positions[key] = delivery.position.offset + 1
        fresh = self._fold(delivery.envelope, key)
        if self.awaited:
            self._still_awaited(key)
        if sealer is not None and not self.awaited:
            while (due := self.state.periods.due(self.state.horizon())) is not None:
                sealer.close(due)
        return fresh

    def take(self, batch: list[Delivery]) -> None:
        """Fold one polled batch. Nothing is committed from here (what was read is what the
        fold, or its checkpoint, says it folded), so charges need not be acknowledged batch by
        batch: they are flushed when the input is idle (an empty batch), every 10,000, and
        before a checkpoint is saved."""
        for delivery in batch:
            self._unflushed += len(self.handle(delivery))
        if self._unflushed and (not batch or self._unflushed >= 10_000):
            self.flush_charges()

    def flush_charges(self, always: bool = False) -> None:
        """Wait until every charge published so far is acknowledged (``always``: even those
        :meth:`handle` published outside :meth:`take`)."""
        if self._unflushed or always:
            self.publisher.flush()
            self._unflushed = 0

    def _fold(
        self, envelope: Envelope[Any], source: TopicPartition | None = None
    ) -> list[LedgerCharge]:
        fresh = self.state.fold(
            envelope.data, envelope.epoch_seconds, source, envelope.time.timestamp()
        )
        for charge in fresh:
            # Trusted construction: the charge and the envelope's values come from validated
            # facts; consumers decode every charge through the strict serde.
            self.publisher.publish(
                prevalidated(
                    envelope_class(LedgerCharge),
                    id=charge_event_id(charge),
                    source=SOURCE,
                    type=LedgerCharge.event_type,
                    time=envelope.time,
                    subject=charge.workload_id,
                    correlationid=None,
                    causationid=envelope.id,
                    data=charge,
                )
            )
            self.published += 1
            CHARGES.labels(charge.pool, charge.kind).inc()
        return fresh

    def snapshots(self) -> list[UsageSnapshot]:
        as_of = tuple(
            InputPosition(topic=t, partition=p, offset=o)
            for (t, p), o in sorted(self.positions.items())
        )
        return usage_snapshots(self.usage, self.state.latest_time, as_of)

    def publish_snapshots(self) -> None:
        snapshots = self.snapshots()
        for snapshot in snapshots:
            key = "|".join(f"{p.topic}/{p.partition}/{p.offset}" for p in snapshot.as_of)
            self.publisher.publish(
                new_event(
                    snapshot,
                    source=SOURCE,
                    time=snapshot.window_end,
                    event_id=derived_event_id("usage", snapshot.pool, key),
                )
            )
        self.publisher.flush()
        if snapshots:
            USAGE_SNAPSHOTS.inc(len(snapshots))
            self.last_snapshot_end = max(s.window_end.timestamp() for s in snapshots)

    def snapshot_if_due(self) -> None:
        """Publish usage snapshots when ``snapshot_every_s`` has passed since the last ones."""
        if self.clock() - self._last_snapshot >= self.snapshot_every_s:
            self._last_snapshot = self.clock()
            if self.positions:
                self.publish_snapshots()

    def run(self, should_stop: Callable[[], bool], poll_s: float = 0.5) -> None:
        if self._subscribe is None:
            raise RuntimeError("this charging host was built without a subscriber to run")
        self.restore()
        subscriber = self._subscribe()
        try:
            while not should_stop():
                with gc_paused():  # decoding and the fold allocate no cycles; see gc_pause.py
                    self.take(subscriber.poll(timeout_s=poll_s, max_records=5000))
                self.snapshot_if_due()
        finally:
            subscriber.close()
            self.publisher.close()
