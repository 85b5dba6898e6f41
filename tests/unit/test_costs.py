"""Cost lines: the ledger priced with the prices in force; money that adds up exactly."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from events.models import PriceSet
from events.times import DAY, HOUR
from projections.costs import PLATFORM, Capacity, Charged, cost_lines, lost_gpu_s
from projections.money import cost, largest_remainder, rounded_total
from projections.price_book import PriceBook

T0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


def book(*prices: tuple[str, int, str | None]) -> PriceBook:
    made = PriceBook()
    for amount, at, budget in prices:
        made.apply(
            PriceSet(
                pool="a100",
                currency="EUR",
                per_gpu_hour=amount,
                effective_at=datetime.fromtimestamp(at, UTC),
                budget=budget,
                set_by="admin",
            ),
            0,
        )
    return made


def charged(
    hour: int,
    gpu_s: int,
    budget: str = "lab/a",
    allocated: bool = True,
    wl: str = "w1",
    **kw: object,
) -> Charged:
    return Charged(wl, 1, budget, "a100", T0 + hour * HOUR, allocated, gpu_s, **kw)  # type: ignore[arg-type]


def test_funded_use_is_billed_at_the_effective_rate_and_burst_at_nothing_with_its_list_value() -> (
    None
):
    prices = book(("3.00", T0, None), ("2.00", T0, "lab"))
    lines = cost_lines([charged(0, 3600), charged(1, 7200, allocated=False, wl="w2")], prices)
    usage, burst = sorted(lines, key=lambda line: line.kind, reverse=True)
    assert (usage.kind, usage.billed_cost, usage.list_cost) == (
        "usage",
        Decimal("2.000000"),
        Decimal("3.000000"),
    )
    assert usage.effective_unit_price == Decimal("2.00")
    assert usage.currency == "EUR"
    assert (burst.kind, burst.billed_cost, burst.list_cost) == (
        "burst",
        Decimal("0.000000"),
        Decimal("6.000000"),
    )


def test_a_price_change_splits_the_day_and_each_hour_has_the_price_then() -> None:
    prices = book(("1.00", T0, None), ("2.00", T0 + 5 * HOUR, None))
    lines = cost_lines([charged(h, 3600) for h in range(10)], prices)
    assert [(line.start, line.end, line.billed_cost) for line in lines] == [
        (T0, T0 + 5 * HOUR, Decimal("5.000000")),
        (T0 + 5 * HOUR, T0 + 10 * HOUR, Decimal("10.000000")),
    ]


def test_hours_without_a_list_price_carry_no_money_and_say_so() -> None:
    lines = cost_lines([charged(0, 3600)], book(("1.00", T0 + HOUR, None)))
    assert [(line.priced, line.billed_cost, line.currency) for line in lines] == [(False, 0, "")]


def test_lost_work_is_carved_from_the_runs_last_hours_and_nothing_counts_twice() -> None:
    prices = book(("1.00", T0, None))
    entries = [charged(0, 3600), charged(1, 3600), charged(2, 1800)]
    lines = cost_lines(entries, prices, lost={("w1", 1): 2400})
    lost = [line for line in lines if line.kind == "lost"]
    # 1,800 of the last hour and 600 of the one before, one line for the day
    assert [(line.start, line.end, line.gpu_s) for line in lost] == [
        (T0 + HOUR, T0 + 3 * HOUR, 2400)
    ]
    assert sum(line.gpu_s for line in lines) == 9000
    assert sum(line.billed_cost for line in lines) == Decimal("2.5")


def test_lost_gpu_seconds_follow_the_declared_checkpoints() -> None:
    assert lost_gpu_s(8000, 2, 4000, resumable=False, checkpoint_every_s=600) == 8000
    assert lost_gpu_s(8000, 2, 4000, resumable=True, checkpoint_every_s=None) == 8000
    assert lost_gpu_s(8000, 2, 4000, resumable=True, checkpoint_every_s=1800) == 2 * 400
    assert lost_gpu_s(100, 2, 4000, resumable=True, checkpoint_every_s=1800) == 100


def test_idle_is_capacity_at_list_less_billed_allocated_by_share_use_or_platform() -> None:
    prices = book(("1.00", T0, None), ("0.50", T0, "lab/b"))
    entries = [charged(0, 3600, "lab/a"), charged(0, 3600, "lab/b", wl="w2")]
    cap = {("a100", T0): Capacity(4 * 3600, {"lab/a": 3 * 3600.0, "lab/b": 3600.0})}
    # 4.00 of capacity, 1.50 billed: 2.50 unrecovered
    by_share = {
        line.budget: line.billed_cost
        for line in cost_lines(entries, prices, capacity=cap)
        if line.kind == "idle"
    }
    assert by_share == {"lab/a": Decimal("1.875"), "lab/b": Decimal("0.625")}
    by_use = cost_lines(entries, prices, capacity=cap, idle_method="use")
    # by use: lab/a was billed 1.00, lab/b 0.50: 2/3 and 1/3 of 2.50, rounded to add up
    idle_use = sorted(line.billed_cost for line in by_use if line.kind == "idle")
    assert idle_use == [Decimal("0.833333"), Decimal("1.666667")]
    platform = [
        line
        for line in cost_lines(entries, prices, capacity=cap, idle_method="platform")
        if line.kind == "idle"
    ]
    assert [(line.budget, line.billed_cost) for line in platform] == [(PLATFORM, Decimal("2.5"))]


def test_largest_remainder_adds_up_to_the_total_rounded_once() -> None:
    thirds = [Fraction(1, 3 * 10**6)] * 3 + [Fraction(-7, 3)]
    units = largest_remainder(thirds)
    assert sum(units) == rounded_total(thirds)
    assert all(abs(u - a * 10**6) < 1 for u, a in zip(units, thirds, strict=True))


ENTRY = st.tuples(
    st.integers(0, 3 * 24 - 1),  # hour
    st.integers(-3600, 8 * 3600),  # GPU-seconds, reversals included
    st.sampled_from(["lab/a", "lab/b", "ops/c"]),
    st.booleans(),  # allocated
    st.sampled_from(["w1", "w2", "w3"]),
    st.booleans(),  # correction
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(ENTRY, max_size=60),
    st.lists(
        st.tuples(st.integers(0, 100_000), st.integers(-24, 72), st.sampled_from([None, "lab"])),
        max_size=6,
    ),
    st.dictionaries(st.sampled_from(["w1", "w2", "w3"]), st.integers(0, 20_000), max_size=3),
    st.sampled_from(["share", "use", "platform"]),
)
def test_billed_adds_up_to_the_ledger_priced_with_the_prices_in_force_to_the_cent(
    entries: list[tuple[int, int, str, bool, str, bool]],
    prices: list[tuple[int, int, str | None]],
    lost: dict[str, int],
    method: str,
) -> None:
    made = book(
        ("1.25", T0 - DAY, None), *((f"{c / 10_000:.4f}", T0 + h * HOUR, b) for c, h, b in prices)
    )
    rows = [Charged(w, 1, b, "a100", T0 + h * HOUR, a, s, c) for h, s, b, a, w, c in entries]
    hours = {T0 + h * HOUR for h, *_ in entries}
    cap = {("a100", hour): Capacity(64 * 3600, {"lab/a": 1.0, "lab/b": 2.0}) for hour in hours}
    lines = cost_lines(
        rows, made, lost={(w, 1): s for w, s in lost.items()}, capacity=cap, idle_method=method
    )  # type: ignore[arg-type]
    funded = Fraction(0)
    listed = Fraction(0)
    for row in rows:
        price = made.effective_price(row.pool, row.budget, row.hour)
        listed += cost(row.gpu_s, made.list_price(row.pool, row.hour).per_gpu_hour)  # type: ignore[union-attr]
        if row.allocated:
            funded += cost(row.gpu_s, price.per_gpu_hour)  # type: ignore[union-attr]
    work = [line for line in lines if line.kind != "idle"]
    assert abs(Fraction(sum(line.billed_cost for line in work)) - funded) < Fraction(1, 200)
    assert abs(Fraction(sum(line.list_cost for line in work)) - listed) < Fraction(1, 200)
    assert sum(line.gpu_s for line in work) == sum(row.gpu_s for row in rows)
    # capacity at the list price is recovered whole: billed work (corrections of other
    # periods aside) plus idle
    billed_in: dict[int, Fraction] = {}
    for row in rows:
        if row.allocated and not row.correction:
            price = made.effective_price(row.pool, row.budget, row.hour)
            billed_in[row.hour] = billed_in.get(row.hour, Fraction(0)) + cost(
                row.gpu_s, price.per_gpu_hour
            )  # type: ignore[union-attr]
    capacity_value = sum(
        (
            max(
                cost(c.gpu_s, made.list_price("a100", hour).per_gpu_hour),
                billed_in.get(hour, Fraction(0)),
            )  # type: ignore[union-attr]
            for (_, hour), c in cap.items()
        ),
        Fraction(0),
    )
    recovered = sum(line.billed_cost for line in lines if not line.correction)
    assert abs(Fraction(recovered) - capacity_value) < Fraction(1, 200)
    assert lines == cost_lines(
        rows, made, lost={(w, 1): s for w, s in lost.items()}, capacity=cap, idle_method=method
    )  # type: ignore[arg-type]


def test_a_budget_created_a_minute_before_the_hour_ends_pays_idle_for_that_minute_alone() -> None:
    """A budget is billed idle capacity from the instant it exists (its entitlement), never
    for the hours before: the rule each statement prints (``IDLE_RULES``)."""
    from projections.budget_tree import BudgetTree
    from projections.figures import Bins, PoolHistory, pool_figures
    from projections.steps import Steps

    tree = BudgetTree()
    tree.create("lab", 1.0, float(T0))
    tree.create("lab/old", 1.0, float(T0))
    tree.create("lab/new", 1.0, float(T0 + 2 * HOUR - 60))
    history = PoolHistory("a100", capacity=Steps.constant(8.0))
    bins = Bins(tuple(float(T0 + i * HOUR) for i in range(3)), float(T0 + 2 * HOUR))
    figures = pool_figures(history, tree, bins, tree.leaves())
    capacity = {
        ("a100", T0 + i * HOUR): Capacity(
            8 * HOUR,
            {
                leaf: series.entitled[i]
                for leaf, series in figures.budgets.items()
                if leaf in ("lab/old", "lab/new") and series.entitled[i] > 0
            },
        )
        for i in range(2)
    }
    lines = cost_lines([], book(("3.00", T0, None)), capacity=capacity)
    idle = {line.budget: line.billed_cost for line in lines if line.kind == "idle"}
    # the first hour: all of it to the old budget; the second: the new one's half share for
    # its one minute (4 GPUs x 60 s of the hour's 8 x 3600 entitled GPU-s: 1/120 of 24.00 EUR)
    assert sum(idle.values()) == Decimal("48.000000")
    assert idle["lab/new"] == Decimal("0.200000")
