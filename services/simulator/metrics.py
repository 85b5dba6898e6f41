"""The measures of docs/design.md section 6, computed from a simulation's outcome.

* owed GPU-hours delivered: each hour a budget is owed ``min(share x capacity, its demand that
  hour)`` (:func:`owed_by_hour`); per budget ``min(1, delivered / owed)`` over the period; overall
  ``sum(min(delivered_b, owed_b)) / sum(owed_b)``; and the strict hourly version
  ``sum_h min(delivered, owed) / sum_h owed``;
* occupancy: busy GPU-hours / capacity GPU-hours over the hours where demand exceeds capacity;
* queue waits (submit to first start), all jobs and debug jobs; jobs never started by the end
  count with their wait so far (a lower bound), so a starved queue cannot look fast;
* preemptions per 1,000 delivered GPU-hours, and contract violations (must be 0);
* weekly attainment, per budget and week (``weekly.py``), what the 7-day promise is about;
* blocks per gang over several nodes, and the share placed in the fewest blocks
  (``topology.py``, with ``--topology``);
* what preemptions and repairs cost: lost GPU-hours, goodput, preemptions per job, drains
  (``costs.py``);
* how far start estimates made at submission were off (``estimates.py``).
"""

from __future__ import annotations

import math
from typing import Any

from events.times import HOUR
from projections.figures import Bins, PoolHistory, pool_figures
from projections.usage_window import bucket_of
from services.simulator.costs import cost_figures, lost_seconds_by_budget, maintenance_figures
from services.simulator.engine import POOL, Run, SimulationOutcome
from services.simulator.stats import percentile
from services.simulator.topology import topology_figures
from services.simulator.weekly import WEEK_HOURS, budget_weeks, weekly_summary

__all__ = ["compute_metrics", "owed_by_hour", "percentile", "queue_waits"]


def queue_waits(outcome: SimulationOutcome, debug_only: bool = False) -> list[float]:
    """Submit to first start, sorted; never-started jobs count with their wait up to the end (or
    up to their cancel)."""
    return sorted(
        max(0.0, _wait_end(run, outcome.end) - run.job.arrival)
        for run in outcome.runs.values()
        if run.debug or not debug_only
    )


def _wait_end(run: Run, end: float) -> float:
    if run.first_start is not None:
        return run.first_start
    return run.cancelled_at if run.cancelled_at is not None else end


def hours_of(outcome: SimulationOutcome) -> range:
    return range(bucket_of(outcome.start), bucket_of(outcome.end) + 1)


def busy_seconds_by_hour(outcome: SimulationOutcome) -> dict[int, float]:
    """GPU-seconds occupied (allocated and unallocated) per hour of the period."""
    busy = dict.fromkeys(hours_of(outcome), 0.0)
    for budget in outcome.demand:
        for series in outcome.usage.hourly(POOL, budget):
            for hour, seconds in series.items():
                if hour in busy:
                    busy[hour] += seconds
    return busy


def hour_length(outcome: SimulationOutcome, bucket: int) -> float:
    """Seconds of ``bucket`` inside the evaluation period (first and last are partial)."""
    lo = max(outcome.start, bucket * HOUR)
    hi = min(outcome.end, (bucket + 1) * HOUR)
    return max(0.0, hi - lo)


def owed_by_hour(outcome: SimulationOutcome) -> dict[str, dict[int, float]]:
    """Budget -> hour -> GPU-seconds owed: :func:`projections.figures.pool_figures` (the one
    computation every surface asks) over hourly bins of the period, from the demand and
    capacity the simulation recorded, min(share x capacity, demand) moment by moment."""
    hours = list(hours_of(outcome))
    bounds = [max(outcome.start, hour * HOUR) for hour in hours] + [outcome.end]
    history = PoolHistory(POOL, outcome.capacity_steps, dict(outcome.demand_steps))
    figures = pool_figures(history, outcome.tree, Bins(tuple(bounds), outcome.end))
    owed: dict[str, dict[int, float]] = {b: {} for b in outcome.demand}
    for budget in owed:
        series = figures.budgets.get(budget)
        if series is not None:
            owed[budget] = {hour: s for hour, s in zip(hours, series.owed, strict=True) if s}
    return owed


