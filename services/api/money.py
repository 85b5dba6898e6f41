"""The answers of the money routes (``GET /budgets/{path}/statement``, ``GET /statements``):
a budget's monthly statement and forecast as JSON, shared by the server and its client.

Every amount of money is a :class:`Money`: ``exact`` with 6 decimals (the micro-units the cost
lines are rounded to, so exact amounts add up) and ``display`` with 2 (rounded half away from
zero from the exact one, for people; displayed amounts need not add up). Both are decimal text,
never JSON numbers, so no client reads them through a float.

Like :mod:`services.api.models`, this module imports pydantic only: the CLI parses its answers
with these classes without loading the server.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Literal

from services.api.models import Answer

#: The lines of a statement, in order: funded use, burst (billed 0, its list value shown),
#: work lost to preemption, idle capacity allocated to the budget, corrections of sealed months.
LineKind = Literal["usage", "burst", "lost", "idle", "corrections"]
LINE_KINDS: tuple[LineKind, ...] = ("usage", "burst", "lost", "idle", "corrections")

_EXACT = Decimal("0.000001")
_DISPLAY = Decimal("0.01")


class Money(Answer):
    """An amount in the statement's currency: ``exact`` (6 decimals) and ``display`` (2)."""

    exact: str
    display: str

    @classmethod
    def of(cls, amount: Decimal) -> Money:
        exact = amount.quantize(_EXACT, rounding=ROUND_HALF_UP)
        shown = exact.quantize(_DISPLAY, rounding=ROUND_HALF_UP)
        return cls(exact=format(exact, "f"), display=format(shown, "f"))

    def amount(self) -> Decimal:
        return Decimal(self.exact)


class WorkloadMoneyView(Answer):
    """A workload's part of one line (idle: ``(idle of BUDGET in POOL)``, per leaf and pool)."""

    workload_id: str
    budget: str
    pool: str
    gpu_s: int
    gpu_h: float
    billed: Money
    list_value: Money


class StatementLineView(Answer):
    kind: LineKind
    gpu_s: int
    gpu_h: float
    billed: Money
    list_value: Money
    #: Billed per GPU-hour (the mean where prices changed in the period; null with no GPU-h).
    unit_price: Money | None
    #: The list value per GPU-hour (null with no GPU-h).
    list_unit_price: Money | None
    #: The workloads behind the line, the most billed first (null: not asked for).
    workloads: list[WorkloadMoneyView] | None


class ForecastView(Answer):
    #: Billed from the month's start to ``as_of``.
    spent: Money
    #: ``spent`` plus the last 24 hours' billing rate for the hours left in the month.
    at_current_rate: Money
    #: ``spent`` plus its entitled share of the last hour's capacity, at its effective rates,
    #: for the hours left.
    at_entitlement: Money
    #: The read models' horizon (UTC), capped at the month's end.
    as_of: str
    month_end: str


class PeriodView(Answer):
    month: str
    #: [start, end) of the billing month, UTC.
    start: str
    end: str


class StatementView(Answer):
    """A budget subtree's money in a billing month, to date."""

    budget: str
    period: PeriodView
    #: The billing currency (null while no price is set: every amount is 0).
    currency: str | None
    idle_method: str
    #: Why the idle line bills what it does: the allocation method's rule, in a sentence.
    idle_rule: str
    #: True once the month is sealed: its statement no longer changes.
    sealed: bool
    #: Where the read models had read the log to (``topic/partition@offset;...``).
    log_position: str
    billed: Money
    #: Billed per pool, pools sorted.
    by_pool: dict[str, Money]
    #: One per kind, in :data:`LINE_KINDS` order, each present (zero when nothing).
    lines: list[StatementLineView]
    forecast: ForecastView

    def line(self, kind: LineKind) -> StatementLineView:
        return next(line for line in self.lines if line.kind == kind)


class StatementList(Answer):
    """Every budget's statement for a month (``GET /statements``)."""

    period: PeriodView
    currency: str | None
    idle_method: str
    statements: list[StatementView]
