"""``GET /reports/{charges|utilisation|users|focus}``: the reports over HTTP (any valid token).

The read models come from the engine given to :func:`reports_router` (``create_app(...,
engine=...)``), else from ``$FAIRSHARE_DATABASE_URL``; without either the answer is ``503``.
"""

from __future__ import annotations

import os
import threading
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Response, status
from sqlalchemy import Engine

from projections.costs import IdleMethod
from services.api.deps import principal
from services.api.errors import Invalid, NotFound
from services.reports import REPORTS, report_bytes, times
from services.reports.buckets import Bucket
from services.reports.focus import MEDIA_TYPES as FOCUS_MEDIA_TYPES
from services.reports.focus import FocusFormat, month_bounds
from services.reports.writers import MEDIA_TYPES, Format


class EngineSource:
    """The given engine, or one made once from ``$FAIRSHARE_DATABASE_URL``."""

    def __init__(self, engine: Engine | None) -> None:
        self._engine = engine
        self._lock = threading.Lock()

    def __call__(self) -> Engine:
        with self._lock:
            if self._engine is None:
                url = os.environ.get("FAIRSHARE_DATABASE_URL")
                if not url:
                    raise HTTPException(
                        status.HTTP_503_SERVICE_UNAVAILABLE,
                        detail="no read-model database configured for reports (start the API "
                        "with a database engine, or set FAIRSHARE_DATABASE_URL)",
                    )
                from services.read_models.migrate import engine_for

                self._engine = engine_for(url)
            return self._engine


def reports_router(engine: Engine | None = None) -> APIRouter:
    """The reports' routes; every route needs a valid bearer token (the API's rule)."""
    source = EngineSource(engine)
    router = APIRouter(prefix="/reports", tags=["reports"], dependencies=[Depends(principal)])

    @router.get("/focus")
    def focus(
        month: Annotated[str, Query(description="the billing month, YYYY-MM (UTC)")],
        fmt: Annotated[FocusFormat, Query(alias="format")] = "csv",
        idle: Annotated[
            IdleMethod, Query(description="idle allocated by share, use or platform")
        ] = "share",
    ) -> Response:
        """A month's chargeback in FOCUS 1.0, as ``fairshare report focus`` writes it."""
        try:
            month_bounds(month)
        except ValueError as error:
            raise Invalid("month", str(error), location="query") from error
        from services.reports.focus_export import focus_bytes  # SQL reads: at first use

        content = focus_bytes(source(), month, fmt, idle)
        return Response(
            content,
            media_type=FOCUS_MEDIA_TYPES[fmt],
            headers={"Content-Disposition": f'attachment; filename="focus-{month}.{fmt}"'},
        )

    @router.get("/{name}")
    def report(
        name: str,
        bucket: Annotated[
            Bucket | None,
            Query(description="what one row covers: hour, day, week or month (default day)"),
        ] = None,
        period: Annotated[
            Bucket | None, Query(deprecated=True, description="the old name of bucket")
        ] = None,
        start: Annotated[str | None, Query(alias="from")] = None,
        end: Annotated[str | None, Query(alias="to")] = None,
        fmt: Annotated[Format, Query(alias="format")] = "csv",
        pool: str | None = None,
        budget: str | None = None,
    ) -> Response:
        """A report (``charges``, ``utilisation`` or ``users``) as CSV, JSON or Parquet, for
        the buckets covering ``[from, to)`` (ISO dates/times, UTC; default: all the data).
        ``period`` is the old name of ``bucket``, still understood."""
        if name not in REPORTS:
            raise NotFound(f"unknown report {name!r} (known: {', '.join(REPORTS)})")
        if bucket is not None and period is not None and bucket != period:
            raise Invalid(
                "bucket",
                f"bucket={bucket} and period={period} (its old name) differ",
                location="query",
            )
        chosen: Bucket = bucket or period or "day"
        try:
            lo = None if start is None else times.parse_time(start)
            hi = None if end is None else times.parse_time(end)
            content = report_bytes(source(), name, chosen, fmt, lo, hi, pool=pool, budget=budget)
        except ValueError as error:  # a time that is none, or a report over its bounds
            raise Invalid("from/to", str(error), location="query") from error
        return Response(
            content,
            media_type=MEDIA_TYPES[fmt],
            headers={"Content-Disposition": f'attachment; filename="{name}-{chosen}.{fmt}"'},
        )

    return router
