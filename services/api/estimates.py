"""Time limits and start estimates as the API answers them (``GET /workloads/{id}``,
``GET /queue?start=true``).

The rules are the scheduling core's (``time_limits.py``, ``start_estimate.py``); this module
reads them with what the leader stated (``SchedulerSettings``: the pools' limits, the debug
lanes; the system defaults before any leader stated them) and the usage the queue ranks on.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from projections.cluster_types import WorkloadState
from projections.live_state import LiveState
from scheduling.scheduling_pass import PassContext
from scheduling.settings import time_limits_of, with_settings
from scheduling.start_estimate import StartEstimate, estimate_starts
from scheduling.time_limits import expected_end, limit_s
from services.api.sentences import iso


@dataclass(frozen=True)
class RunLimit:
    """The limit of a workload's current run, and when it ends at the latest."""

    limit_s: int | None
    ends_at: str | None


def run_limit(state: LiveState, workload: WorkloadState, now: float) -> RunLimit:
    if workload.pool is None or workload.status not in ("placed", "running"):
        return RunLimit(None, None)
    limits = time_limits_of(state.settings)
    return RunLimit(
        limit_s(workload, workload.pool, limits), iso(expected_end(workload, limits, now))
    )


@dataclass(frozen=True)
class Estimate:
    """When a pending workload should start, on what that rests, and at the latest (each run
    lasting its limit; None where not asked for); ``at`` None: beyond the horizon."""

    at: float | None
    basis: str
    latest: float | None


def start_estimates(
    state: LiveState,
    now: float,
    window_s: int,
    targets: Collection[str] | None = None,
    *,
    latest: bool = True,
) -> dict[str, Estimate]:
    """When each pending workload of ``targets`` (all when None) should start: the forward run
    on what finished runs say, and, with ``latest``, again with every run to its limit (the
    bound; a second forward run, for callers that show it)."""
    ctx = PassContext(now=now, window_s=window_s)
    if state.settings is not None:
        ctx = with_settings(ctx, state.settings)

    def forward(to_limits: bool) -> dict[str, StartEstimate]:
        return estimate_starts(
            state.cluster,
            state.tree,
            lambda pool: state.usage_in_window(pool, now),
            now,
            limits=ctx.time_limits,
            debug_lanes=ctx.debug_lanes,
            window_s=ctx.window_s,
            targets=targets,
            to_limits=to_limits,
        )

    expected = forward(False)
    bound = forward(True) if latest else {}
    found: dict[str, Estimate] = {}
    for workload_id, estimate in expected.items():
        at, last = estimate.at, (bound[workload_id].at if latest else None)
        if at is not None and last is not None:
            at = min(at, last)  # never later than the bound says
        found[workload_id] = Estimate(at, estimate.basis.word, last)
    return found
