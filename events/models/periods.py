"""A closed period of the ledger (topic: ledger, keyed by the period's name).

Once a period's charges can no longer change, charging seals it: its opening and closing
balances per account, the number and a digest of the charges it holds, and a digest that also
covers the previous period's seal, so one tampered charge or balance breaks every seal after
it. The seal names the positions of the cut (``as_of``), so an audit of the period starts
there, not at the log's first offset (``projections.periods``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from events.models.base import EventData
from events.models.commands import InputPosition
from events.topics import TopicKind
from events.types import UtcDateTime


class AccountBalance(BaseModel):
    """An account's signed balance (charged units: a budget's debits are negative)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    account: str = Field(min_length=1)
    amount: int


class PeriodClosed(EventData):
    event_type: ClassVar[str] = "fairshare.ledger.period_closed.v1"
    topic: ClassVar[TopicKind] = TopicKind.LEDGER
    subject_field: ClassVar[str] = "period"

    #: ``2026-11`` (a month), ``2026-11-05`` (a day) or ``2026-11-05T13`` (an hour).
    period: str = Field(min_length=4, max_length=32)
    start: UtcDateTime
    end: UtcDateTime
    opening: tuple[AccountBalance, ...]
    closing: tuple[AccountBalance, ...]
    #: How many charges the period holds, and the digest of them (``projections.periods``).
    charges: int = Field(ge=0)
    charges_digest: str = Field(min_length=64, max_length=64)
    #: The previous period's seal digest ("" for the first period sealed).
    previous_digest: str = Field(max_length=64)
    digest: str = Field(min_length=64, max_length=64)
    #: Per ledger partition, the first offset after the cut: a charge before it for an hour
    #: of the period belongs to it; one after it, even for such an hour, to an open period.
    as_of: tuple[InputPosition, ...]
    #: Per input partition (workloads, heartbeats), the first offset charging had not folded
    #: at the cut: the facts whose charges lie before ``as_of``.
    inputs: tuple[InputPosition, ...]
    #: Where charging stood when its fold first passed the period's start (inputs, and the
    #: ledger: no charge for an hour of the period lies before it), and the name of the
    #: checkpoint of its fold kept there: an audit of the period starts from it.
    opened: tuple[InputPosition, ...]
    checkpoint: str = Field(max_length=200)

    @model_validator(mode="after")
    def _consistent(self) -> PeriodClosed:
        if self.end <= self.start:
            raise ValueError("end: must be after start")
        for name in ("opening", "closing"):
            accounts = [b.account for b in getattr(self, name)]
            if accounts != sorted(set(accounts)):
                raise ValueError(f"{name}: each account once, in order")
        return self
