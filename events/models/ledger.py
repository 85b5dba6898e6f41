"""Double-entry charges (topic: ledger, keyed by workload).

Each charge moves integer GPU-seconds from one account to another, so debits equal credits by
construction. Its id is derived from (workload, attempt, hour bucket, revision) — never random —
so that a replayed or duplicated heartbeat can only ever produce the same id, and a store that
keeps ids unique cannot double-post.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from events.models.base import EventData
from events.times import HOUR
from events.topics import TopicKind
from events.types import BudgetPath, DerivedId, GpuSeconds, Identifier, PoolName, UtcDateTime

ChargeKind = Literal["allocated", "unallocated"]


def budget_account(budget: str) -> str:
    return f"budget:{budget}"


def capacity_account(pool: str) -> str:
    return f"capacity:{pool}"


def free_account(pool: str) -> str:
    return f"free:{pool}"


def charge_id(workload_id: str, attempt: int, bucket: int, revision: int = 0) -> str:
    """``charge:<workload>:<attempt>:<hour start, epoch s>:<revision>``: deterministic and
    readable. ``bucket`` is the hour's index (epoch seconds // 3600). Revision 0 is the original
    posting; corrections of the same bucket are revisions 1, 2, ..."""
    return f"charge:{workload_id}:{attempt}:{bucket * HOUR}:{revision}"


def signed_seconds(gpu_seconds: int, debit_account: str) -> int:
    """GPU-seconds as they add to the budget: a reversal (capacity debited) subtracts. Every
    reader of the ledger, event or row, signs an entry here."""
    return -gpu_seconds if debit_account.startswith("capacity:") else gpu_seconds


def parse_charge_id(value: str) -> tuple[str, int, int, int] | None:
    """(workload, attempt, hour start, revision) of an id made by :func:`charge_id`."""
    if not value.startswith("charge:"):
        return None
    parts = value.removeprefix("charge:").rsplit(":", 3)
    if len(parts) != 4:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2]), int(parts[3])
    except ValueError:
        return None


class LedgerCharge(EventData):
    """GPU-seconds of one workload in one hour bucket, posted debit/credit."""

    event_type: ClassVar[str] = "fairshare.ledger.charge.v1"
    topic: ClassVar[TopicKind] = TopicKind.LEDGER
    subject_field: ClassVar[str] = "workload_id"

    charge_id: DerivedId = Field(
        description=(
            "The charge's id, derived by charging, never random: "
            "charge:<workload>:<attempt>:<hour start, epoch s>:<revision>, revision 0 for the "
            "first posting of the run's hour bucket and 1, 2, ... for its corrections (spec 8.6). "
            "Posted at most once: charging posts nothing for an id already on the ledger, "
            "consumers dedupe by it, and the audit pairs recorded and recomputed charges by it "
            "(spec 9.2). The envelope's id is derived from it (spec 2.8). Stated by charging."
        )
    )
    workload_id: Identifier = Field(
        description=(
            "The workload whose run is charged (the record's subject and Kafka key); with the "
            "attempt in charge_id it names the run. Stated by charging."
        )
    )
    budget: BudgetPath = Field(
        description=(
            "The leaf budget of the run's workload: its first submission's budget, else its "
            "start's (spec 8.2). Allocated work debits budget:<budget>. Unallocated (burst) work "
            "names its submitter's budget here for reports and usage only: it debits free:<pool>, "
            "never this budget (spec 8.3). Usage snapshots and reports count the charge under "
            "this budget. Stated by charging."
        )
    )
    pool: PoolName = Field(
        description=(
            "The pool the run ran in (its start's): names the capacity:<pool> account credited, "
            "and free:<pool> for unallocated work. Usage, reports and prices are per pool. Stated "
            "by charging."
        )
    )
    bucket_start: UtcDateTime = Field(
        description=(
            "Start of the hour bucket charged, UTC, on the hour: the entry covers the run's "
            "occupancy in [bucket_start, bucket_start + 3600 s) of event time, counted in whole "
            "seconds (spec 4.3, 8.5). Equals the <hour start> of charge_id. Usage windows, prices "
            "(one per hour) and closed periods place the charge by it, not by the record's event "
            "time. Stated by charging."
        )
    )
    kind: ChargeKind = Field(
        description=(
            "allocated: the run's start said allocated (its contract min_runtime_s > 0), and its "
            "GPU-seconds are charged to its budget; unallocated: burst work, recorded at no "
            "charge (spec 8.3). Stated by charging from the run's start; only allocated charges "
            "count in fair-share usage."
        )
    )
    debit_account: str = Field(
        min_length=1,
        description=(
            "The account debited: budget:<budget> for allocated work, free:<pool> for unallocated "
            "work; on a correction that decreases the bucket the accounts are reversed and it is "
            "capacity:<pool> (spec 8.7). A capacity: debit makes the entry count negatively "
            "wherever GPU-seconds are summed (signed_seconds). Stated by charging."
        ),
    )
    credit_account: str = Field(
        min_length=1,
        description=(
            "The account credited: capacity:<pool>, for allocated and unallocated work alike; on "
            "a correction that decreases the bucket the accounts are swapped and it is "
            "budget:<budget> (allocated) or free:<pool> (unallocated) (spec 8.7). Stated by "
            "charging."
        ),
    )
    gpu_seconds: GpuSeconds = Field(
        le=3600 * 1_000_000,
        description=(
            "Integer GPU-seconds this entry moves: the run's GPUs (all nodes) x whole seconds of "
            "occupancy in the bucket, for allocated and unallocated work alike. For revision 0, "
            "the bucket's amount up to the run's confirmation or end; for a correction (revision "
            ">= 1), the change, not the new total: never negative, a decrease has the accounts "
            "reversed instead (spec 8.5, 8.7). Usage windows, reports and the audit sum it, "
            "signed by the debit account. Stated by charging."
        ),
    )
    amount: GpuSeconds = Field(
        description=(
            "GPU-seconds charged: equal to gpu_seconds for allocated work, 0 for unallocated "
            "(burst) work, which is free (spec 8.3, 8.6). Account balances (closed periods' "
            "opening and closing, the audit's) move by it, so burst work moves no balance. Stated "
            "by charging."
        )
    )
    corrects: DerivedId | None = Field(
        default=None,
        description=(
            "For a correction (revision >= 1): the charge_id of revision 0 of the same run and "
            "hour bucket, not of the previous revision; null for revision 0 (spec 8.6). "
            "Corrections are new entries: posted charges are never edited. Stated by charging."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> LedgerCharge:
        start = self.bucket_start
        if (start.minute, start.second, start.microsecond) != (0, 0, 0):
            raise ValueError("bucket_start: must be on the hour")
        if self.kind == "unallocated" and self.amount != 0:
            raise ValueError("amount: unallocated occupancy is charged at zero")
        if self.kind == "allocated" and self.amount != self.gpu_seconds:
            raise ValueError("amount: an allocated charge costs exactly its GPU-seconds")
        if self.debit_account == self.credit_account and self.kind == "allocated":
            raise ValueError("credit_account: must differ from debit_account")
        return self

    @property
    def signed_gpu_seconds(self) -> int:
        """GPU-seconds as they add to the budget: a reversal (capacity debited) subtracts."""
        return signed_seconds(self.gpu_seconds, self.debit_account)

    @property
    def signed_amount(self) -> int:
        return -self.amount if self.debit_account.startswith("capacity:") else self.amount