def compute_metrics(outcome: SimulationOutcome) -> dict[str, Any]:
    capacity = outcome.capacity_gpus
    hours = hours_of(outcome)
    budgets: dict[str, dict[str, Any]] = {}
    owed_total = delivered_capped = hourly_min = 0.0
    busy_by_hour = busy_seconds_by_hour(outcome)
    demand_by_hour = dict.fromkeys(hours, 0.0)
    owed_hourly = owed_by_hour(outcome)
    delivered_hourly: dict[str, dict[int, float]] = {}
    lost = lost_seconds_by_budget(outcome)
    for budget in sorted(outcome.demand):
        allocated, _unallocated = outcome.usage.hourly(POOL, budget)
        delivered_hourly[budget] = allocated
        share = outcome.shares.get(budget, 0.0)
        owed = delivered = hourly = 0.0
        for hour in hours:
            demand_s = outcome.demand[budget].get(hour, 0.0)
            got_s = allocated.get(hour, 0.0)
            owed_s = owed_hourly[budget].get(hour, 0.0)
            owed += owed_s
            delivered += got_s
            hourly += min(got_s, owed_s)
            demand_by_hour[hour] += demand_s
        owed_total += owed
        delivered_capped += min(delivered, owed)
        hourly_min += hourly
        budgets[budget] = {
            "share": share,
            "owed_gpu_hours": owed / HOUR,
            "delivered_gpu_hours": delivered / HOUR,
            "owed_delivered": min(1.0, delivered / owed) if owed > 0 else 1.0,
            "owed_delivered_hourly": hourly / owed if owed > 0 else 1.0,
            "demand_gpu_hours": sum(outcome.demand[budget].values()) / HOUR,
            "lost_gpu_hours": sum(lost.get(budget, (0.0, 0.0))) / HOUR,
        }
    weeks = budget_weeks(
        list(hours),
        lambda hour: hour_length(outcome, hour),
        owed_hourly,
        delivered_hourly,
        outcome.demand,
    )
    for budget, row in budgets.items():
        mine = [w for w in weeks if w.budget == budget]
        row["weekly"] = [w.as_dict(capacity) for w in mine]
        row["owed_delivered_weekly"] = weekly_summary(mine, capacity)["owed_delivered_weekly"]
    saturated = [h for h in hours if demand_by_hour[h] > capacity * hour_length(outcome, h) > 0]
    busy_saturated = sum(busy_by_hour[h] for h in saturated)
    capacity_saturated = sum(capacity * hour_length(outcome, h) for h in saturated)
    waits = queue_waits(outcome)
    debug_waits = queue_waits(outcome, debug_only=True)
    delivered_hours = sum(b["delivered_gpu_hours"] for b in budgets.values())
    capacity_hours = capacity * (outcome.end - outcome.start) / HOUR
    overall = {
        "owed_delivered": delivered_capped / owed_total if owed_total else 1.0,
        "owed_delivered_hourly": hourly_min / owed_total if owed_total else 1.0,
        "occupancy_over_demand": busy_saturated / capacity_saturated if capacity_saturated else 0.0,
        "saturated_hours": len(saturated),
        "occupancy_overall": sum(busy_by_hour.values()) / (capacity_hours * HOUR)
        if capacity_hours
        else 0.0,
        "debug_wait_p50_s": percentile(debug_waits, 50),
        "debug_wait_p90_s": percentile(debug_waits, 90),
        "wait_p50_s": percentile(waits, 50),
        "wait_p90_s": percentile(waits, 90),
        "preemptions": len(outcome.preemptions),
        "preemptions_per_1000_gpu_hours": 1000 * len(outcome.preemptions) / delivered_hours
        if delivered_hours
        else 0.0,
        "contract_violations": sum(1 for p in outcome.preemptions if p.violates_contract),
        "jobs": len(outcome.runs),
        "debug_jobs": len(debug_waits),
        "never_started": sum(1 for r in outcome.runs.values() if r.first_start is None),
        "owed_gpu_hours": owed_total / HOUR,
        "delivered_gpu_hours": delivered_hours,
        "budgets_at_95": sum(
            1 for b in budgets.values() if b["owed_gpu_hours"] > 0 and b["owed_delivered"] >= 0.95
        ),
        "budgets_with_demand": sum(1 for b in budgets.values() if b["owed_gpu_hours"] > 0),
        "worst_budget_owed_delivered": min(
            (b["owed_delivered"] for b in budgets.values() if b["owed_gpu_hours"] > 0),
            default=1.0,
        ),
        "weeks": math.ceil(len(hours) / WEEK_HOURS),
        **weekly_summary(weeks, capacity),
        **cost_figures(outcome, sum(busy_by_hour.values())),
        **maintenance_figures(outcome),
        **topology_figures(outcome.config.topology, outcome.gang_blocks),
        **start_estimate_figures(outcome),
        "passes": outcome.passes,
        "wall_seconds": outcome.wall_seconds,
    }
    return {"overall": overall, "budgets": budgets}


def start_estimate_figures(outcome: SimulationOutcome) -> dict[str, Any]:
    """How far start estimates made at submission were off (``estimates.py``); nothing for a
    run that made none (the baselines: the estimate follows the fair-share pass)."""
    if outcome.start_estimates is None:
        return {}
    starts = {workload_id: run.first_start for workload_id, run in outcome.runs.items()}
    figures = outcome.start_estimates.figures(starts)
    figures["time_limited_runs"] = sum(1 for run in outcome.runs.values() if run.time_limited)
    return figures
