"""The ``prices`` read model, the same cases on SQLite and on PostgreSQL: the projector keeps
every price as the price book does (the first for a pool, subtree and instant; one currency),
idempotently on redelivery, and ``read_price_book`` gives back the book the facts fold to."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine, select

from events import TopicKind, Topics, new_event
from events.envelope import derived_event_id
from events.models import PriceSet
from events.positions import Delivery, Position
from projections.price_book import PriceBook
from services.projector.sql_projector import SqlProjector
from services.read_models.tables import prices
from services.reports.prices import read_price_book
from tests.databases import fresh_database

pytestmark = [pytest.mark.database]

T0 = datetime(2026, 11, 1, tzinfo=UTC)
TOPIC = Topics(prefix="rm.").name(TopicKind.BUDGETS)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    with fresh_database(database_url) as engine:
        yield engine


def _price(
    pool: str, amount: str, hours: int, budget: str | None = None, currency: str = "EUR"
) -> PriceSet:
    return PriceSet(
        pool=pool,
        currency=currency,
        per_gpu_hour=amount,
        effective_at=T0 + timedelta(hours=hours),
        budget=budget,
        set_by="admin",
        reason=f"{pool} {amount}",
    )


#: In log order: list prices, a change, a negotiated rate; then a raced second price for an
#: instant already priced and one in another currency, which neither the book nor the table
#: keeps.
FACTS = (
    _price("a100", "2.35", 0),
    _price("h100", "4", 0),
    _price("a100", "2.50", 48),
    _price("a100", "1.999999", 24, budget="lab/vision"),
    _price("a100", "9.99", 48),
    _price("h100", "3.10", 72, currency="USD"),
)


def _deliveries(first_offset: int = 0) -> list[Delivery]:
    return [
        Delivery(
            new_event(
                data,
                source="tests",
                time=T0 + timedelta(minutes=i),
                event_id=derived_event_id("prices", str(i)),
            ),
            Position(TOPIC, 0, first_offset + i),
        )
        for i, data in enumerate(FACTS)
    ]


def _book_of_the_facts() -> PriceBook:
    book = PriceBook()
    for i, data in enumerate(FACTS):
        book.apply(data, (T0 + timedelta(minutes=i)).timestamp())
    return book


def _rows(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                select(prices).order_by(prices.c.pool, prices.c.budget, prices.c.effective_at)
            )
        ]


def test_the_table_gives_back_the_book_the_facts_fold_to(engine: Engine) -> None:
    assert SqlProjector(engine).apply(_deliveries()) == len(FACTS)
    with engine.connect() as connection:
        book = read_price_book(connection)
    expected = _book_of_the_facts()
    assert book.currency == expected.currency == "EUR"
    assert book.prices() == expected.prices()
    assert [(p.pool, p.budget, str(p.per_gpu_hour)) for p in book.prices()] == [
        ("a100", None, "2.35"),
        ("a100", None, "2.50"),  # the raced 9.99 for the same instant was not kept
        ("a100", "lab/vision", "1.999999"),
        ("h100", None, "4"),  # no USD price
    ]
    at = int((T0 + timedelta(hours=30)).timestamp())
    assert book.effective_price("a100", "lab/vision/x", at).per_gpu_hour == Decimal("1.999999")
    assert book.list_price("a100", at).per_gpu_hour == Decimal("2.35")


def test_redelivered_prices_change_nothing(engine: Engine) -> None:
    projector = SqlProjector(engine)
    projector.apply(_deliveries())
    before = _rows(engine)
    assert [r[1] for r in before] == ["", "", "lab/vision", ""]  # '' is the list price
    assert projector.apply(_deliveries()) == 0  # before the stored position: skipped
    assert projector.apply(_deliveries(first_offset=100)) == len(FACTS)  # duplicated facts
    assert _rows(engine) == before


def test_an_empty_table_is_an_empty_book(engine: Engine) -> None:
    with engine.connect() as connection:
        book = read_price_book(connection)
    assert (book.currency, book.prices()) == (None, [])
