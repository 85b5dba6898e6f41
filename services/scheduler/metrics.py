"""The scheduler's metrics: its queues and leases as a leader sees them, and what its passes
decide (latency to placement, preemptions by reason, pass duration).

The queues are counted on the service's own thread, at most every ``every_s``, into a frozen
:class:`Figures` that a scrape reads whole: the fold's dicts are never iterated from the
metrics thread, where a fold in progress would change them under it. Only the pools this
instance leads are reported (all of them for the whole-cluster lease, none on a standby), so
summing over the instances counts each pool once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from events.models import EventData, PlaceCommand, PreemptCommand
from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState
from services.metrics import common as _conventions  # noqa: F401 (no _created series)

#: Queue waits run from seconds (an idle pool) to hours (a budget over its share): buckets
#: from half a second to a day, roughly doubling.
WAIT_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400)
#: A pass decides in milliseconds on a small cluster and in seconds on a fleet's backlog.
PASS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

SUBMIT_TO_PLACED = Histogram(
    "fairshare_submit_to_placed_seconds",
    "From a workload's submission to the scheduler's first place command for it",
    ["pool", "allocated"],
    buckets=WAIT_BUCKETS,
)
PASS_DURATION = Histogram(
    "fairshare_scheduler_pass_duration_seconds",
    "Wall time of one scheduling pass (the decision, without publishing)",
    buckets=PASS_BUCKETS,
)
PREEMPTIONS = Counter(
    "fairshare_preemptions",
    "Preempt commands published, by pool and decision reason",
    ["pool", "reason"],
)
LEASE_LOST_PASSES = Counter(
    "fairshare_scheduler_lease_lost_passes",
    "Passes whose decisions were dropped because the lease ran out before publishing",
)

#: The lease label of the whole-cluster lease (no pool is named ``*``).
WHOLE_CLUSTER = "*"

#: (pool, budget, state) -> (workloads, GPUs).
Counts = dict[tuple[str, str, str], tuple[int, int]]


@dataclass(frozen=True)
class Figures:
    #: Pending work per pool's queue (a workload accepting several pools is in each queue)
    #: and work holding GPUs (placed or running), for the pools led.
    counts: Counts = field(default_factory=dict)
    #: Per lease (a pool, or :data:`WHOLE_CLUSTER`): its epoch and whether this instance leads it.
    leases: Mapping[str, tuple[int, bool]] = field(default_factory=dict)


def count_work(cluster: ClusterState, pools: Iterable[str] | None) -> Counts:
    """Pending and running work per (pool, budget) of ``pools`` (None: every pool)."""
    wanted = None if pools is None else set(pools)
    counts: Counts = {}

    def add(key: tuple[str, str, str], workloads: int, gpus: int) -> None:
        had = counts.get(key, (0, 0))
        counts[key] = (had[0] + workloads, had[1] + gpus)

    for pool, by_budget in cluster.pending.items():
        if wanted is not None and pool not in wanted:
            continue
        for budget, by_kind in by_budget.items():
            for (_allocated, gpus, _gang), queue in by_kind.items():
                if queue:
                    add((pool, budget, "pending"), len(queue), gpus * len(queue))
    for pool, active in cluster.active.items():
        if wanted is not None and pool not in wanted:
            continue
        for workload_id in active:
            workload = cluster.workloads.get(workload_id)
            if workload is not None:
                add((pool, workload.budget, "running"), 1, workload.gpus)
    return counts


class SchedulerFigures(Collector):
    """``fairshare_workloads``, ``fairshare_workload_gpus`` and the lease gauges, from the
    :class:`Figures` the service last refreshed."""

    def __init__(self, every_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self.figures = Figures()
        self._refreshed = float("-inf")

    def due(self) -> bool:
        return self.clock() - self._refreshed >= self.every_s

    def refresh(
        self,
        cluster: ClusterState,
        led: Iterable[str] | None,
        leases: Mapping[str, tuple[int, bool]],
    ) -> None:
        """Count the work of the pools ``led`` (None: all of them) on the caller's thread."""
        self.figures = Figures(count_work(cluster, led), dict(leases))
        self._refreshed = self.clock()

    def describe(self) -> Iterator[Metric]:
        yield from self._families(Figures())

    def collect(self) -> Iterator[Metric]:
        yield from self._families(self.figures)

    @staticmethod
    def _families(figures: Figures) -> Iterator[Metric]:
        labels = ["pool", "budget", "state"]
        workloads = GaugeMetricFamily(
            "fairshare_workloads",
            "Workloads pending in each pool's queue or holding GPUs there, per budget "
            "(reported by the pool's leader)",
            labels=labels,
        )
        gpus = GaugeMetricFamily(
            "fairshare_workload_gpus",
            "GPUs asked for by pending work, or held by running work, per pool and budget "
            "(reported by the pool's leader)",
            labels=labels,
        )
        for key, (count, gpu_count) in sorted(figures.counts.items()):
            workloads.add_metric(list(key), count)
            gpus.add_metric(list(key), gpu_count)
        leader = GaugeMetricFamily(
            "fairshare_scheduler_leader",
            "1 while this scheduler holds the lease (pool '*': the whole-cluster lease)",
            labels=["pool"],
        )
        epoch = GaugeMetricFamily(
            "fairshare_scheduler_lease_epoch",
            "The lease's epoch as this scheduler last read it (its commands' fencing token)",
            labels=["pool"],
        )
        for name, (number, leads) in sorted(figures.leases.items()):
            leader.add_metric([name], 1 if leads else 0)
            epoch.add_metric([name], number)
        yield from (workloads, gpus, leader, epoch)


def observe_pass(seconds: float) -> None:
    PASS_DURATION.observe(seconds)


def observe_published(
    decided: Iterable[EventData], workloads: Mapping[str, WorkloadState], now: float
) -> None:
    """What a published pass decided: the wait of each first placement (a requeued run's
    original submit time is no measure of its wait), and each preemption by its reason."""
    for data in decided:
        if isinstance(data, PlaceCommand) and data.attempt == 1:
            workload = workloads.get(data.workload_id)
            if workload is not None:
                allocated = "true" if data.allocated else "false"
                wait = max(0.0, now - workload.submitted_at)
                SUBMIT_TO_PLACED.labels(data.pool, allocated).observe(wait)
        elif isinstance(data, PreemptCommand):
            PREEMPTIONS.labels(data.pool, data.decision.reason).inc()


def register(figures: SchedulerFigures) -> SchedulerFigures:
    """Report ``figures`` on this process's ``/metrics`` (once per process: the service)."""
    REGISTRY.register(figures)
    return figures
