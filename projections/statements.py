"""A budget's money for a period, from the cost lines (:mod:`projections.costs`): the monthly
statement and the forecast to the month's end. Pure, so that the dashboard, the CLI and the
reports show one figure.

- **Statement**: per budget subtree, the sums of its lines by kind (billed funded use, burst at
  list value, work lost to preemption, idle allocated to it, corrections), and the workloads
  behind each (a line drills down to them).
- **Forecast**: what was billed so far this month, and two ways to the month's end: at the
  rate of the last day billed (``at_current_rate``) and at its entitlement (its share of the
  capacity now, at its effective rate, for the rest of the month: ``at_entitlement``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from events.times import DAY, HOUR
from projections.costs import CostLine
from projections.money import PLACES

ZERO = Decimal(0)
_QUANTUM = Decimal(1).scaleb(-PLACES)


def in_subtree(budget: str, root: str) -> bool:
    return root == "" or budget == root or budget.startswith(root + "/")


@dataclass
class WorkloadMoney:
    workload_id: str
    budget: str
    pool: str
    gpu_s: int = 0
    billed: Decimal = ZERO
    list_value: Decimal = ZERO


@dataclass
class StatementLine:
    """One line of a statement: a kind of cost, its sums, and the workloads in it."""

    kind: str
    gpu_s: int = 0
    billed: Decimal = ZERO
    list_value: Decimal = ZERO
    workloads: dict[str, WorkloadMoney] = field(default_factory=dict)

    @property
    def unit_price(self) -> Decimal | None:
        """Billed per GPU-hour: the line's price, averaged where prices changed in the period."""
        return per_gpu_hour(self.billed, self.gpu_s)

    @property
    def list_unit_price(self) -> Decimal | None:
        """The list value per GPU-hour (what burst and discounts are measured against)."""
        return per_gpu_hour(self.list_value, self.gpu_s)


def per_gpu_hour(amount: Decimal, gpu_s: int) -> Decimal | None:
    """``amount`` per GPU-hour of ``gpu_s`` (None for a line with no GPU-hours: no price can
    be read from it). One function, so the API, the CLI and the page print one price."""
    if gpu_s <= 0:
        return None
    return (amount * HOUR / gpu_s).quantize(_QUANTUM)


#: Why a budget is billed idle capacity, per allocation method: printed on every statement, so a
#: reader of a budget created yesterday and billed idle today sees the rule, not a surprise.
IDLE_RULES: dict[str, str] = {
    "share": (
        "idle: each pool-hour's capacity at list price, less what its use paid, is split by "
        "entitlement (each budget's share of the capacity in that hour, from the instant it "
        "exists): a budget pays for capacity held for it whether it used it or not"
    ),
    "use": (
        "idle: each pool-hour's capacity at list price, less what its use paid, is split by "
        "what each budget was billed in that pool-hour: a budget that used nothing pays no idle"
    ),
    "platform": (
        "idle: capacity nobody paid for is the platform's cost, on its own account: no budget "
        "is billed idle"
    ),
}


@dataclass
class Statement:
    budget: str
    currency: str
    start: int
    end: int
    #: In order: funded use, burst, lost to preemption, idle, corrections.
    lines: dict[str, StatementLine]

    @property
    def billed(self) -> Decimal:
        return sum((line.billed for line in self.lines.values()), ZERO)

    def by_pool(self) -> dict[str, Decimal]:
        """Billed per pool (the dashboard's stack)."""
        found: dict[str, Decimal] = {}
        for line in self.lines.values():
            for money in line.workloads.values():
                found[money.pool] = found.get(money.pool, ZERO) + money.billed
        return dict(sorted(found.items()))


LINE_KINDS = ("usage", "burst", "lost", "idle", "corrections")


def idle_gpu_s(line: CostLine) -> int:
    """The idle GPU-seconds behind an idle line: what it bills at the list price it was
    priced at. An idle line carries no GPU-seconds of its own (no workload ran them), and a
    statement showed "0.00 GPU-h" beside the money they cost."""
    if line.list_unit_price <= 0:
        return 0
    return round(line.billed_cost / line.list_unit_price * HOUR)


def statement(
    lines: Iterable[CostLine], budget: str, start: int, end: int, currency: str = ""
) -> Statement:
    """The statement of ``budget``'s subtree ("" for everything) over the lines of a period."""
    kinds = {kind: StatementLine(kind) for kind in LINE_KINDS}
    for line in lines:
        if not in_subtree(line.budget, budget):
            continue
        kind = "corrections" if line.correction else line.kind
        target = kinds[kind]
        gpu_s = idle_gpu_s(line) if line.kind == "idle" else line.gpu_s
        # idle is billed at the list price: its list value is what it bills
        listed = line.billed_cost if line.kind == "idle" else line.list_cost
        target.gpu_s += gpu_s
        target.billed += line.billed_cost
        target.list_value += listed
        key = line.workload_id or f"(idle of {line.budget} in {line.pool})"
        money = target.workloads.setdefault(key, WorkloadMoney(key, line.budget, line.pool))
        money.gpu_s += gpu_s
        money.billed += line.billed_cost
        money.list_value += listed
        currency = currency or line.currency
    return Statement(budget, currency, start, end, kinds)


@dataclass(frozen=True)
class Forecast:
    budget: str
    currency: str
    #: Billed from the month's start to ``as_of``.
    spent: Decimal
    #: ``spent`` plus the last day's billing rate (or, on a younger system, the rate since
    #: billing began) for the rest of the month.
    at_current_rate: Decimal
    #: ``spent`` plus its entitlement now, at its effective rate, for the rest of the month.
    at_entitlement: Decimal
    as_of: int
    month_end: int


def forecast(
    lines: Iterable[CostLine],
    budget: str,
    as_of: int,
    month_end: int,
    entitled_cost_per_hour: Fraction,
    currency: str = "",
) -> Forecast:
    """``budget``'s forecast from the month's lines so far (read at ``as_of``, the horizon).
    ``entitled_cost_per_hour``: its share of the capacity now times its effective rate.

    The current rate is what the last day billed, per second of it: the part of each line
    inside ``[as_of - DAY, as_of)`` by its share of the line's seconds (a line of the hour in
    progress, up to ``as_of``). Where billing began less than a day before
    ``as_of`` (the earliest of ``lines``, every budget's), the rate is over that shorter span:
    ten minutes of history give ten minutes' rate, not a day's diluted by 23 h 50 min that never
    happened."""
    spent = ZERO
    last_day = Fraction(0)
    began = as_of
    for line in lines:
        began = min(began, line.start)
        if not in_subtree(line.budget, budget):
            continue
        spent += line.billed_cost
        currency = currency or line.currency
        if line.end > as_of - DAY and not line.correction:
            # a line of the hour in progress bills its use up to ``as_of``, not its whole hour
            until = min(line.end, as_of)
            length = max(1, until - line.start)
            inside = max(0, until - max(line.start, as_of - DAY))
            last_day += Fraction(line.billed_cost) * min(inside, length) / length
    observed_s = min(DAY, max(0, as_of - began))
    remaining_s = max(0, month_end - as_of)
    rate = last_day / observed_s if observed_s else Fraction(0)
    at_rate = spent + _decimal(rate * remaining_s)
    remaining_h = Fraction(remaining_s, HOUR)
    at_entitlement = spent + _decimal(entitled_cost_per_hour * remaining_h)
    return Forecast(budget, currency, spent, at_rate, at_entitlement, as_of, month_end)


def _decimal(value: Fraction) -> Decimal:
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return exact.quantize(_QUANTUM)
