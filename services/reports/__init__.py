"""Finance-style reports from the SQL read models: charges, cluster utilisation, per-user usage.

Each report is a pure function of one consistent snapshot of the read models
(:mod:`services.reports.compute`), written as CSV, JSON or Parquet
(:mod:`services.reports.writers`).
The same log position gives byte-identical output. See docs/reports.md.
"""

from __future__ import annotations

from sqlalchemy import Engine

from services.reports import buckets, compute
from services.reports.buckets import Bucket
from services.reports.model import Report
from services.reports.source import load
from services.reports.writers import Format, render

REPORTS = compute.REPORTS


def build_report(
    engine: Engine,
    name: str,
    bucket: Bucket,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
    budget: str | None = None,
) -> Report:
    """Compute report ``name`` (``charges``, ``utilisation`` or ``users``) for the buckets
    covering ``[start, end)`` (epoch seconds; default: all the data)."""
    if start is not None and end is not None:
        buckets.check_span(start, end, bucket)
    lo = None if start is None else buckets.floor(start, bucket)
    hi = None if end is None else buckets.ceil(end, bucket)
    snapshot = load(engine, bucket, lo, hi)
    if name == "charges":
        return compute.charges(snapshot, bucket, lo, hi, pool=pool, budget=budget)
    if name == "utilisation":
        return compute.utilisation(snapshot, bucket, lo, hi, pool=pool)
    if name == "users":
        return compute.users(snapshot, bucket, lo, hi, pool=pool, budget=budget)
    raise ValueError(f"report: one of {', '.join(REPORTS)}, not {name!r}")


def report_bytes(
    engine: Engine,
    name: str,
    bucket: Bucket,
    fmt: Format,
    start: int | None = None,
    end: int | None = None,
    *,
    pool: str | None = None,
    budget: str | None = None,
) -> bytes:
    return render(build_report(engine, name, bucket, start, end, pool=pool, budget=budget), fmt)


__all__ = [
    "REPORTS",
    "Report",
    "build_report",
    "render",
    "report_bytes",
]
