"""What preemptions and repairs cost, from a simulation's outcome.

* lost GPU-hours: progress thrown away by stops (since each run's last checkpoint, or all of it
  for a job that cannot resume) plus the restarts paid by resumed runs; goodput is the useful
  share of busy GPU-hours, ``(busy - lost) / busy``;
* how preemptions fall on jobs: the p99 and the maximum number of preemptions of one job (a
  rate per GPU-hour can hide a few jobs preempted over and over);
* maintenance: time from cordon to empty per repair (p50, p90), and the stuck drains, nodes
  not empty within the cap, each one a human who had to step in.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from events.times import HOUR
from services.simulator.engine import SimulationOutcome
from services.simulator.stats import percentile


def lost_seconds_by_budget(outcome: SimulationOutcome) -> dict[str, tuple[float, float]]:
    """Budget -> (GPU-seconds of discarded progress, GPU-seconds of restarts)."""
    lost: dict[str, tuple[float, float]] = {}
    for run in outcome.runs.values():
        if run.discarded_s or run.restart_s:
            discarded, restart = lost.get(run.job.budget, (0.0, 0.0))
            lost[run.job.budget] = (
                discarded + run.job.gpus * run.discarded_s,
                restart + run.job.gpus * run.restart_s,
            )
    return lost


def cost_figures(outcome: SimulationOutcome, busy_s: float) -> dict[str, Any]:
    """Lost GPU-hours, goodput and how preemptions spread over jobs; ``busy_s`` is the
    GPU-seconds occupied over the period (allocated and unallocated)."""
    by_budget = lost_seconds_by_budget(outcome)
    discarded = sum(d for d, _ in by_budget.values())
    restart = sum(r for _, r in by_budget.values())
    per_job = Counter(p.workload_id for p in outcome.preemptions)
    counts = [float(per_job.get(job_id, 0)) for job_id in outcome.runs]
    cost = outcome.config.cost
    return {
        "preemption_cost": cost.describe(),
        "busy_gpu_hours": busy_s / HOUR,
        "lost_gpu_hours": (discarded + restart) / HOUR,
        "lost_work_gpu_hours": discarded / HOUR,
        "restart_gpu_hours": restart / HOUR,
        "goodput": (busy_s - discarded - restart) / busy_s if busy_s > 0 else 1.0,
        "interruptions": len(outcome.interruptions),
        "runs_lost": sum(1 for i in outcome.interruptions if i.cause == "lost"),
        "wasted_per_interruption_max_s": max(
            (i.loss.wasted_s for i in outcome.interruptions), default=0.0
        ),
        "preemptions_per_job_p99": percentile(counts, 99),
        "max_preemptions_of_a_job": int(max(counts, default=0.0)),
        "jobs_preempted": len(per_job),
    }


def maintenance_figures(outcome: SimulationOutcome) -> dict[str, Any]:
    """Per repair request: time to drain, and whether it got stuck. Figures are None when the
    scenario sent no node for repair, rather than a 0 that reads as "instant"."""
    config = outcome.config.maintenance
    cap = float(config.stuck_after_s)
    times = [d.time_to_drain(outcome.end, cap) for d in outcome.drains]
    return {
        "maintenance": config.describe(),
        "repairs": len(outcome.drains),
        "repairs_merged": outcome.repairs_merged,
        "drain_p50_s": percentile(times, 50) if times else None,
        "drain_p90_s": percentile(times, 90) if times else None,
        "drain_max_s": max(times) if times else None,
        "stuck_drains": sum(1 for d in outcome.drains if d.stuck),
        "drains_unfinished": sum(1 for d in outcome.drains if d.drained_at is None and not d.stuck),
        "drain_preemptions": sum(1 for p in outcome.preemptions if p.reason == "drain"),
    }
