"""``statement``: a budget's printable monthly statement (``GET /budgets/{path}/statement``),
as text, JSON or CSV; and the money columns ``share --cost`` adds (``GET /statements``).

The figures are the API's, which computes them once for every surface
(``services.reports.costs.budget_money``); this module only lays them out. Money is printed as
the API's ``display`` (2 decimals) in text and its ``exact`` (6 decimals) in CSV and JSON.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from services.client.commands.common import ApiOption, CaOption, TokenOption, ask, hours, num
from services.client.constants import DEFAULT_API
from services.client.terminal import FittedTable, console, plain

if TYPE_CHECKING:
    from rich.console import Console

    from services.api.models import BudgetDetail
    from services.api.money import Money, StatementLineView, StatementList, StatementView
    from services.client.api import FairshareClient

StatementFormat = Literal["text", "json", "csv"]
IdleOption = Literal["share", "use", "platform"]

#: What each line of a statement is, in the words of a printed statement.
LINE_NAMES = {
    "usage": "funded use",
    "burst": "burst (billed 0; list value)",
    "lost": "lost to preemption",
    "idle": "idle capacity allocated",
    "corrections": "corrections of sealed months",
}

#: The columns of ``--format csv``: one row per line of the statement (``row`` "line"), one
#: per workload of each line ("workload"), and the total ("total"); money exact, 6 decimals.
CSV_COLUMNS = (
    "month",
    "statement_budget",
    "row",
    "kind",
    "workload_id",
    "budget",
    "pool",
    "gpu_s",
    "gpu_h",
    "billed",
    "list_value",
    "currency",
)


def statement(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget (its whole subtree), e.g. lab")],
    month: Annotated[
        str | None,
        typer.Option(help="the billing month, YYYY-MM (UTC); default: the current one"),
    ] = None,
    fmt: Annotated[
        StatementFormat, typer.Option("--format", help="text (printable), json or csv")
    ] = "text",
    out: Annotated[
        Path | None, typer.Option("--out", help="write it to this file, not stdout")
    ] = None,
    idle: Annotated[
        IdleOption, typer.Option(help="idle capacity allocated by share, use or platform")
    ] = "share",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
) -> None:
    """A budget's statement for a month to date: billed per line (funded use, burst at list
    value, lost to preemption, idle, corrections), each line's workloads, billed per pool,
    the forecast to the month's end, and its share, owed and delivered."""
    view, detail = ask(
        ctx, api, token, ca, lambda c: _statement_and_figures(c, budget, month, idle)
    )
    if fmt == "json":
        text = json.dumps(view.model_dump(mode="json"), indent=2, ensure_ascii=True) + "\n"
    elif fmt == "csv":
        text = statement_csv(view)
    else:
        if out is None:
            print_statement(console(), view, detail)
            return
        text = _captured(lambda o: print_statement(o, view, detail))
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"statement of {view.budget} for {view.period.month} written to {out}", err=True)


def _statement_and_figures(
    client: FairshareClient, budget: str, month: str | None, idle: str
) -> tuple[StatementView, BudgetDetail | None]:
    """The statement, and the budget's fair-share figures beside it when the API gives them
    (a statement does not fail for want of them)."""
    from services.client.api import ApiError

    view = client.statement(budget, month, idle=idle)
    try:
        detail: BudgetDetail | None = client.budget(budget)
    except ApiError:
        detail = None
    return view, detail


def _captured(render: Callable[[Console], None]) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    render(
        Console(file=buffer, width=110, soft_wrap=True, markup=False, emoji=False, highlight=False)
    )
    return buffer.getvalue()


def print_statement(out: Console, view: StatementView, detail: BudgetDetail | None) -> None:
    """The statement for people: heading, fair share, lines, per pool, forecast, workloads."""
    currency = view.currency or "(no price set)"
    state = "sealed" if view.sealed else f"open, to {view.forecast.as_of}"
    out.print(plain(f"Statement of {view.budget} for {view.period.month} ({currency})"))
    out.print(plain(f"period {view.period.start} to {view.period.end} ({state})"))
    out.print(plain(f"idle allocated by {view.idle_method}; as of {view.forecast.as_of}"))
    if detail is not None:
        out.print()
        out.print(_share_table(detail))
    out.print()
    out.print(_lines_table(view))
    out.print()
    pools = ", ".join(f"{pool} {money.display}" for pool, money in view.by_pool.items())
    out.print(plain(f"billed per pool: {pools or '-'}"))
    out.print(plain(view.idle_rule))
    forecast = view.forecast
    out.print(
        plain(
            f"forecast to {forecast.month_end}: spent {forecast.spent.display}; at the current "
            f"rate {forecast.at_current_rate.display}; at entitlement "
            f"{forecast.at_entitlement.display} {view.currency or ''}".rstrip()
        )
    )
    for line in view.lines:
        if line.workloads:
            out.print()
            out.print(_workloads_table(line))
    out.print()
    out.print(
        plain(
            "Read from the read models at log position "
            f"{view.log_position or '(the start of the log)'}: an audit re-derives these "
            "figures from the log up to there."
        )
    )


