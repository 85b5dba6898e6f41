"""Prices of GPU time (topic: budgets, keyed by pool): money is a fact like a weight.

A price takes effect at ``effective_at`` and holds until the next price for the same pool and
budget subtree does; a period is priced with the prices in force during it
(``projections/price_book.py``). Prices take effect on the hour because the ledger charges by
the hour: every hour bucket then has exactly one price. Amounts are decimal strings, never
floats, so that a price written as ``2.35`` is 2.35 in every reader and every sum.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, ClassVar

from pydantic import Field, StringConstraints, field_validator

from events.models.base import EventData
from events.times import HOUR
from events.topics import TopicKind
from events.types import BudgetPath, CurrencyCode, Identifier, PoolName, ShortText, UtcDateTime

#: A non-negative amount with at most 6 decimals and 9 integer digits, as text: ``"2.35"``.
MoneyText = Annotated[str, StringConstraints(pattern=r"^(0|[1-9][0-9]{0,8})(\.[0-9]{1,6})?$")]


class PriceSet(EventData):
    """The price of one GPU-hour in a pool from ``effective_at`` on: the list price when
    ``budget`` is None, else a negotiated (effective) rate for that budget's subtree."""

    event_type: ClassVar[str] = "fairshare.price.set.v1"
    topic: ClassVar[TopicKind] = TopicKind.BUDGETS
    subject_field: ClassVar[str] = "pool"

    pool: PoolName = Field(
        description=(
            "The pool priced; the record's subject and key. Stated by the api (or an admin)."
        )
    )
    currency: CurrencyCode = Field(
        description=(
            "ISO 4217 code of per_gpu_hour's currency (three capitals). One billing currency per "
            "deployment, the first price's: the api refuses another, and the read models skip a "
            "price in another. Stated by the api (or an admin)."
        )
    )
    per_gpu_hour: MoneyText = Field(
        description=(
            'Price of one GPU-hour (3600 GPU-seconds) in currency, as a decimal string ("2.35": '
            "at most 9 integer digits and 6 decimals, never a float). Costs price each ledger "
            "charge at the price in force in its hour bucket (projections/price_book.py, design "
            "2.11). Stated by the api (or an admin)."
        )
    )
    effective_at: UtcDateTime = Field(
        description=(
            "When the price takes effect, UTC, on the hour (charges are hourly, so each hour "
            "bucket has one price); it holds until the next price for the same pool and budget "
            "subtree. Stated by the api (or an admin)."
        )
    )
    budget: BudgetPath | None = Field(
        default=None,
        description=(
            "None: the pool's list price. A budget path: a negotiated (effective) rate for that "
            "budget's subtree; a charge is billed at the deepest subtree's rate in force, with "
            "its list cost beside it. Stated by the api (or an admin)."
        ),
    )
    set_by: Identifier = Field(
        description=(
            "The user (an admin, through the api or the CLI) who set the price; informational. "
            "Stated by the api (or an admin)."
        )
    )
    reason: ShortText = Field(
        default="",
        description=(
            "Free text: why the price was set; informational. Stated by the api (or an admin)."
        ),
    )

    @field_validator("effective_at")
    @classmethod
    def _on_the_hour(cls, value: object) -> object:
        stamp = getattr(value, "timestamp", None)
        if stamp is not None and int(stamp()) % HOUR:
            raise ValueError("effective_at: prices take effect on the hour (charges are hourly)")
        return value

    @property
    def amount(self) -> Decimal:
        return Decimal(self.per_gpu_hour)
