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

    charge_id: DerivedId
    workload_id: Identifier
    budget: BudgetPath
    pool: PoolName
    #: Start of the hour bucket (UTC, on the hour).
    bucket_start: UtcDateTime
    kind: ChargeKind
    #: Allocated: ``budget:<path>``; unallocated: ``free:<pool>``.
    debit_account: str = Field(min_length=1)
    #: ``capacity:<pool>``, for allocated and unallocated work alike (the two accounts are
    #: swapped on a correction that decreases a charge).
    credit_account: str = Field(min_length=1)
    gpu_seconds: GpuSeconds = Field(le=3600 * 1_000_000)
    #: What is charged: allocated GPU-seconds cost their amount, unallocated cost nothing.
    amount: GpuSeconds
    #: For a correction: the charge id it adjusts. Corrections are new entries, never edits.
    corrects: DerivedId | None = None

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
