"""Where the time from a Job to its bound pods went, read back from the log after the load:
the envelope time of each Job's ``WorkloadSubmitted`` (the agent stated it, in the round that
saw the Job), of its ``PlaceCommand`` (the scheduler's pass that placed it) and of its
``WorkloadStarted`` (the agent's round that took the placement and began binding). Every
process runs on this machine's clock, so these times compare with the watch's.

They split submit-to-bound into its hops, which says what to look at when binding does not
keep up: the agent seeing the Job, the scheduler deciding, or the agent binding. Envelope times
are those of the round (agent) or pass (scheduler) that decided, taken at its start: the Jobs
one round took share one time, so a hop's p50 and p99 are often equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import Topics
from events.models import PlaceCommand, WorkloadStarted, WorkloadSubmitted
from services.bench.kubernetes.watch import PodTimes
from services.bench.latency.bench import percentiles


def workload_times(bootstrap: str, topics: Topics, namespace: str) -> dict[str, dict[str, float]]:
    """Per kind (``submitted``, ``placed``, ``started``): Job name -> the first such event's
    envelope time (epoch seconds), for the native Jobs of ``namespace``."""
    from services.bench.chaos.checks import read_log

    deliveries = read_log(bootstrap, topics).deliveries
    jobs: dict[str, str] = {}  # workload id -> Job name
    for delivery in deliveries:
        data = delivery.envelope.data
        if isinstance(data, WorkloadSubmitted):
            name = str(data.spec.get("name", ""))
            if name.startswith(f"{namespace}/"):
                jobs[data.workload_id] = name.split("/", 1)[1]
    times: dict[str, dict[str, float]] = {"submitted": {}, "placed": {}, "started": {}}
    for delivery in deliveries:
        data = delivery.envelope.data
        if isinstance(data, WorkloadSubmitted):
            kind = "submitted"
        elif isinstance(data, PlaceCommand):
            kind = "placed"
        elif isinstance(data, WorkloadStarted):
            kind = "started"
        else:
            continue
        job = jobs.get(data.workload_id)
        if job is None:
            continue
        at = delivery.envelope.time.timestamp()
        times[kind][job] = min(at, times[kind].get(job, at))
    return times


def hops(
    times: Mapping[str, Mapping[str, float]],
    sent: Mapping[str, float],
    pods: Mapping[str, PodTimes],
) -> dict[str, Any]:
    """p50/p99/max of each hop: per Job, its create call to submitted (the agent), submitted
    to placed (the scheduler), placed to started (the agent taking the placement: the time of
    the round that began binding it, as the agent dates its start); per pod, placed to bound
    (the agent binding it)."""
    # the load's Jobs only (not the warm-up's)
    submitted, placed, started = (
        {job: at for job, at in times[kind].items() if job in sent}
        for kind in ("submitted", "placed", "started")
    )

    def between(first: Mapping[str, float], then: Mapping[str, float]) -> list[float]:
        return [then[job] - first[job] for job in first if job in then]

    return {
        "job_to_submitted_ms": percentiles(between(sent, submitted)),
        "submitted_to_placed_ms": percentiles(between(submitted, placed)),
        "placed_to_started_ms": percentiles(between(placed, started)),
        "placed_to_bound_ms": percentiles(
            [
                pod.bound_at - placed[pod.job]
                for pod in pods.values()
                if pod.bound_at is not None and pod.job in placed
            ]
        ),
        "placed": {
            "count": len(placed),
            "span_s": round(max(placed.values()) - min(placed.values()), 3) if placed else None,
        },
    }
