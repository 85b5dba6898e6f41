"""``fairshare report charges|utilisation|users``: a report from the SQL read models."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from services.read_models.migrate import DEFAULT_URL, engine_for
from services.reports import periods, report_bytes
from services.reports.periods import Period
from services.reports.writers import Format

report_app = typer.Typer(
    no_args_is_help=True,
    help="Finance-style reports from the SQL read models (CSV, JSON or Parquet).",
)

DatabaseUrl = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar="FAIRSHARE_DATABASE_URL",
        help="the read models (SQLite file or PostgreSQL URL)",
    ),
]
PeriodOption = Annotated[
    str, typer.Option("--period", help="hour | day | week (from Monday) | month, UTC")
]
FromOption = Annotated[
    str | None,
    typer.Option("--from", help="first period (ISO date/time, UTC if naive); default: all data"),
]
ToOption = Annotated[
    str | None, typer.Option("--to", help="end, exclusive (rounded up to a period boundary)")
]
FormatOption = Annotated[str, typer.Option("--format", help="csv | json | parquet")]
OutOption = Annotated[
    Path | None, typer.Option("--out", help="file to write (default: stdout; parquet needs --out)")
]
PoolOption = Annotated[str | None, typer.Option("--pool", help="only this pool")]
BudgetOption = Annotated[str | None, typer.Option("--budget", help="only this budget's subtree")]


def _run(
    name: str,
    database_url: str,
    period: str,
    start: str | None,
    end: str | None,
    fmt: str,
    out: Path | None,
    pool: str | None = None,
    budget: str | None = None,
) -> None:
    if period not in periods.PERIODS:
        raise typer.BadParameter(f"one of {', '.join(periods.PERIODS)}", param_hint="--period")
    if fmt not in ("csv", "json", "parquet"):
        raise typer.BadParameter("one of csv, json, parquet", param_hint="--format")
    if fmt == "parquet" and out is None:
        raise typer.BadParameter("parquet is binary: give --out FILE", param_hint="--out")
    try:
        lo = None if start is None else periods.parse_time(start)
        hi = None if end is None else periods.parse_time(end)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--from/--to") from error
    engine = engine_for(database_url)
    try:
        content = report_bytes(
            engine,
            name,
            _period(period),
            _format(fmt),
            lo,
            hi,
            pool=pool,
            budget=budget,
        )
    except periods.ReportTooLargeError as error:
        raise typer.BadParameter(str(error), param_hint="--from/--to/--period") from error
    finally:
        engine.dispose()
    if out is None:
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(content)
        typer.echo(f"{name} report written to {out} ({len(content)} bytes)", err=True)


def _period(value: str) -> Period:
    for known in ("hour", "day", "week", "month"):
        if value == known:
            return known
    raise typer.BadParameter(value, param_hint="--period")


def _format(value: str) -> Format:
    for known in ("csv", "json", "parquet"):
        if value == known:
            return known
    raise typer.BadParameter(value, param_hint="--format")


@report_app.command()
def charges(
    database_url: DatabaseUrl = DEFAULT_URL,
    period: PeriodOption = "day",
    start: FromOption = None,
    end: ToOption = None,
    fmt: FormatOption = "csv",
    out: OutOption = None,
    pool: PoolOption = None,
    budget: BudgetOption = None,
) -> None:
    """Per budget x pool x period: charged and free GPU-hours, entitlement, owed, delivered/owed,
    workloads, preemptions; subtotals up the tree; corrections on their own rows."""
    _run("charges", database_url, period, start, end, fmt, out, pool, budget)


@report_app.command()
def utilisation(
    database_url: DatabaseUrl = DEFAULT_URL,
    period: PeriodOption = "day",
    start: FromOption = None,
    end: ToOption = None,
    fmt: FormatOption = "csv",
    out: OutOption = None,
    pool: PoolOption = None,
) -> None:
    """Per pool x period: allocated, unallocated, down, cordoned and idle GPU-hours."""
    _run("utilisation", database_url, period, start, end, fmt, out, pool)


@report_app.command()
def users(
    database_url: DatabaseUrl = DEFAULT_URL,
    period: PeriodOption = "day",
    start: FromOption = None,
    end: ToOption = None,
    fmt: FormatOption = "csv",
    out: OutOption = None,
    pool: PoolOption = None,
    budget: BudgetOption = None,
) -> None:
    """Per budget x submitter x pool x period: charged and free GPU-hours."""
    _run("users", database_url, period, start, end, fmt, out, pool, budget)
