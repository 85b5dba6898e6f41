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
