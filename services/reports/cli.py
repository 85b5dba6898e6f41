"""``fairshare report charges|utilisation|users``: a report from the SQL read models.

SQLAlchemy and the reports are imported when a report runs, not with this module:
``fairshare`` imports it to list its commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.exc import DBAPIError

    from services.reports.buckets import Bucket
    from services.reports.writers import Format

report_app = typer.Typer(
    no_args_is_help=True,
    help="Finance-style reports from the SQL read models (CSV, JSON or Parquet).",
)

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="FAIRSHARE_DATABASE_URL",
        help="the read models (SQLite file or PostgreSQL URL); default: the SQLite file "
        "`fairshare up` keeps in --data-dir",
        show_default=False,
    ),
]
#: Where ``fairshare up`` keeps its data (the same option and variable as ``up``'s).
DataDir = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="FAIRSHARE_DATA_DIR",
        help="the data directory of `fairshare up` (its read models: fairshare.db)",
    ),
]
DEFAULT_DATA_DIR = Path(".fairshare")
#: The file ``fairshare up`` writes its read models to, in its data directory.
DATABASE_FILE = "fairshare.db"


class NoReadModelsError(Exception):
    """No read models where the report was asked to look: said in one line, nothing created."""


#: ``--period`` is its old name, still understood (a report's bucket, not a billing period).
BucketOption = Annotated[
    str,
    typer.Option(
        "--bucket",
        "--period",
        help="what one row covers: hour | day | week (from Monday) | month, UTC",
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="first bucket (ISO date/time, UTC if naive, or 2h, 3d, 1w ago, yesterday, today); "
        "default: all data",
    ),
]
ToOption = Annotated[
    str | None, typer.Option("--to", help="end, exclusive (rounded up to a bucket boundary)")
]
FormatOption = Annotated[str, typer.Option("--format", help="csv | json | parquet")]
OutOption = Annotated[
    Path | None, typer.Option("--out", help="file to write (default: stdout; parquet needs --out)")
]
PoolOption = Annotated[str | None, typer.Option("--pool", help="only this pool")]
BudgetOption = Annotated[str | None, typer.Option("--budget", help="only this budget's subtree")]


def database_url_for(database_url: str | None, data_dir: Path) -> str:
    """``--database-url`` if given, else the SQLite file of ``fairshare up --data-dir``."""
    return database_url or f"sqlite:///{data_dir / DATABASE_FILE}"


def open_read_models(url: str) -> Engine:
    """An engine over existing read models; never creates a file (a report on a path with no
    database would otherwise leave an empty one behind)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise NoReadModelsError(f"--database-url: {error}") from error
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return create_engine(url)
    path = Path(parsed.database)
    if not path.is_file():
        raise NoReadModelsError(
            f"no read models at {path}: start `fairshare up` (or `fairshare projector`) "
            "there first, or give --data-dir DIR or --database-url URL"
        )
    return create_engine(
        f"sqlite:///file:{path.resolve()}?mode=ro&uri=true", connect_args={"uri": True}
    )


def _database_error(url: str, error: DBAPIError) -> str:
    """One line for an error of the database: a missing table means no projector ever wrote
    there."""
    from sqlalchemy.engine import make_url

    text = str(error.orig).strip().splitlines()[0] if error.orig is not None else str(error)
    where = make_url(url).render_as_string(hide_password=True)
    if "no such table" in text or ("relation" in text and "does not exist" in text):
        return (
            f"{where} holds no read models ({text}): run `fairshare up` or `fairshare "
            "projector --database-url ...` to write them"
        )
    return f"cannot read the read models at {where}: {text}"


def _run(
    name: str,
    database_url: str | None,
    data_dir: Path,
    bucket: str,
    start: str | None,
    end: str | None,
    fmt: str,
    out: Path | None,
    pool: str | None = None,
    budget: str | None = None,
) -> None:
    from sqlalchemy.exc import DBAPIError

    from services.reports import buckets, report_bytes, times

    if bucket not in buckets.BUCKETS:
        raise typer.BadParameter(f"one of {', '.join(buckets.BUCKETS)}", param_hint="--bucket")
    if fmt not in ("csv", "json", "parquet"):
        raise typer.BadParameter("one of csv, json, parquet", param_hint="--format")
    if fmt == "parquet" and out is None:
        raise typer.BadParameter("parquet is binary: give --out FILE", param_hint="--out")
    from services.runtime.when import resolve

    try:
        lo = None if start is None else times.parse_time(resolve(start))
        hi = None if end is None else times.parse_time(resolve(end))
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--from/--to") from error
    url = database_url_for(database_url, data_dir)
    engine = _engine_or_exit(url)
    try:
        content = report_bytes(
            engine,
            name,
            _bucket(bucket),
            _format(fmt),
            lo,
            hi,
            pool=pool,
            budget=budget,
        )
    except times.ReportTooLargeError as error:
        raise typer.BadParameter(str(error), param_hint="--from/--to/--bucket") from error
    except DBAPIError as error:
        typer.echo(f"error: {_database_error(url, error)}", err=True)
        raise typer.Exit(1) from error
    finally:
        engine.dispose()
    _deliver(content, out, f"{name} report")


