"""How good start estimates are: the estimate made at submission against the real start.

At each arrival the replay asks :func:`~scheduling.start_estimate.estimate_starts`
(the very function behind ``GET /workloads/{id}`` and ``fairshare queue --start``) when the new
job will start, on the state right after its submission is folded and before the pass that
follows it, as a user who asks at once would be told. A deterministic sample keeps long replays
fast: every ``every``-th job of the trace (its position in arrival order), 1 = every job.

Figures (``metrics.json``, ``overall``): ``start_estimate_error_p50_s`` and ``_p90_s``, the
absolute error ``|estimate - first start|`` over the sampled jobs that started before the end
and had an estimate; ``start_estimates`` (how many), ``start_estimates_early_share`` (estimate
before the real start: the job was overtaken by work that came later, or the order moved);
``start_estimates_beyond_horizon`` (no estimate: not placed within the horizon).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from scheduling.scheduling_pass import PassContext, UsageSource
from scheduling.start_estimate import estimate_starts
from services.simulator.stats import percentile


@dataclass
class StartEstimates:
    """The estimates made at submission, per sampled job (None: beyond the horizon)."""

    every: int = 1
    made: dict[str, float | None] = field(default_factory=dict)
    #: Wall seconds spent estimating (the one figure here that is not deterministic).
    wall_s: float = 0.0

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError("start estimates: sample every N >= 1 jobs")

    def sampled(self, index: int) -> bool:
        return index % self.every == 0

    def at_submission(
        self,
        cluster: ClusterState,
        tree: BudgetTree,
        usage: UsageSource,
        ctx: PassContext,
        workload_ids: list[str],
    ) -> None:
        """Estimate the start of the sampled jobs just submitted, on the state at ``ctx.now``
        with the tuning the pass decides with."""
        if not workload_ids:
            return
        started = time.perf_counter()
        found = estimate_starts(
            cluster,
            tree,
            usage,
            ctx.now,
            limits=ctx.time_limits,
            debug_lanes=ctx.debug_lanes,
            window_s=ctx.window_s,
            targets=workload_ids,
        )
        self.made.update({workload_id: e.at for workload_id, e in found.items()})
        self.wall_s += time.perf_counter() - started

    def figures(self, first_starts: dict[str, float | None]) -> dict[str, Any]:
        errors: list[float] = []
        early = beyond = 0
        for workload_id, estimate in self.made.items():
            start = first_starts.get(workload_id)
            if estimate is None:
                beyond += 1
                continue
            if start is None:
                continue
            errors.append(abs(estimate - start))
            early += estimate < start
        return {
            "start_estimate_error_p50_s": percentile(errors, 50),
            "start_estimate_error_p90_s": percentile(errors, 90),
            "start_estimates": len(errors),
            "start_estimates_early_share": early / len(errors) if errors else 0.0,
            "start_estimates_beyond_horizon": beyond,
            "start_estimates_every": self.every,
            "start_estimates_wall_s": self.wall_s,
        }
