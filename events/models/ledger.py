"""Double-entry charges (topic: ledger, keyed by workload).

Each charge moves integer GPU-seconds from one account to another, so debits equal credits by
construction. Its id is derived from (workload, hour bucket[, revision]) — never random — so that a
replayed or duplicated heartbeat can only ever produce the same id, and a store that keeps ids
unique cannot double-post.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from events.models.base import EventData
from events.topics import TopicKind
from events.types import BudgetPath, GpuSeconds, Identifier, PoolName, UtcDateTime

#: Namespace of charge ids (uuid5); changing it would change every charge id ever issued.
CHARGE_NAMESPACE = uuid.UUID("6f1c2d0e-8a57-4c1b-9a3e-2b7f1f0c5a11")

ChargeKind = Literal["allocated", "unallocated"]


def budget_account(budget: str) -> str:
    return f"budget:{budget}"


def capacity_account(pool: str) -> str:
    return f"capacity:{pool}"


def free_account(pool: str) -> str:
    return f"free:{pool}"


def charge_id(workload_id: str, bucket_start: datetime, revision: int = 0) -> str:
    """Deterministic id of the charge of ``workload_id`` in the hour starting at ``bucket_start``.

    Revision 0 is the original posting; corrections of the same bucket use revision 1, 2, ...
    """
    key = f"{workload_id}|{bucket_start.isoformat()}|{revision}"
    return str(uuid.uuid5(CHARGE_NAMESPACE, key))


class LedgerCharge(EventData):
    """GPU-seconds of one workload in one hour bucket, posted debit/credit."""

    event_type: ClassVar[str] = "fairshare.ledger.charge.v1"
    topic: ClassVar[TopicKind] = TopicKind.LEDGER
    subject_field: ClassVar[str] = "workload_id"

    charge_id: Identifier
    workload_id: Identifier
    budget: BudgetPath
    pool: PoolName
    #: Start of the hour bucket (UTC, on the hour).
    bucket_start: UtcDateTime
    kind: ChargeKind
    #: Allocated: ``budget:<path>``; unallocated: ``free:<pool>``.
    debit_account: str = Field(min_length=1)
    #: Allocated: ``capacity:<pool>``; unallocated: ``free:<pool>``.
    credit_account: str = Field(min_length=1)
    gpu_seconds: GpuSeconds = Field(le=3600 * 1_000_000)
    #: What is charged: allocated GPU-seconds cost their amount, unallocated cost nothing.
    amount: GpuSeconds
    #: For a correction: the charge id it adjusts. Corrections are new entries, never edits.
    corrects: Identifier | None = None

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
