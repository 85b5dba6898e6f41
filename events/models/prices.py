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

from pydantic import StringConstraints, field_validator

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

    pool: PoolName
    currency: CurrencyCode
    per_gpu_hour: MoneyText
    effective_at: UtcDateTime
    budget: BudgetPath | None = None
    set_by: Identifier
    reason: ShortText = ""

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
