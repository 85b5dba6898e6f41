"""The price book of the read models: the ``prices`` table the projector keeps from
``PriceSet`` facts, folded back into a :class:`~projections.price_book.PriceBook`, so that a
report prices each hour with the price then in force, as the live state's book would."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import Connection, select

from projections.price_book import Price, PriceBook, PriceRefusedError
from services.read_models.tables import prices


def read_price_book(connection: Connection) -> PriceBook:
    """Every price of the table, added in (effective_at, event_time) order (the first one kept
    sets the book's currency). A row the book would refuse cannot come from the projector,
    which keeps one currency and one price per key; it would be skipped, as the book skips
    such a fact."""
    book = PriceBook()
    rows = connection.execute(
        select(prices).order_by(
            prices.c.effective_at, prices.c.event_time, prices.c.pool, prices.c.budget
        )
    )
    for row in rows:
        price = Price(
            pool=row.pool,
            budget=row.budget or None,
            currency=row.currency,
            per_gpu_hour=Decimal(row.per_gpu_hour),
            effective_at=row.effective_at,
            set_by=row.set_by,
            reason=row.reason,
        )
        try:
            book.add(price)
        except PriceRefusedError:
            continue
    return book
