"""Hosts the ledger fold over the bus: facts in (workloads, heartbeats), charges and usage
snapshots out.

State is the fold itself, rebuilt on every start by reading the input topics from the first
offset: the fold is deterministic, so the rebuilt state is the state a never-stopped host would
have. Charges already on the ledger topic are read first and never published again; a charge
published just before a crash is re-derived with the same id after the restart and recognised.
Consumers dedupe by charge id in any case (at-least-once everywhere).

A run's facts are held by the ledger fold itself while the submission that names its budget has
not been read (possible when a broker came back without its last writes): folded at once, that
start would post charges to the empty budget, which made the usage snapshot invalid
(``BudgetUsage budget ''``). The fold holds them, so the audit's replay agrees with this host.

Usage snapshots carry, per pool, each leaf budget's allocated and unallocated GPU-seconds in the
window as the ledger has confirmed them, with the input positions they were computed at.

The host speaks only to the bus port (a publisher, a subscriber, the charges already recorded),
so it runs on the in-memory bus in unit tests; ``services.charging.kafka`` wires it to Kafka.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from events import new_event
from events.envelope import Envelope, derived_event_id, envelope_class
from events.models import (
    InputPosition,
    LedgerCharge,
    UsageSnapshot,
)
from events.positions import Delivery
from events.times import DEFAULT_WINDOW_S
from events.trusted import trusted
from projections.ledger import Ledger, charge_event_id
from projections.usage_snapshots import count_charge, usage_snapshots
from projections.usage_window import UsageWindow
from services.bus.port import EventPublisher, EventSubscriber
from services.runtime.gc_pause import gc_paused

log = logging.getLogger(__name__)
SOURCE = "fairshare/charging"
#: Facts about a run, which the ledger can fold only once it knows the workload's budget.


class ChargingHost:
    def __init__(
        self,
        publisher: EventPublisher,
        recorded_charges: Callable[[], Iterable[LedgerCharge]],
        subscribe: Callable[[], EventSubscriber] | None = None,
        *,
        window_s: int = DEFAULT_WINDOW_S,
        snapshot_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``recorded_charges`` reads the charges already on the ledger topic; ``subscribe``
        opens a subscriber of the input topics from their first offset (needed by :meth:`run`
        only: a faust worker feeds :meth:`handle` itself)."""
        self._recorded_charges = recorded_charges
        self._subscribe = subscribe
        self.window_s = window_s
        self.published = 0
        self.snapshot_every_s = snapshot_every_s
        self.clock = clock
        self._last_snapshot = -1e18
        self.publisher = publisher
        #: Charges published since the last flush.
        self._unflushed = 0
        self.reset()

    def reset(self, owns: Callable[[str], bool] | None = None) -> None:
        """Start the fold over (a shard whose partitions changed rebuilds it), charging only
        the workloads ``owns`` accepts (default: every one)."""
        # The host publishes each charge as it is posted and keeps only the ids (dedupe), so
        # its memory does not grow with a copy of the whole ledger.
        self.ledger = Ledger(keep_entries=False, owns=owns)
        self.usage = UsageWindow(self.window_s)
        self.positions: dict[tuple[str, int], int] = {}
        self._latest_time = 0.0

    def restore(self) -> None:
        """Learn every charge already on the ledger topic, so none is published twice."""
        for charge in self._recorded_charges():
            self.count_recorded(charge)

    def count_recorded(self, charge: LedgerCharge) -> bool:
        """A charge read from the ledger topic: known from now on (never published again) and
        counted in the usage window, unless it was known already (one this host posted)."""
        if not self.ledger.record(charge):
            return False
        count_charge(self.usage, charge)
        return True

    def handle(self, delivery: Delivery) -> list[LedgerCharge]:
        envelope: Envelope[Any] = delivery.envelope
        self.positions[(delivery.position.topic, delivery.position.partition)] = (
            delivery.position.offset + 1
        )
        self._latest_time = max(self._latest_time, envelope.time.timestamp())
        return self._fold(envelope)

    def take(self, batch: list[Delivery]) -> None:
        """Fold one polled batch. Nothing is committed from here (the fold is rebuilt on
        start), so charges need not be acknowledged batch by batch: they are flushed when the
        input is idle (an empty batch) or every 10,000."""
        for delivery in batch:
            self._unflushed += len(self.handle(delivery))
        if self._unflushed and (not batch or self._unflushed >= 10_000):
            self.flush_charges()

    def flush_charges(self) -> None:
        """Wait until every charge published so far is acknowledged."""
        if self._unflushed:
            self.publisher.flush()
            self._unflushed = 0

    def _fold(self, envelope: Envelope[Any]) -> list[LedgerCharge]:
        fresh = []
        for charge in self.ledger.apply(envelope.data, envelope.epoch_seconds):
            fresh.append(charge)
            count_charge(self.usage, charge)
            # Trusted construction: the charge and the envelope's values come from validated
            # facts; consumers decode every charge through the strict serde.
            self.publisher.publish(
                trusted(
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
        return fresh

    def snapshots(self) -> list[UsageSnapshot]:
        as_of = tuple(
            InputPosition(topic=t, partition=p, offset=o)
            for (t, p), o in sorted(self.positions.items())
        )
        return usage_snapshots(self.usage, self._latest_time, as_of)

    def publish_snapshots(self) -> None:
        for snapshot in self.snapshots():
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
