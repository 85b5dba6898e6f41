"""The price book: prices are histories, a negotiated rate wins in its subtree, one currency."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from events.models import PriceSet
from events.times import HOUR
from projections.budget_tree import BudgetTree
from projections.price_book import PriceBook, PriceRefusedError, price_of

T0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


def fact(
    amount: str, at: int, pool: str = "a100", budget: str | None = None, currency: str = "EUR"
) -> PriceSet:
    return PriceSet(
        pool=pool,
        currency=currency,
        per_gpu_hour=amount,
        effective_at=datetime.fromtimestamp(at, UTC),
        budget=budget,
        set_by="admin",
    )


def test_a_price_holds_until_the_next_one_and_nothing_before_the_first() -> None:
    book = PriceBook()
    book.apply(fact("2.00", T0 + 10 * HOUR), 0)
    book.apply(fact("2.50", T0), 0)  # written later, takes effect earlier
    assert book.list_price("a100", T0 - 1) is None
    assert book.list_price("a100", T0 + 9 * HOUR + 3599).per_gpu_hour == Decimal("2.50")  # type: ignore[union-attr]
    assert book.list_price("a100", T0 + 10 * HOUR).per_gpu_hour == Decimal("2.00")  # type: ignore[union-attr]
    assert book.changes(T0, T0 + 20 * HOUR) == [T0 + 10 * HOUR]


def test_the_deepest_negotiated_subtree_in_force_wins_else_the_list_price() -> None:
    book = PriceBook()
    book.apply(fact("3.00", T0), 0)
    book.apply(fact("2.00", T0, budget="lab"), 0)
    book.apply(fact("1.50", T0 + HOUR, budget="lab/vision"), 0)
    assert book.effective_price("a100", "lab/vision/x", T0).per_gpu_hour == Decimal("2.00")  # type: ignore[union-attr]
    assert book.effective_price("a100", "lab/vision/x", T0 + HOUR).per_gpu_hour == Decimal("1.50")  # type: ignore[union-attr]
    assert book.effective_price("a100", "other", T0).per_gpu_hour == Decimal("3.00")  # type: ignore[union-attr]
    assert book.effective_price("h100", "lab", T0) is None


def test_another_currency_or_a_second_price_for_the_same_instant_is_refused() -> None:
    book = PriceBook()
    book.add(price_of(fact("3.00", T0)))
    with pytest.raises(PriceRefusedError, match="one billing currency"):
        book.add(price_of(fact("3.00", T0 + HOUR, currency="USD")))
    with pytest.raises(PriceRefusedError, match="already has a price"):
        book.add(price_of(fact("4.00", T0)))
    book.apply(fact("4.00", T0), 0)  # a raced duplicate on the log: the first stays
    assert book.list_price("a100", T0).per_gpu_hour == Decimal("3.00")  # type: ignore[union-attr]
    book.add(price_of(fact("4.00", T0, budget="lab")))  # another subtree, same instant: fine


@pytest.mark.parametrize("amount", ["-1", "NaN", "1e3", "1.1234567", "01.5", "", "1,5"])
def test_an_amount_that_is_not_a_plain_decimal_is_refused(amount: str) -> None:
    with pytest.raises(ValidationError):
        fact(amount, T0)


def test_a_price_off_the_hour_or_a_lowercase_currency_is_refused() -> None:
    with pytest.raises(ValidationError, match="on the hour"):
        fact("1", T0 + 60)
    with pytest.raises(ValidationError):
        fact("1", T0, currency="eur")


def test_the_budget_tree_keeps_the_prices_of_the_budgets_topic() -> None:
    tree = BudgetTree()
    tree.apply(fact("2.00", T0), T0)
    assert tree.prices.list_price("a100", T0) is not None
    del tree.__dict__["_prices"]  # a tree restored from a checkpoint written before prices
    assert tree.prices.prices() == []


@given(
    st.lists(
        st.tuples(st.integers(0, 48), st.integers(0, 10_000), st.sampled_from([None, "a", "a/b"])),
        max_size=20,
    ),
    st.integers(-2, 60),
)
def test_the_price_in_force_is_the_latest_taking_effect_by_then(
    prices: list[tuple[int, int, str | None]], hour: int
) -> None:
    book = PriceBook()
    kept: dict[tuple[str | None, int], int] = {}
    for at, cents, budget in prices:
        book.apply(fact(f"{cents / 100:.2f}", T0 + at * HOUR, budget=budget), 0)
        kept.setdefault((budget, at), cents)  # the first written stays
    when = T0 + hour * HOUR
    for budget in ("a/b/c", "a/x", "z"):
        found = book.effective_price("a100", budget, when)
        expected = None
        for subtree in (s for s in ("a/b", "a", None) if s is None or budget.startswith(s + "/")):
            times = [at for (b, at) in kept if b == subtree and at <= hour]
            if times:
                expected = Decimal(kept[(subtree, max(times))]) / 100
                break
        assert (found.per_gpu_hour if found else None) == expected
