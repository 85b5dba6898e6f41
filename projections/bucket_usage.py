"""What the ledger charged per report bucket, as the projector keeps it: per bucket (hour,
day, week and month), pool, leaf budget, submitter and line (charges or corrections), the
GPU-seconds charged allocated and free, and how many workloads have entries there.

The charges, users and utilisation reports show exactly these sums (:mod:`services.reports.
compute`). Summed GPU-seconds add up across buckets, but a workload count does not: a workload
that ran all day has 24 hourly entries and counts once in the day. So the projector counts a
workload in a bucket the first time one of its entries lands there, which it can tell from the
workload's own entries (a few dozen, read by its index), and a report reads buckets x budgets
x pools rows, whatever ran in them.

Pure: the projector's upkeep, the migration that builds these sums from the ledger entries
already projected, and the tests all file entries here, one way. The read models keep them in
the table ``period_usage`` (its column ``period_start``: the bucket's start), named before a
report's bucket had a name of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from projections.report_buckets import BUCKETS, Bucket, floor

#: Who a workload's entries are filed under until its submission is projected.
UNKNOWN_SUBMITTER = "(unknown)"


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry as the reports count it."""

    workload_id: str
    pool: str
    budget: str
    bucket_start: int
    #: Charged to the budget (else free burst use, not charged).
    allocated: bool
    #: A correction of an earlier entry (its own line in the reports).
    correction: bool
    #: As it adds to the budget: a reversal (capacity debited) is negative.
    gpu_s: int


#: Where usage is summed, one row: (bucket kind, bucket start, pool, leaf budget, submitter,
#: correction)
UsageKey = tuple[str, int, str, str, str, bool]


@dataclass
class Sums:
    allocated: int = 0
    unallocated: int = 0
    workloads: int = 0

    def add(self, other: Sums, sign: int = 1) -> None:
        self.allocated += sign * other.allocated
        self.unallocated += sign * other.unallocated
        self.workloads += sign * other.workloads


def _places(entry: Entry) -> list[tuple[Bucket, int, str, str, bool]]:
    """Every bucket the entry falls in, with where it counts (not yet by whom)."""
    return [
        (kind, floor(entry.bucket_start, kind), entry.pool, entry.budget, entry.correction)
        for kind in BUCKETS
    ]


def added(
    new: Iterable[Entry], earlier: Iterable[Entry], submitter_of: Callable[[str], str]
) -> dict[UsageKey, Sums]:
    """What ``new`` entries add to the sums, given the ``earlier`` entries of the same
    workloads already counted: every entry's GPU-seconds, and each workload once in each
    bucket, pool, budget and line where it had no entry before."""
    seen = {(e.workload_id, *place) for e in earlier for place in _places(e)}
    found: dict[UsageKey, Sums] = {}
    for entry in new:
        who = submitter_of(entry.workload_id)
        for place in _places(entry):
            kind, start, pool, budget, correction = place
            sums = found.setdefault((kind, start, pool, budget, who, correction), Sums())
            if entry.allocated:
                sums.allocated += entry.gpu_s
            else:
                sums.unallocated += entry.gpu_s
            if (entry.workload_id, *place) not in seen:
                seen.add((entry.workload_id, *place))
                sums.workloads += 1
    return found
