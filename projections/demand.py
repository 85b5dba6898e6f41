"""Demand over time: the GPUs each leaf budget's allocated work wanted, per pool.

What a budget is *owed* is not its share of the cluster but ``min(share x capacity, demand)``
moment by moment (docs/design.md section 6; the rule is :mod:`projections.owed`): a team that asked
for nothing is owed nothing. Demand is a step function per (pool, leaf budget); it changes when
allocated work is submitted, placed (from every acceptable pool to the one it runs in),
requeued, or ends.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping

from projections.cluster_state import ClusterState, WorkloadState
from projections.owed import owed as integrate_owed

#: Statuses in which a workload still wants GPUs (preempted/lost only while awaiting requeue).
_WAITING = ("pending",)
_HOLDING = ("placed", "running")


def wanted(
    cluster: ClusterState, workload: WorkloadState | None, awaiting_requeue: bool = True
) -> dict[str, int]:
    """GPUs ``workload`` wants now, per pool: in every acceptable pool while it waits, in its
    own pool while it holds GPUs, nowhere once it has ended or if it is unallocated.
    ``awaiting_requeue``: whether work stopped and not yet requeued (the next pass does it)
    counts as waiting."""
    if workload is None or not workload.allocated:
        return {}
    if workload.status in _HOLDING and workload.pool is not None:
        return {workload.pool: workload.gpus}
    waiting = workload.status in _WAITING or (
        awaiting_requeue and workload.workload_id in cluster.awaiting_requeue
    )
    return dict.fromkeys(workload.pools, workload.gpus) if waiting else {}


class DemandHistory:
    def __init__(self) -> None:
        #: (pool, leaf budget) -> [(time, GPUs wanted from then on)], in time order.
        self.steps: dict[tuple[str, str], list[tuple[float, int]]] = {}

    def change(
        self, budget: str, at: float, before: Mapping[str, int], after: Mapping[str, int]
    ) -> None:
        for pool in sorted({*before, *after}):
            delta = after.get(pool, 0) - before.get(pool, 0)
            if delta:
                steps = self.steps.setdefault((pool, budget), [])
                level = steps[-1][1] if steps else 0
                if steps and at < steps[-1][0]:
                    # A late fact: shift every later level (steps stay in time order).
                    i = bisect_right(steps, (at, float("inf")))
                    level = steps[i - 1][1] if i else 0
                    steps.insert(i, (at, level + delta))
                    for j in range(i + 1, len(steps)):
                        steps[j] = (steps[j][0], steps[j][1] + delta)
                else:
                    steps.append((at, level + delta))

    def level(self, pool: str, budget: str, at: float) -> int:
        steps = self.steps.get((pool, budget), [])
        i = bisect_right(steps, (at, float("inf")))
        return steps[i - 1][1] if i else 0

    def owed(
        self,
        pool: str,
        lo: float,
        hi: float,
        entitled_gpus: Callable[[float], Mapping[str, float]],
        breaks: Iterable[float],
    ) -> dict[str, float]:
        """GPU-seconds owed to every leaf budget in ``[lo, hi)`` (:func:`projections.owed.owed`).
        ``entitled_gpus(t)`` is share x capacity per budget at ``t``; ``breaks`` are the instants
        it changes at. Every leaf's steps cut every leaf's pieces, so that ``entitled_gpus`` is
        asked once per piece for all the leaves."""
        leaves = sorted(budget for (p, budget) in self.steps if p == pool)
        if not leaves or hi <= lo:
            return {}
        cuts = {lo, hi, *(b for b in breaks if lo < b < hi)}
        for leaf in leaves:
            cuts.update(t for t, _ in self.steps[(pool, leaf)] if lo < t < hi)

        def wanted(a: float, b: float) -> dict[str, float]:
            return {leaf: self.level(pool, leaf, a) * (b - a) for leaf in leaves}

        return integrate_owed(sorted(cuts), wanted, entitled_gpus)
