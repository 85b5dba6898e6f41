"""Gauges of the pools, the budgets and the queues, for the API's ``/metrics``.

An operator graphs what the dashboard shows: each pool's capacity and the GPUs funded and
burst work hold, each budget's window usage, demand and what it is owed now, and each pool's
queue by the reason that decides each workload's wait. They were only on the dashboard (and
the scheduler's and charging's own ports report their own work: pass times, lag, charges), so
an alert on "lab/vision owed GPUs and holding none for an hour" needed a scraper of the JSON.

Computed when scraped, from the API's view, by the functions behind ``GET /budgets`` and
``GET /queue`` (``queries.budget_report``, ``waiting.pending_queue``): one figure, whatever
reads it. A pool's queue is examined up to :data:`REASONS_EXAMINED` workloads for reasons
(the rest counted as ``not-examined``), so that a scrape stays cheap with 100,000 pending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from scheduling.why_pending import primary
from services.api import queries
from services.api.waiting import pending_queue

#: Pending workloads per pool whose deciding reason a scrape works out.
REASONS_EXAMINED = 2_000


class ViewGauges:
    """A Prometheus collector over ``view`` (``collect`` runs at each scrape)."""

    def __init__(self, view: Any, clock: Callable[[], float], window_s: int) -> None:
        self.view = view
        self.clock = clock
        self.window_s = window_s

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        capacity = GaugeMetricFamily(
            "fairshare_pool_capacity_gpus", "GPUs of the pool's nodes that are up", labels=["pool"]
        )
        held = GaugeMetricFamily(
            "fairshare_pool_held_gpus",
            "GPUs held by placed or running work, by kind (allocated: funded by a budget; "
            "unallocated: burst, free)",
            labels=["pool", "kind"],
        )
        usage = GaugeMetricFamily(
            "fairshare_budget_usage_gpu_seconds",
            "Allocated GPU-seconds of the budget's subtree in the fair-share window (what the "
            "scheduler ranks it by)",
            labels=["pool", "budget"],
        )
        demand = GaugeMetricFamily(
            "fairshare_budget_demand_gpus",
            "GPUs the subtree's pending and running allocated work wants now",
            labels=["pool", "budget"],
        )
        owed = GaugeMetricFamily(
            "fairshare_budget_owed_gpus",
            "GPUs the subtree is owed now: min(share x capacity, demand)",
            labels=["pool", "budget"],
        )
        queue = GaugeMetricFamily(
            "fairshare_queue_length",
            "Pending workloads of the pool by the reason that decides their wait "
            "(not-examined: beyond the first REASONS_EXAMINED in queue order)",
            labels=["pool", "reason"],
        )
        with self.view.read() as state:
            report = queries.budget_report(state, now, self.window_s)
            for pool in report.pools:
                capacity.add_metric([pool.pool], pool.capacity)
                funded = burst = 0
                for workload_id in state.cluster.active.get(pool.pool, ()):
                    workload = state.cluster.workloads[workload_id]
                    if workload.allocated:
                        funded += workload.gpus
                    else:
                        burst += workload.gpus
                held.add_metric([pool.pool, "allocated"], funded)
                held.add_metric([pool.pool, "unallocated"], burst)
                for reason, count in sorted(_reasons(state, pool.pool, now, self.window_s).items()):
                    queue.add_metric([pool.pool, reason], count)
            for budget in report.budgets:
                for pool_name, figures in budget.pools.items():
                    labels = [pool_name, budget.budget]
                    usage.add_metric(labels, figures.usage_gpu_s)
                    demand.add_metric(labels, figures.demand_gpus)
                    if figures.entitled_gpus is not None:
                        owed.add_metric(labels, float(figures.entitled_gpus))
        yield from (capacity, held, usage, demand, owed, queue)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # computed at each scrape: nothing to check at registration


def _reasons(state: Any, pool: str, now: float, window_s: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    pending = pending_queue(state, pool, now, window_s)
    for examined, (_position, _workload, found) in enumerate(pending.each(None)):
        if examined >= REASONS_EXAMINED:
            counts["not-examined"] = len(pending.ordered) - examined
            break
        deciding = primary(found)
        code = "none" if deciding is None else str(deciding.code)
        counts[code] = counts.get(code, 0) + 1
    return counts


class WithGauges:
    """The process's registry and ``gauges``, encoded as one exposition (one ``# EOF``)."""

    def __init__(self, registry: Any, gauges: ViewGauges | None) -> None:
        self.registry = registry
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        yield from self.registry.collect()
        if self.gauges is not None:
            yield from self.gauges.collect()