def _engine_or_exit(url: str) -> Engine:
    """The read models at ``url``; where there are none, said in one line, exit 1."""
    try:
        return open_read_models(url)
    except NoReadModelsError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error


def _deliver(content: bytes, out: Path | None, what: str) -> None:
    """To ``out``, else to standard output."""
    if out is None:
        sys.stdout.buffer.write(content)
        sys.stdout.flush()
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(content)
        typer.echo(f"{what} written to {out} ({len(content)} bytes)", err=True)


def _bucket(value: str) -> Bucket:
    for known in ("hour", "day", "week", "month"):
        if value == known:
            return known
    raise typer.BadParameter(value, param_hint="--bucket")


def _format(value: str) -> Format:
    for known in ("csv", "json", "parquet"):
        if value == known:
            return known
    raise typer.BadParameter(value, param_hint="--format")


@report_app.command()
def charges(
    database_url: DatabaseUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    bucket: BucketOption = "day",
    start: FromOption = None,
    end: ToOption = None,
    fmt: FormatOption = "csv",
    out: OutOption = None,
    pool: PoolOption = None,
    budget: BudgetOption = None,
) -> None:
    """Per budget x pool x bucket: charged and free GPU-hours, entitlement, owed, delivered/owed,
    workloads, preemptions; subtotals up the tree; corrections on their own rows."""
    _run("charges", database_url, data_dir, bucket, start, end, fmt, out, pool, budget)


@report_app.command()
def utilisation(
    database_url: DatabaseUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    bucket: BucketOption = "day",
    start: FromOption = None,
    end: ToOption = None,
    fmt: FormatOption = "csv",
    out: OutOption = None,
    pool: PoolOption = None,
) -> None:
    """Per pool x bucket: allocated, unallocated, down, cordoned and idle GPU-hours."""
    _run("utilisation", database_url, data_dir, bucket, start, end, fmt, out, pool)


@report_app.command()
def users(
    database_url: DatabaseUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    bucket: BucketOption = "day",
    start: FromOption = None,
    end: ToOption = None,
    fmt: FormatOption = "csv",
    out: OutOption = None,
    pool: PoolOption = None,
    budget: BudgetOption = None,
) -> None:
    """Per budget x submitter x pool x bucket: charged and free GPU-hours."""
    _run("users", database_url, data_dir, bucket, start, end, fmt, out, pool, budget)


@report_app.command()
def focus(
    month: Annotated[str, typer.Option("--month", help="the billing month, YYYY-MM (UTC)")],
    database_url: DatabaseUrl = None,
    data_dir: DataDir = DEFAULT_DATA_DIR,
    fmt: Annotated[str, typer.Option("--format", help="csv | parquet")] = "csv",
    out: OutOption = None,
    idle: Annotated[
        str, typer.Option("--idle", help="idle capacity allocated by: share | use | platform")
    ] = "share",
    billing_account: Annotated[
        str, typer.Option("--billing-account", help="FOCUS BillingAccountId (the org's root)")
    ] = "fairshare",
) -> None:
    """A month's chargeback in FOCUS 1.0 (FinOps): every funded, burst, lost and idle GPU-hour
    priced with the prices in force, one row per workload, pool and day (docs/reports.md)."""
    from sqlalchemy.exc import DBAPIError

    from projections.costs import IDLE_METHODS
    from services.reports.focus import FOCUS_FORMATS, month_bounds
    from services.reports.focus_export import focus_bytes

    if fmt not in FOCUS_FORMATS:
        raise typer.BadParameter("one of csv, parquet", param_hint="--format")
    if idle not in IDLE_METHODS:
        raise typer.BadParameter(f"one of {', '.join(IDLE_METHODS)}", param_hint="--idle")
    if fmt == "parquet" and out is None:
        raise typer.BadParameter("parquet is binary: give --out FILE", param_hint="--out")
    try:
        month_bounds(month)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--month") from error
    url = database_url_for(database_url, data_dir)
    engine = _engine_or_exit(url)
    try:
        content = focus_bytes(engine, month, fmt, idle, billing_account)
    except DBAPIError as error:
        typer.echo(f"error: {_database_error(url, error)}", err=True)
        raise typer.Exit(1) from error
    finally:
        engine.dispose()
    _deliver(content, out, f"FOCUS export of {month}")
