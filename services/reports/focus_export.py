"""``fairshare report focus`` and ``GET /reports/focus``: one billing month's cost lines from
the read models (:mod:`services.reports.costs`) as FOCUS rows (:mod:`services.reports.focus`).
Both surfaces call :func:`focus_bytes`, so they give the same bytes for the same log."""

from __future__ import annotations

from sqlalchemy import Engine

from projections.costs import IdleMethod
from services.reports.costs import period_costs
from services.reports.focus import Billing, FocusFormat, focus_rows, month_bounds, render_focus


def focus_bytes(
    engine: Engine,
    month: str,
    fmt: FocusFormat,
    idle_method: IdleMethod = "share",
    billing_account: str = "fairshare",
) -> bytes:
    start, end = month_bounds(month)
    costs = period_costs(engine, start, end, idle_method)
    billing = Billing(
        start=start,
        end=end,
        account_id=billing_account,
        account_name=billing_account,
        currency=costs.book.currency or Billing.currency,
    )
    rows = focus_rows(costs.lines, billing, submitters=costs.submitters, clusters=costs.clusters)
    return render_focus(rows, fmt)
