"""Prices in force, as a fold over price facts: which price an hour of GPU time had, when.

Like weights, prices are histories: a price holds from its ``effective_at`` until the next one
for the same pool and the same subtree, so pricing a past hour gives the price that was in force
then, however late it is asked. Two prices apply to an hour of a budget's work: the *list*
price of the pool (``budget`` None) and the *effective* one, the negotiated rate of the deepest
subtree holding the budget that has one in force then, else the list price (FOCUS's ListCost and
EffectiveCost). One billing currency per book: the first price sets it and a price in another
is refused, so that every sum of money is a sum in one currency.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from decimal import Decimal

from events.models.prices import PriceSet
from events.times import HOUR


@dataclass(frozen=True, slots=True)
class Price:
    pool: str
    #: The subtree a negotiated rate is for; None: the pool's list price.
    budget: str | None
    currency: str
    per_gpu_hour: Decimal
    #: Epoch seconds, on the hour.
    effective_at: int
    set_by: str = ""
    reason: str = ""


class PriceRefusedError(ValueError):
    """A price the book cannot take; the message says why (the API's 4xx)."""


#: What a price is for: (pool, the subtree of a negotiated rate; None: the list price).
PriceScope = tuple[str, str | None]


@dataclass
class PriceBook:
    #: (pool, subtree or None) -> prices by effective time.
    histories: dict[PriceScope, list[Price]] = field(default_factory=dict)
    currency: str | None = None

    def apply(self, data: PriceSet, at: float) -> None:
        """Fold one price fact in (``at``, the event time, is not when it takes effect). A
        fact the book refuses (another currency, a second price for the same instant) is
        skipped: the API refuses it before it is written, so only a forged or raced one
        reaches here, and the first one written stays the price."""
        del at
        try:
            self.add(price_of(data))
        except PriceRefusedError:
            return

    def refusal(self, price: Price) -> str | None:
        """Why the book would not take ``price`` (None: it would)."""
        if self.currency is not None and price.currency != self.currency:
            return (
                f"currency: prices are in {self.currency} (one billing currency), "
                f"not {price.currency}"
            )
        history = self.histories.get((price.pool, price.budget), [])
        if any(p.effective_at == price.effective_at for p in history):
            whose = f"budget {price.budget!r}" if price.budget else "the list price"
            return (
                f"effective_at: pool {price.pool!r} ({whose}) already has a price taking "
                "effect at that instant"
            )
        return None

    def add(self, price: Price) -> None:
        reason = self.refusal(price)
        if reason is not None:
            raise PriceRefusedError(reason)
        history = self.histories.setdefault((price.pool, price.budget), [])
        index = bisect_right([p.effective_at for p in history], price.effective_at)
        history.insert(index, price)
        self.currency = price.currency

    # -- what was in force ------------------------------------------------------------------

    def list_price(self, pool: str, at: int) -> Price | None:
        """The pool's list price in force at ``at`` (None before its first)."""
        return _in_force(self.histories.get((pool, None), []), at)

    def effective_price(self, pool: str, budget: str, at: int) -> Price | None:
        """The rate ``budget`` pays in ``pool`` at ``at``: the deepest negotiated subtree
        holding it with a rate in force, else the list price."""
        path = budget
        while path:
            found = _in_force(self.histories.get((pool, path), []), at)
            if found is not None:
                return found
            path = path.rpartition("/")[0]
        return self.list_price(pool, at)

    def changes(self, start: int, end: int) -> list[int]:
        """The instants in ``(start, end)`` at which some price changes: where a period must
        be split to be priced (always on the hour)."""
        return sorted(
            {
                p.effective_at
                for history in self.histories.values()
                for p in history
                if start < p.effective_at < end
            }
        )

    def prices(self, pool: str | None = None) -> list[Price]:
        """Every price, by pool, subtree (list first) and effective time."""
        found = [
            p
            for (p_pool, _), history in self.histories.items()
            if pool is None or p_pool == pool
            for p in history
        ]
        return sorted(found, key=lambda p: (p.pool, p.budget or "", p.effective_at))


def _in_force(history: list[Price], at: int) -> Price | None:
    index = bisect_right([p.effective_at for p in history], at) - 1
    return history[index] if index >= 0 else None


def price_of(data: PriceSet) -> Price:
    return Price(
        pool=data.pool,
        budget=data.budget,
        currency=data.currency,
        per_gpu_hour=data.amount,
        effective_at=int(data.effective_at.timestamp()),
        set_by=data.set_by,
        reason=data.reason,
    )


def hour_of(at: int) -> int:
    """The start of the hour holding ``at`` (prices are looked up per hour bucket)."""
    return at - at % HOUR
