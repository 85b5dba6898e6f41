"""Statements and forecasts add up the cost lines, one figure for every surface."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from events.models import PriceSet
from events.times import DAY, HOUR
from projections.costs import Capacity, Charged, cost_lines
from projections.price_book import PriceBook
from projections.statements import forecast, statement

T0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


def _book(per_gpu_hour: str) -> PriceBook:
    """One list price for pool a100, in EUR, from the day before T0."""
    book = PriceBook()
    book.apply(
        PriceSet(
            pool="a100",
            currency="EUR",
            per_gpu_hour=per_gpu_hour,
            effective_at=datetime.fromtimestamp(T0 - DAY, UTC),
            set_by="admin",
        ),
        0,
    )
    return book


def _lines() -> list:  # type: ignore[type-arg]
    book = _book("1.00")
    rows = [Charged("w1", 1, "lab/a", "a100", T0 + h * HOUR, True, 3600) for h in range(48)]
    rows += [Charged("w2", 1, "lab/b", "a100", T0 + h * HOUR, False, 3600) for h in range(4)]
    rows += [Charged("w3", 1, "ops/c", "a100", T0 - HOUR, True, 1800, True)]
    cap = {
        ("a100", T0 + h * HOUR): Capacity(2 * 3600, {"lab/a": 1.0, "lab/b": 1.0}) for h in range(48)
    }
    return cost_lines(rows, book, lost={("w1", 1): 1800}, capacity=cap)


def test_a_statement_sums_its_subtrees_lines_by_kind_down_to_workloads() -> None:
    lines = _lines()
    lab = statement(lines, "lab", T0, T0 + 30 * DAY)
    assert lab.currency == "EUR"
    assert lab.lines["usage"].billed == Decimal("47.5")
    assert lab.lines["lost"].billed == Decimal("0.5")
    assert lab.lines["burst"].billed == 0
    assert lab.lines["burst"].list_value == Decimal(4)
    # 96 GPU-h of capacity at 1.00, 48 billed: 48 idle, half each by share
    assert lab.lines["idle"].billed == Decimal(48)
    # the idle GPU-hours behind that money (at the list price, 1.00): it said 0.00 GPU-h
    assert lab.lines["idle"].gpu_s == 48 * HOUR
    assert sum(w.gpu_s for w in lab.lines["idle"].workloads.values()) == 48 * HOUR
    assert list(lab.lines["usage"].workloads) == ["w1"]
    assert lab.billed == Decimal(96)
    assert lab.by_pool() == {"a100": Decimal(96)}
    ops = statement(lines, "ops", T0, T0 + 30 * DAY)
    assert ops.lines["corrections"].billed == Decimal("0.5")
    everything = statement(lines, "", T0, T0 + 30 * DAY)
    assert everything.billed == sum(line.billed_cost for line in lines)


def test_the_forecast_runs_the_last_days_rate_and_the_entitlement_to_the_months_end() -> None:
    lines = [line for line in _lines() if line.budget == "lab/a"]
    now = T0 + 2 * DAY
    ahead = forecast(lines, "lab/a", now, T0 + 30 * DAY, Fraction(3, 2))
    assert ahead.spent == Decimal(72)  # 47.5 used, 0.5 lost, 24 idle
    # the second day: 24 used/lost + 12 idle = 36 a day, for 28 more days
    assert ahead.at_current_rate == Decimal(72 + 36 * 28)
    assert ahead.at_entitlement == Decimal(72) + Decimal("1.5") * 28 * 24


def test_the_forecast_at_the_current_rate_runs_ten_minutes_of_history_to_the_months_end() -> None:
    """A system up ten minutes billed 2.00 EUR: at that rate (12.00 an hour) for the 10 hours
    left the forecast is 122.00, not the 2.00 spent (the rate counted whole hours only, and a
    line of the hour in progress had none)."""
    book = _book("6.00")
    now = T0 + 600
    lines = cost_lines([Charged("w1", 1, "lab/a", "a100", T0, True, 2 * 600)], book)
    [line] = lines
    assert (line.start, line.billed_cost) == (T0, Decimal(2))
    ahead = forecast(lines, "lab/a", now, now + 10 * HOUR, Fraction(0))
    assert ahead.spent == Decimal(2)
    assert ahead.at_current_rate == Decimal(2 + 12 * 10)
