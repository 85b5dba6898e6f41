"""Finance-style reports from the SQL read models: charges, cluster utilisation, per-user usage.

Each report is a pure function of one consistent snapshot of the read models
(:mod:`services.reports.compute`), written as CSV, JSON or Parquet
(:mod:`services.reports.writers`).
The same log position gives byte-identical output. See docs/reports.md.
"""

from __future__ import annotations

from sqlalchemy import Engine

from services.reports import compute, periods
from services.reports.compute import Figures, RangeFigures
from services.reports.model import Report
from services.reports.periods import Period
from services.reports.source import load
from services.reports.writers import Format, render

REPORTS = compute.REPORTS


def build_report(
    engine: Engine,
    name: str,
    period: Period,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
    budget: str | None = None,
) -> Report:
    """Compute report ``name`` (``charges``, ``utilisation`` or ``users``) for the periods
    covering ``[start, end)`` (epoch seconds; default: all the data)."""
    if start is not None and end is not None:
        periods.check_span(start, end, period)
    lo = None if start is None else periods.floor(start, period)
    hi = None if end is None else periods.ceil(end, period)
    snapshot = load(engine, lo, hi)
    if name == "charges":
        return compute.charges(snapshot, period, lo, hi, pool=pool, budget=budget)
    if name == "utilisation":
        return compute.utilisation(snapshot, period, lo, hi, pool=pool)
    if name == "users":
        return compute.users(snapshot, period, lo, hi, pool=pool, budget=budget)
    raise ValueError(f"report: one of {', '.join(REPORTS)}, not {name!r}")


def delivered_and_owed(
    engine: Engine,
    *,
    window_s: int | None = None,
    start: int | None = None,
    end: int | None = None,
    pool: str | None = None,
) -> RangeFigures:
    """Delivered (charged) and owed GPU-seconds per budget and pool over ``[start, end)``
    (whole hours), or over the window of ``window_s`` ending at the read models' horizon: the
    one computation of these figures, which the charges report makes per period. The API's
    ``/budgets`` (so ``fairshare share`` and the dashboard) answers with it."""
    if start is not None and end is not None:
        periods.check_span(start, end, "hour")
    hour_start = None if start is None else periods.floor(start, "hour")
    hour_end = None if end is None else periods.ceil(end, "hour")
    snapshot = load(engine, hour_start, hour_end, window_s=window_s)
    return compute.range_figures(snapshot, hour_start, hour_end, pool=pool)


def report_bytes(
    engine: Engine,
    name: str,
    period: Period,
    fmt: Format,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
    budget: str | None = None,
) -> bytes:
    return render(build_report(engine, name, period, start, end, pool=pool, budget=budget), fmt)


__all__ = [
    "REPORTS",
    "Figures",
    "RangeFigures",
    "Report",
    "build_report",
    "delivered_and_owed",
    "render",
    "report_bytes",
]
