"""``GET /budgets/{path}/statement`` and ``GET /statements``: a budget's money in a billing
month (its statement to date and its forecast to the month's end), and every budget's.

Both answer from the read models through :func:`services.reports.costs.budget_money`, the one
computation of a budget's money that the CLI, the dashboard and the FOCUS export agree with;
nothing here computes money, it only puts it into :mod:`services.api.money`'s answers. Any
valid token reads every budget's statement, as it reads every budget's figures (``/budgets``).

The read models are the engine given to ``create_app(..., engine=...)``, else one from
``$FAIRSHARE_DATABASE_URL`` (the reports' engine); without either the answer is ``503``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, TypeVar

from fastapi import APIRouter, Query
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from events.times import HOUR
from projections.budget_tree import ROOT
from projections.costs import IdleMethod
from projections.statements import IDLE_RULES
from services.api import auth, queries
from services.api.application import Application
from services.api.deps import Context, User
from services.api.errors import Forbidden, Invalid, Unavailable
from services.api.money import (
    LINE_KINDS,
    ForecastView,
    Money,
    PeriodView,
    StatementLineView,
    StatementList,
    StatementView,
    WorkloadMoneyView,
)
from services.api.sentences import iso
from services.reports.costs import budget_money, budgets_money
from services.reports.focus import month_bounds
from services.reports.times import EARLIEST, LATEST

T = TypeVar("T")

if TYPE_CHECKING:
    from projections.statements import StatementLine
    from services.reports.costs import BudgetMoney

router = APIRouter(tags=["money"])

_MONTH = re.compile(r"^\d{4}-\d{2}$")
#: How a statement names the idle capacity of a pool among its workloads.

MonthQuery = Annotated[
    str | None,
    Query(
        max_length=16,
        description="the billing month, YYYY-MM (UTC); default: the current month",
    ),
]
IdleQuery = Annotated[
    IdleMethod,
    Query(description="idle capacity allocated by share, use or platform"),
]
WorkloadsQuery = Annotated[
    bool, Query(description="false: the lines without their workloads (smaller answers)")
]


@router.get("/budgets/{budget:path}/statement")
def budget_statement(
    budget: str,
    who: User,
    ctx: Context,
    month: MonthQuery = None,
    idle: IdleQuery = "share",
    workloads: WorkloadsQuery = True,
) -> StatementView:
    """A budget subtree's statement for a month to date: billed per kind of cost (funded use,
    burst at its list value, lost to preemption, idle, corrections), each down to its
    workloads, billed per pool, and the forecast to the month's end (docs/reports.md,
    "Costs"). Money is ``{"exact": "6 decimals", "display": "2 decimals"}``."""
    name, start, end = _month(month, ctx)
    with ctx.view.read() as state:
        queries.budget_or_404(state, budget)
        refusal = auth.may_see_money(who, state.tree, budget)
    if refusal is not None:
        raise Forbidden(refusal, user=who.user)
    engine = _engine(ctx)
    money = _money(engine, budget, start, end, idle)
    return statement_view(budget, name, idle, money, workloads)


@router.get("/statements")
def statements(
    who: User,
    ctx: Context,
    month: MonthQuery = None,
    idle: IdleQuery = "share",
    workloads: WorkloadsQuery = True,
) -> StatementList:
    """Every budget's statement for a month that the caller may see (each as
    ``/budgets/{path}/statement`` answers it), in path order; ``workloads=false`` leaves the
    workloads out."""
    name, start, end = _month(month, ctx)
    with ctx.view.read() as state:
        budgets = sorted(
            path
            for path in state.tree.nodes
            if path != ROOT and auth.may_see_money(who, state.tree, path) is None
        )
    engine = _engine(ctx)
    found = _read(lambda: budgets_money(engine, budgets, start, end, idle))
    views = [statement_view(path, name, idle, found[path], workloads) for path in budgets]
    currency = next((view.currency for view in views if view.currency), None)
    return StatementList(
        period=_period(name, start, end), currency=currency, idle_method=idle, statements=views
    )


def statement_view(
    budget: str, month: str, idle: str, money: BudgetMoney, workloads: bool = True
) -> StatementView:
    """``money`` (:func:`budget_money`'s answer) as the API's answer."""
    statement, forecast = money.statement, money.forecast
    lines = [_line(statement.lines[kind], budget, workloads) for kind in LINE_KINDS]
    return StatementView(
        budget=budget,
        period=_period(month, statement.start, statement.end),
        currency=statement.currency or None,
        idle_method=idle,
        idle_rule=IDLE_RULES[idle],
        sealed=money.sealed,
        log_position=money.log_position,
        billed=Money.of(statement.billed),
        by_pool={pool: Money.of(amount) for pool, amount in statement.by_pool().items()},
        lines=lines,
        forecast=ForecastView(
            spent=Money.of(forecast.spent),
            at_current_rate=Money.of(forecast.at_current_rate),
            at_entitlement=Money.of(forecast.at_entitlement),
            as_of=iso(forecast.as_of),
            month_end=iso(forecast.month_end),
        ),
    )


def _line(line: StatementLine, budget: str, workloads: bool) -> StatementLineView:
    """One line, its workloads the most billed first (idle: one entry per leaf budget and pool,
    ``(idle of BUDGET in POOL)``)."""
    shown = None
    if workloads:
        ordered = sorted(
            line.workloads.values(),
            key=lambda w: (-w.billed, -w.list_value, w.workload_id),
        )
        shown = [
            WorkloadMoneyView(
                workload_id=w.workload_id,
                budget=w.budget,
                pool=w.pool,
                gpu_s=w.gpu_s,
                gpu_h=_hours(w.gpu_s),
                billed=Money.of(w.billed),
                list_value=Money.of(w.list_value),
            )
            for w in ordered
        ]
    return StatementLineView(
        kind=line.kind,
        gpu_s=line.gpu_s,
        gpu_h=_hours(line.gpu_s),
        billed=Money.of(line.billed),
        list_value=Money.of(line.list_value),
        unit_price=_price(line.unit_price),
        list_unit_price=_price(line.list_unit_price),
        workloads=shown,
    )


def _price(amount: Decimal | None) -> Money | None:
    return None if amount is None else Money.of(amount)


def _hours(gpu_s: int) -> float:
    return float((Decimal(gpu_s) / HOUR).quantize(Decimal("0.000001")))


def _period(month: str, start: int, end: int) -> PeriodView:
    return PeriodView(month=month, start=iso(start), end=iso(end))


def _month(month: str | None, ctx: Application) -> tuple[str, int, int]:
    """The month asked (default: the API clock's), and its [start, end); 422 for one that is
    not YYYY-MM or lies outside the times the reports cover."""
    now = datetime.fromtimestamp(ctx.clock(), UTC)
    name = month if month is not None else now.strftime("%Y-%m")
    try:
        if not _MONTH.match(name):
            raise ValueError(f"a month is YYYY-MM, not {name!r}")
        start, end = month_bounds(name)
    except ValueError as error:
        raise Invalid("month", str(error), location="query") from error
    if start < EARLIEST or end > LATEST:
        raise Invalid(
            "month",
            f"{name} is outside the months a statement may cover ({iso(EARLIEST)[:7]} to "
            f"{iso(LATEST - 1)[:7]})",
            location="query",
        )
    return name, start, end


def _engine(ctx: Application) -> Engine:
    engine = ctx.read_model_engine()
    if engine is None:
        raise Unavailable(
            "no read-model database configured for statements (start the API with a database "
            "engine, or set FAIRSHARE_DATABASE_URL)",
            retry_after_s=60,
        )
    return engine


def _money(engine: Engine, budget: str, start: int, end: int, idle: IdleMethod) -> BudgetMoney:
    return _read(lambda: budget_money(engine, budget, start, end, idle))


def _read(reading: Callable[[], T]) -> T:
    """The read models' answer; a 503 when they cannot be read."""
    try:
        return reading()
    except DBAPIError as error:
        raise Unavailable(
            f"the read models cannot be read: {type(error.orig).__name__}", retry_after_s=10
        ) from error