def _share_table(detail: BudgetDetail) -> FittedTable:
    table = FittedTable(
        "POOL",
        "SHARE",
        "OWED GPU-h",
        "DELIVERED GPU-h",
        "DELIVERED/OWED",
        whole=("POOL",),
        title=f"fair share over the window ({detail.window_s // 3600} h) to {detail.as_of}",
    )
    for pool, figures in detail.pools.items():
        ratio = figures.delivered_ratio
        table.add_row(
            (
                pool,
                num(figures.share, 3),
                hours(figures.owed_gpu_s),
                hours(figures.delivered_gpu_s),
                "-" if ratio is None else f"{ratio:.3f}",
            )
        )
    return table


def _lines_table(view: StatementView) -> FittedTable:
    table = FittedTable(
        "LINE", "GPU-h", "PER GPU-h", "BILLED", "LIST PER GPU-h", "LIST VALUE", whole=("LINE",)
    )
    for line in view.lines:
        table.add_row(
            (
                LINE_NAMES.get(line.kind, line.kind),
                hours(line.gpu_s, 2),
                _price(line.unit_price),
                line.billed.display,
                _price(line.list_unit_price),
                line.list_value.display,
            )
        )
    table.add_row(("total billed", "", "", view.billed.display, "", ""))
    return table


def _price(amount: Money | None) -> str:
    """A unit price to the cent ('-' on a line with no GPU-hours to price)."""
    return "-" if amount is None else amount.display


def _workloads_table(line: StatementLineView) -> FittedTable:
    table = FittedTable(
        "WORKLOAD",
        "BUDGET",
        "POOL",
        "GPU-h",
        "BILLED",
        "LIST VALUE",
        whole=("WORKLOAD", "BUDGET", "POOL"),
        title=f"{LINE_NAMES.get(line.kind, line.kind)}: {line.billed.display}",
    )
    for work in line.workloads or []:
        table.add_row(
            (
                work.workload_id,
                work.budget,
                work.pool,
                hours(work.gpu_s, 2),
                work.billed.display,
                work.list_value.display,
            )
        )
    return table


def statement_csv(view: StatementView) -> str:
    """The statement as CSV (:data:`CSV_COLUMNS`), money exact."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    head = (view.period.month, view.budget)
    currency = view.currency or ""
    for line in view.lines:
        writer.writerow(
            (
                *head,
                "line",
                line.kind,
                "",
                "",
                "",
                line.gpu_s,
                f"{line.gpu_h:.6f}",
                line.billed.exact,
                line.list_value.exact,
                currency,
            )
        )
        for work in line.workloads or []:
            writer.writerow(
                (
                    *head,
                    "workload",
                    line.kind,
                    work.workload_id,
                    work.budget,
                    work.pool,
                    work.gpu_s,
                    f"{work.gpu_h:.6f}",
                    work.billed.exact,
                    work.list_value.exact,
                    currency,
                )
            )
    gpu_s = sum(line.gpu_s for line in view.lines)
    total = (gpu_s, f"{gpu_s / 3600:.6f}", view.billed.exact, "", currency)
    writer.writerow((*head, "total", "", "", "", "", *total))
    return buffer.getvalue()


# -- share --cost ------------------------------------------------------------------------------
#: The columns ``share --cost`` adds.
COST_COLUMNS = ("SPENT", "FORECAST AT RATE", "FORECAST AT ENTITLEMENT", "CURRENCY")


def cost_cells(statements: StatementList | None, budget: str) -> tuple[str, str, str, str]:
    """A budget's spent this month and forecasts (display), and the currency."""
    found = None
    if statements is not None:
        found = next((s for s in statements.statements if s.budget == budget), None)
    if found is None:
        return ("-", "-", "-", "")
    forecast = found.forecast
    return (
        forecast.spent.display,
        forecast.at_current_rate.display,
        forecast.at_entitlement.display,
        found.currency or "",
    )
