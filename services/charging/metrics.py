"""Charging's lag behind the log, in seconds: how far behind the newest fact it folded is
while records wait for it, and how old the newest usage snapshot it published is (the
scheduler ranks budgets by that snapshot, so its age is how stale fair share is).

Ages of event times, read at scrape time from numbers the host's own thread writes. The fold's
lag counts only while charging's readers have records left on its input topics: a quiet log
(no workload facts for a while) is no lag. Records behind are in
``fairshare_consumer_lag_records``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.metrics import common as _conventions  # noqa: F401 (no _created series)
from services.metrics import lag

CHARGES = Counter(
    "fairshare_charges",
    "Ledger charges published (corrections included), by pool and kind",
    ["pool", "kind"],
)
USAGE_SNAPSHOTS = Counter(
    "fairshare_usage_snapshots",
    "Usage snapshots published (one per pool each time)",
)


class _Fold(Protocol):
    @property
    def latest_time(self) -> float: ...


class Host(Protocol):
    """What the lag is read from (a ``ChargingHost``, which imports this module's counters)."""

    @property
    def state(self) -> _Fold: ...

    @property
    def last_snapshot_end(self) -> float | None: ...


class ChargingLag(Collector):
    def __init__(
        self,
        host: Host,
        behind: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``behind``: whether records wait on charging's inputs now (else its lag is 0)."""
        self.host = host
        self.behind = behind
        self.clock = clock

    def describe(self) -> Iterator[Metric]:
        yield from self._families(None, None)

    def collect(self) -> Iterator[Metric]:
        folded = self.host.state.latest_time or None  # 0: nothing folded yet
        if folded is not None and not self.behind():
            folded = self.clock()  # caught up: nothing on the log is newer than the fold
        yield from self._families(folded, self.host.last_snapshot_end)

    def _families(self, folded: float | None, snapshot: float | None) -> Iterator[Metric]:
        fold = GaugeMetricFamily(
            "fairshare_charging_lag_seconds",
            "Age of the newest fact charging has folded while records wait on its inputs (0 "
            "when it has read them all)",
        )
        snapshots = GaugeMetricFamily(
            "fairshare_usage_snapshot_lag_seconds",
            "Age of the window end of the newest usage snapshot this charging published",
        )
        now = self.clock()
        if folded is not None:
            fold.add_metric([], max(0.0, now - folded))
        if snapshot is not None:
            snapshots.add_metric([], max(0.0, now - snapshot))
        yield from (fold, snapshots)


def register(host: Host, inputs: Collection[str]) -> ChargingLag:
    """Report ``host``'s lag on this process's ``/metrics`` (once per process); ``inputs``:
    the topics its facts come from."""

    def behind() -> bool:
        return any(lag.current().get(topic, 0) > 0 for topic in inputs)

    collector = ChargingLag(host, behind)
    REGISTRY.register(collector)
    return collector
