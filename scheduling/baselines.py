"""Baseline policies the simulator measures Fairshare against, in the same run.

All four are non-preemptive list schedulers with backfill (a job that does not fit is skipped,
the next one is tried), sharing the placement code, the state folds and the decision records of
the fair-share pass, so that only the *ordering* differs. Like Slurm, they drain a cordoned node
by letting its jobs end, never by preempting them:

* ``fifo``: arrival order across all budgets;
* ``priority``: strict priority by budget share (larger share first), then arrival;
* ``quota``: arrival order, but a budget never holds more than its static quota
  (``round(share x capacity)``, at least one job at a time), no borrowing of idle GPUs;
* ``slurm-classic``: Slurm's classic fair-share factor ``2^(-U/S)`` (U: the budget's share of
  all usage in the window, S: its normalised share), highest factor first, then arrival.
"""

from __future__ import annotations

from collections.abc import Callable

from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import QueueKind, WorkloadState
from scheduling.memos import PassMemos
from scheduling.placement import find_placement, largest_node
from scheduling.scheduling_pass import (
    PassContext,
    PassResult,
    SchedulingPass,
    UsageSource,
)

BASELINES = ("fifo", "priority", "quota", "slurm-classic")

SortKey = tuple[float, ...]


def _run(
    name: str,
    cluster: ClusterState,
    tree: BudgetTree,
    usage: UsageSource,
    ctx: PassContext,
) -> PassResult:
    scheduling = SchedulingPass(cluster, tree, usage, ctx)
    # Like Slurm's drain: a cordoned node takes no new work and empties only as jobs end.
    scheduling.maintenance(drain=False)
    for pool in sorted(cluster.indexes.pools):
        _schedule_pool(name, scheduling, pool, usage)
    return scheduling.result


def _schedule_pool(name: str, scheduling: SchedulingPass, pool: str, usage: UsageSource) -> None:
    cluster, ctx = scheduling.cluster, scheduling.ctx
    queues = cluster.indexes.pending.get(pool, {})
    capacity = cluster.capacity(pool)
    if not queues or capacity <= 0:
        return
    index = cluster.indexes.pools[pool]
    node_size = largest_node(cluster, pool)
    shares = scheduling.tree.shares(pool, ctx.now)
    holding: dict[str, int] = {}
    for workload in cluster.active_in(pool):
        if workload.allocated:
            holding[workload.budget] = holding.get(workload.budget, 0) + workload.gpus
    factor: dict[str, float] = {}
    if name == "slurm-classic":
        used = usage(pool)
        total = sum(used.values()) or 1.0
        leaf_share_total = sum(shares.get(b, 0.0) for b in queues) or 1.0
        for budget in queues:
            normalised_share = shares.get(budget, 0.0) / leaf_share_total
            normalised_usage = used.get(budget, 0.0) / total
            factor[budget] = (
                2 ** (-normalised_usage / normalised_share) if normalised_share > 0 else 0.0
            )

    def key(workload: WorkloadState) -> SortKey:
        if name == "priority":
            return (-shares.get(workload.budget, 0.0), workload.submitted_at)
        if name == "slurm-classic":
            return (-factor.get(workload.budget, 0.0), -workload.priority, workload.submitted_at)
        return (workload.submitted_at,)

    live = {
        (budget, kind)
        for budget, kinds in queues.items()
        for kind, queue in kinds.items()
        if queue and budget in shares
    }
    while live and index.max_free() > 0:
        best: tuple[SortKey, str, tuple[str, QueueKind]] | None = None
        for slot in live:
            budget, kind = slot
            allocated = kind[0]
            queue = queues[budget].get(kind)
            if not queue:
                continue
            workload_id = queue[0][3]
            # Allocated work goes first, as in the fair-share pass.
            candidate = (
                (0.0 if allocated else 1.0, *key(cluster.workloads[workload_id])),
                workload_id,
                slot,
            )
            if best is None or candidate[:2] < best[:2]:
                best = candidate
        if best is None:
            return
        _key, workload_id, slot = best
        workload = cluster.workloads[workload_id]
        if name == "quota" and workload.allocated:
            quota = max(1, round(shares.get(workload.budget, 0.0) * capacity))
            held = holding.get(workload.budget, 0)
            if held and held + workload.gpus > quota:
                live.discard(slot)
                continue
        placement = find_placement(cluster, pool, workload.gpus, workload.gang, node_size)
        if placement is None:
            live.discard(slot)
            continue
        decision = scheduling.decision(
            "fairshare" if workload.allocated else "burst",
            None,
            (),
            detail=f"baseline policy {name}",
        )
        scheduling.place(workload, pool, placement, decision)
        if workload.allocated:
            holding[workload.budget] = holding.get(workload.budget, 0) + workload.gpus


def baseline_policy(
    name: str,
) -> Callable[[ClusterState, BudgetTree, UsageSource, PassContext, PassMemos], PassResult]:
    """The policy ``name``, called as :func:`~.scheduling_pass.run_pass` is; it needs no
    memos (list scheduling keeps nothing between passes), so it ignores the ones it is given."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {', '.join(BASELINES)}")

    def policy(
        cluster: ClusterState,
        tree: BudgetTree,
        usage: UsageSource,
        ctx: PassContext,
        memos: PassMemos | None = None,
    ) -> PassResult:
        return _run(name, cluster, tree, usage, ctx)

    return policy
