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

    account: str = Field(
        min_length=1,
        description=(
            "The account: budget:<path> or capacity:<pool> (free:<pool> accounts never move: "
            "unallocated charges have amount 0). Stated by charging."
        ),
    )
    amount: int = Field(
        description=(
            "The account's signed balance in charged GPU-seconds (the sum of LedgerCharge "
            "amounts): a debit subtracts, a credit adds, so a budget's balance is negative and a "
            "pool's capacity account positive. Stated by charging."
        )
    )


class PeriodClosed(EventData):
    event_type: ClassVar[str] = "fairshare.ledger.period_closed.v1"
    topic: ClassVar[TopicKind] = TopicKind.LEDGER
    subject_field: ClassVar[str] = "period"

    period: str = Field(
        min_length=4,
        max_length=32,
        description=(
            "The period's name, UTC: 2026-11 (a month, the default length), 2026-11-05 (a day) or "
            "2026-11-05T13 (an hour). The record's subject; charging seals each period once "
            "(design 4.5), and billing bills a month by the charges its period holds. Stated by "
            "charging."
        ),
    )
    start: UtcDateTime = Field(
        description=(
            "The period's first instant, UTC; its hours are [start, end). Stated by charging."
        )
    )
    end: UtcDateTime = Field(
        description=(
            "The period's end, exclusive, UTC, after start. Charging seals the period once its "
            "fold's horizon (a week behind its slowest workloads partition) has passed it. Stated "
            "by charging."
        )
    )
    opening: tuple[AccountBalance, ...] = Field(
        description=(
            "Each account's balance when the period opens: the previous seal's closing balances "
            "(none before the first seal); sorted by account, each once. Stated by charging."
        )
    )
    closing: tuple[AccountBalance, ...] = Field(
        description=(
            "Each account's balance after the period's charges: opening moved by the amount of "
            "every charge the period holds (the debit account down, the credit account up); "
            "sorted by account, each once. The next period opens with them. Stated by charging."
        )
    )
    charges: int = Field(
        ge=0,
        description=(
            "How many charges the period holds: the charges for its hours that lie before its cut "
            "(as_of), plus late charges for hours of already closed periods that lie between the "
            "previous cut and this one (projections.periods). Stated by charging."
        ),
    )
    charges_digest: str = Field(
        min_length=64,
        max_length=64,
        description=(
            "SHA-256, hex, over the charges the period holds, sorted by charge_id, each as the "
            "JSON array of the fields that move money (charge_id, budget, pool, bucket_start in "
            "epoch s, kind, debit_account, credit_account, gpu_seconds, amount, corrects; "
            "projections.periods.charges_digest). An audit of the period recomputes it. Stated by "
            "charging."
        ),
    )
    previous_digest: str = Field(
        max_length=64,
        description=(
            'The previous period\'s seal digest ("" for the first period sealed): chains the '
            "seals, so a change to one charge or balance of any period breaks every later seal. "
            "Stated by charging."
        ),
    )
    digest: str = Field(
        min_length=64,
        max_length=64,
        description=(
            "The seal: SHA-256, hex, of the JSON array [period, start, end (epoch s), opening and "
            "closing balances (sorted pairs), charges, charges_digest, previous_digest] "
            "(projections.periods.seal_digest). The next seal's previous_digest. Stated by "
            "charging."
        ),
    )
    as_of: tuple[InputPosition, ...] = Field(
        description=(
            "The cut: per ledger partition, the first offset after it. A charge before it for an "
            "hour of the period belongs to the period; one after it, even for such an hour (a "
            "late fact's correction), to the period open when it was posted, never to this closed "
            "one. Stated by charging."
        )
    )
    inputs: tuple[InputPosition, ...] = Field(
        description=(
            "Per input partition charging folds (workloads, heartbeats), the first offset it had "
            "not folded at the cut: the facts whose charges lie before as_of. Stated by charging."
        )
    )
    opened: tuple[InputPosition, ...] = Field(
        description=(
            "Where charging stood when its fold first passed the period's start: its input "
            "partitions, and the ledger (no charge for an hour of the period lies before it). An "
            "audit of the period (fairshare audit replay --period) starts reading there. Stated "
            "by charging."
        )
    )
    checkpoint: str = Field(
        max_length=200,
        description=(
            "The name of the checkpoint of charging's fold kept where the period opened "
            '(charging-period-<period>), which an audit of the period restores; "" when charging '
            "keeps no such checkpoints. Stated by charging."
        ),
    )

    @model_validator(mode="after")
    def _consistent(self) -> PeriodClosed:
        if self.end <= self.start:
            raise ValueError("end: must be after start")
        for name in ("opening", "closing"):
            accounts = [b.account for b in getattr(self, name)]
            if accounts != sorted(set(accounts)):
                raise ValueError(f"{name}: each account once, in order")
        return self
