"""The dashboard: a static page served by the API, and the read-only data it needs beyond the
API's own endpoints (``/budgets``, ``/queue``, ``/nodes``, ``/health``).

* ``GET /`` redirects to ``/dashboard``; ``GET /dashboard`` is the page (no token needed: it
  holds no data); ``GET /dashboard/statement?budget=&month=`` a budget's printable monthly
  statement (``GET /budgets/{path}/statement``); ``/dashboard/static/...`` their scripts,
  style and the vendored Chart.js. A ``token`` in the query of any is refused (400), never
  passed on: a URL is written to access logs, browser history and ``Referer`` headers, so it
  must not carry a secret.
* ``/dashboard/session``: signing the browser in (:mod:`services.api.routes.dashboard_session`).
* ``GET /dashboard/api/preemptions?limit=`` recent preemptions (:mod:`services.api.preemptions`).
* ``GET /dashboard/api/timeline?pool=&from=&to=&last=&bin=`` one pool over time, in bins sized
  to the range (:mod:`services.api.timeline`); ``bin`` must be one of its ``BINS`` and an
  answer holds at most ``MAX_BINS`` bins (422 otherwise).

Data routes need a valid token, like every read of the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response, status
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine

from projections.figures import pool_figures
from projections.live_state import LiveState
from services.api import queries
from services.api.deps import principal
from services.api.errors import Invalid, NotFound
from services.api.past_work import past_first_demand
from services.api.preemptions import PreemptionRows, recent_preemptions
from services.api.routes.dashboard_session import session_router
from services.api.sentences import iso
from services.api.timeline import (
    FROM_READ_MODELS,
    LIVE_ONLY,
    MAX_BINS,
    Timeline,
    first_activity,
    live_history,
    resolve_range,
    timeline,
)
from services.api.view import LiveView
from services.dashboard import STATIC
from services.reports import times
from services.reports.window import window_figures

__all__ = ["MAX_BINS", "mount_dashboard"]


def mount_dashboard(
    app: FastAPI,
    view: LiveView,
    clock: Callable[[], float],
    *,
    engine: Engine | None = None,
) -> None:
    """Serve the page at ``/dashboard`` (``/`` redirects there), its sign-in and data routes."""
    app.mount("/dashboard/static", StaticFiles(directory=STATIC), name="dashboard-static")
    app.include_router(_pages())
    app.include_router(session_router())
    app.include_router(dashboard_router(view, clock, engine=engine))


#: Query parameters that would put a secret into a URL.
SECRET_PARAMETERS = ("token", "access_token")


def _token_in_url(request: Request) -> PlainTextResponse | None:
    if not any(name in request.query_params for name in SECRET_PARAMETERS):
        return None
    return PlainTextResponse(
        "Tokens in URLs are refused: a URL lands in access logs, browser history and Referer "
        "headers. Open /dashboard without it and sign in on the page.",
        status.HTTP_400_BAD_REQUEST,
    )


def _pages() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/", response_model=None)
    def root(request: Request) -> Response:
        if (refused := _token_in_url(request)) is not None:
            return refused
        query = request.url.query
        return RedirectResponse("/dashboard" + (f"?{query}" if query else ""))

    @router.get("/dashboard", response_model=None)
    def page(request: Request) -> Response:
        if (refused := _token_in_url(request)) is not None:
            return refused
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @router.get("/dashboard/statement", response_model=None)
    def statement_page(request: Request) -> Response:
        """A budget's printable monthly statement (``?budget=&month=``); its data comes from
        ``GET /budgets/{path}/statement`` with the session cookie."""
        if (refused := _token_in_url(request)) is not None:
            return refused
        return FileResponse(STATIC / "statement.html", media_type="text/html")

    return router


def dashboard_router(
    view: LiveView, clock: Callable[[], float], *, engine: Engine | None = None
) -> APIRouter:
    router = APIRouter(
        prefix="/dashboard/api", tags=["dashboard"], dependencies=[Depends(principal)]
    )

    @router.get("/preemptions")
    def preemptions(limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> PreemptionRows:
        """The most recent preemptions (newest first): reason, preemptor, a one-line summary,
        and the decision record's standings, pass and log positions."""
        now = clock()
        with view.read() as state:
            return PreemptionRows.model_validate(
                {"as_of": iso(now), "preemptions": recent_preemptions(state, limit)}
            )

    @router.get("/timeline")
    def timeline_route(
        pool: Annotated[str | None, Query(max_length=128)] = None,
        start: Annotated[str | None, Query(alias="from", max_length=64)] = None,
        end: Annotated[str | None, Query(alias="to", max_length=64)] = None,
        last: Annotated[int | None, Query(ge=60, le=times.LATEST)] = None,
        bin_s: Annotated[int | None, Query(alias="bin")] = None,
    ) -> Timeline:
        """One pool over time, in bins: capacity, allocated and unallocated GPUs, demand,
        occupancy, and per budget delivered vs owed (bin averages, in GPUs). The range is
        ``[from, to)`` (ISO times, UTC, or epoch seconds), or the ``last`` seconds up to now,
        or by default what the data covers (at least 5 minutes, at most 92 days); ``bin``
        (seconds, one of 10, 60, 300, 900, 3600, 10800, 21600, 43200, 86400, 604800) defaults
        to the shortest of 10 s, 1 min, 5 min, 15 min, 1 h, 6 h, 1 day and 1 week that cuts the
        range into at most 180 bins."""
        now = clock()
        with view.read() as state:
            name = queries.pools_or_404(state, pool)[0] if pool else _first_pool(state)
            data_from = first_activity(state, name)
            forgot_some = state.forgotten_before > float("-inf")
        if forgot_some:  # the view forgot its oldest work: where the data starts is older
            older = past_first_demand(engine, name)
            if older is not None:
                data_from = older if data_from is None else min(data_from, older)
        try:
            window = resolve_range(now, data_from, start, end, last, bin_s)
        except ValueError as error:
            raise Invalid("from/to/bin", str(error), location="query") from error
        if engine is None:
            with view.read() as state:
                history, tree = live_history(state, name, now), state.tree
                figures = pool_figures(history, tree, window.bins(), tree.leaves())
                answer = timeline(figures, tree, window, LIVE_ONLY, data_from)
        else:
            read = window_figures(engine, window.bins(), pools=[name])
            answer = timeline(read.pools[name], read.tree, window, FROM_READ_MODELS, data_from)
        return Timeline.model_validate(answer)

    return router


def _first_pool(state: LiveState) -> str:
    pools = queries.known_pools(state)
    if not pools:
        raise NotFound("no pool is known yet (no node registered)")
    return pools[0]
