"""Finance-style reports from the SQL read models: charges, cluster utilisation, per-user usage.

Each report is a pure function of one consistent snapshot of the read models
(:mod:`services.reports.compute`), written as CSV, JSON or Parquet
(:mod:`services.reports.writers`).
The same log position gives byte-identical output. See docs/reports.md.
"""

from __future__ import annotations

from sqlalchemy import Engine

from services.reports import compute, periods
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
    snapshot = load(engine, period, lo, hi)
    if name == "charges":
        return compute.charges(snapshot, period, lo, hi, pool=pool, budget=budget)
    if name == "utilisation":
        return compute.utilisation(snapshot, period, lo, hi, pool=pool)
    if name == "users":
        return compute.users(snapshot, period, lo, hi, pool=pool, budget=budget)
    raise ValueError(f"report: one of {', '.join(REPORTS)}, not {name!r}")


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
    "Report",
    "build_report",
    "render",
    "report_bytes",
]
