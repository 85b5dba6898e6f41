"""Usage snapshots from charges: what the scheduler (and the API's "delivered") read.

A snapshot carries, per pool, each leaf budget's allocated and unallocated GPU-seconds within
the window, as the ledger has confirmed them, with the log position it was computed at. The
charging service publishes them as it goes; the simulator publishes them hourly into a
simulated run's log, so both logs carry the same kind of numbers made the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from events.models import BudgetUsage, InputPosition, LedgerCharge, UsageSnapshot
from events.times import HOUR
from events.types import utc_epoch_seconds
from projections.cluster_state import ClusterState
from projections.figures import OpenRun
from projections.usage_window import UsageWindow, bucket_of


def count_charge(usage: UsageWindow, charge: LedgerCharge) -> None:
    """Add a posted charge (a correction subtracts) to the window's hour buckets."""
    usage.add_seconds(
        charge.pool,
        charge.budget,
        bucket_of(charge.bucket_start.timestamp()),
        charge.signed_gpu_seconds,
        charge.kind == "allocated",
    )


def usage_snapshots(
    usage: UsageWindow, now: float, as_of: Sequence[InputPosition] = ()
) -> list[UsageSnapshot]:
    """One snapshot per pool of the window ending at ``now``."""
    window_start = usage.window_first_bucket(now) * HOUR
    return [
        UsageSnapshot(
            pool=pool,
            window_start=datetime.fromtimestamp(window_start, UTC),
            window_end=datetime.fromtimestamp(max(now, window_start + 1), UTC),
            as_of=tuple(as_of),
            budgets=tuple(
                BudgetUsage(
                    budget=budget,
                    allocated_gpu_s=int(usage.allocated(pool, budget, now)),
                    unallocated_gpu_s=int(usage.unallocated(pool, budget, now)),
                )
                for budget in usage.budgets(pool)
            ),
        )
        for pool in usage.pools()
    ]


class RankedUsage(dict[str, float]):
    """GPU-seconds per leaf budget, as a pass ranks on them, and the end of the usage
    snapshot they start from (None: no snapshot yet), which decision records name."""

    as_of: datetime | None = None


def usage_to_rank(
    snapshot: UsageSnapshot | None, cluster: ClusterState, pool: str, now: float
) -> RankedUsage:
    """Allocated GPU-seconds per leaf budget in the window at ``now``, as every pass ranks
    budgets on them: the charged usage of the latest snapshot, plus what running allocated work
    has used since the hour the snapshot reached (charges post per closed hour, so that part
    is not in it yet).

    Only facts of the log go in (a snapshot, the runs the cluster fold knows), so the live
    scheduler, the simulator and the decision audit, handed the same log, rank alike: the
    simulator once ranked on its own exact usage, which the log does not carry, and an audit
    of its log could not re-derive the passes where the two orders differed."""
    usage = RankedUsage()
    charged_until = 0.0
    if snapshot is not None:
        usage.as_of = snapshot.window_end
        for entry in snapshot.budgets:
            usage[entry.budget] = float(entry.allocated_gpu_s)
        charged_until = utc_epoch_seconds(snapshot.window_end) // HOUR * HOUR
    for workload_id in sorted(cluster.active.get(pool, ())):
        workload = cluster.workloads[workload_id]
        if not workload.allocated or workload.started_at is None:
            continue
        run = OpenRun(workload.budget, True, workload.gpus, workload.started_at, charged_until)
        usage[workload.budget] = usage.get(workload.budget, 0.0) + run.uncharged(
            workload.started_at, now
        )
    return usage
