"""Charging's fold: the ledger and the usage window over the facts and charges it has read.

This is the state a checkpoint of charging holds (``services.charging.host`` saves it with the
input and ledger positions it covers), so a restart reads only the log's tail. It stays the
size of what is live, not of the history:

* **Runs** leave the ledger fold a *horizon* (default: the usage window, 7 days) after their
  end, measured on the slowest workloads partition the fold reads: ``progress`` holds, per
  partition, the latest event time of a workload fact folded from it, and the horizon is their
  minimum less ``horizon_s``. A run's own facts all lie on one workloads partition, so a run
  leaves only once its partition has moved on a whole horizon past its end; why no later fact
  can then double-post is in ``projections.ledger``. Only workload facts move the horizon:
  heartbeats travel on other partitions, often read far behind, and can never change an ended
  run; other topics' facts are no run's.
* **Usage** keeps the window at the latest event time, since snapshots are taken there only.
* **Charges recorded** by other shards are forgotten once their hour is out of that window
  (they only ever counted in usage); this shard's own leave as soon as it derives them.

Pruning happens at whole hours of the horizon and depends only on the facts folded, so a fold
restored from a checkpoint and fed the tail is the fold of the whole log
(``tests/unit/test_charging_checkpoint.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from events.models import EventData, LedgerCharge
from events.models.ledger import parse_charge_id
from events.positions import TopicPartition
from events.times import DEFAULT_WINDOW_S, HOUR
from events.topics import TopicKind
from projections.ledger import Ledger
from projections.period_book import PeriodBook
from projections.usage_snapshots import count_charge
from projections.usage_window import UsageWindow


@dataclass
class ChargingState:
    ledger: Ledger
    usage: UsageWindow
    #: How long after its end (event time) a run may leave the fold; None: never.
    horizon_s: int | None = DEFAULT_WINDOW_S
    #: The latest event time read (epoch seconds, as stated): where snapshots are taken.
    latest_time: float = 0.0
    #: Per input partition of workload facts: the latest event time folded from it.
    progress: dict[TopicPartition, float] = field(default_factory=dict)
    #: Facts folded (for the logs of a checkpoint).
    events: int = 0
    #: The hour (epoch s) of the horizon the fold was last pruned at.
    pruned_at: int = 0
    #: Its closed periods (``projections.period_book``; driven by the host that seals).
    periods: PeriodBook = field(default_factory=PeriodBook)

    @classmethod
    def new(
        cls,
        window_s: int = DEFAULT_WINDOW_S,
        owns: Callable[[str], bool] | None = None,
        horizon_s: int | None = DEFAULT_WINDOW_S,
        period_length: str = "month",
    ) -> ChargingState:
        """An empty fold; ``owns`` as for :class:`Ledger` (a shard's workloads)."""
        ledger = Ledger(keep_entries=False, owns=owns)
        return cls(
            ledger, UsageWindow(window_s), horizon_s, periods=PeriodBook(length=period_length)
        )

    def fold(
        self,
        data: EventData,
        at: float,
        source: TopicPartition | None = None,
        time: float | None = None,
    ) -> list[LedgerCharge]:
        """Fold a fact read from ``source`` (topic, partition), dated ``at`` (whole epoch
        seconds) and ``time`` (as stated); returns the charges it posted, counted in usage."""
        self.events += 1
        self.latest_time = max(self.latest_time, at if time is None else time)
        fresh = self.ledger.apply(data, at)
        for charge in fresh:
            count_charge(self.usage, charge)
        moved = source is not None and at > self.progress.get(source, float("-inf"))
        if moved and source is not None and type(data).topic is TopicKind.WORKLOADS:
            self.progress[source] = at
            self._prune_if_due()
        return fresh

    def count_recorded(self, charge: LedgerCharge) -> bool:
        """A charge read from the ledger topic: known from now on (never posted again) and
        counted in usage, unless it was known already (one this fold derived)."""
        if not self.ledger.record(charge):
            return False
        count_charge(self.usage, charge)
        return True

    def horizon(self) -> int | None:
        """Runs that ended before this (epoch s, on the hour) may leave; None: none may."""
        if self.horizon_s is None or not self.progress:
            return None
        return int(min(self.progress.values()) - self.horizon_s) // HOUR * HOUR

    def _prune_if_due(self) -> None:
        horizon = self.horizon()
        if horizon is None or horizon <= self.pruned_at:
            return
        self.pruned_at = horizon
        self.ledger.prune(horizon, forget=self._forgettable)
        self.usage.forget_before(self.latest_time)

    def _forgettable(self, posting: str) -> bool:
        owns = self.ledger.owns
        parsed = parse_charge_id(posting)
        if owns is None or parsed is None or owns(parsed[0]):
            return False  # this fold's own: forgotten only once derived
        return parsed[2] < self.usage.window_first_bucket(self.latest_time) * HOUR
