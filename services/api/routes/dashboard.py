"""The dashboard: a static page served by the API, its sign-in, and the read-only data it
needs beyond the API's own endpoints (``/budgets``, ``/queue``, ``/nodes``, ``/health``).

* ``GET /`` redirects to ``/dashboard``; ``GET /dashboard`` is the page (no token needed: it
  holds no data); ``/dashboard/static/...`` its script, style and the vendored Chart.js. A
  ``token`` in the query of either is refused (400), never passed on: a URL is written to
  access logs, browser history and ``Referer`` headers, so it must not carry a secret.
* ``GET /dashboard/session``: whom the browser is signed in as, if anyone;
  ``POST /dashboard/session`` (JSON ``{"token": ...}``) signs the browser in: the token is
  checked and set as an ``HttpOnly``, ``SameSite=Strict`` cookie, which the page's own reads
  then carry (:mod:`services.api.deps`: a cookie authorises reads only). ``DELETE
  /dashboard/session`` signs out. Both need a JSON or a non-simple request, which a page of
  another site cannot send without the API's consent (it gives none: no CORS).
* ``GET /dashboard/api/preemptions?limit=`` recent preemptions with their reasons (live view);
* ``GET /dashboard/api/usage?hours=`` hourly usage per leaf budget and pool, allocated and
  unallocated, against entitlement, and per-pool occupancy: closed hours from the read models'
  ``hourly_usage`` (when a database is configured), the current hour from the live view.

Data routes need a valid token, like every read of the API.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine, select

from events.models import PreemptCommand
from events.times import HOUR
from projections.budget_tree import ROOT
from projections.live_state import LiveState
from services.api import queries
from services.api.deps import SESSION_COOKIE, principal, token_table
from services.api.models import RecentPreemptions, UsageSeries
from services.api.view import LiveView
from services.dashboard import STATIC
from services.read_models.tables import hourly_usage

log = logging.getLogger(__name__)


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
#: How long a dashboard sign-in lasts (the cookie's Max-Age).
SESSION_MAX_AGE_S = 12 * 3600


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

    return router


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    token: str = Field(min_length=1, max_length=1024)


class Session(BaseModel):
    """Who the browser is signed in as; ``user`` None: not signed in."""

    user: str | None
    admin: bool = False


def _json_only(request: Request) -> None:
    """A cross-site form can post ``text/plain`` or form data without asking; only a page of
    this origin can send JSON here (a cross-origin one would need CORS, which the API never
    grants), so signing a victim's browser in as someone else takes more than a form."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, detail="send the token as JSON")


def session_router() -> APIRouter:
    router = APIRouter(prefix="/dashboard/session", tags=["dashboard"])

    @router.get("")
    def session(request: Request) -> Session:
        """Whom the session cookie names (200 either way: a page asking whether it is signed
        in is not an error)."""
        token = request.cookies.get(SESSION_COOKIE)
        who = None if token is None else token_table(request).authenticate(token)
        return Session(user=None) if who is None else Session(user=who.user, admin=who.admin)

    @router.post("", dependencies=[Depends(_json_only)])
    def sign_in(body: SignIn, request: Request, response: Response) -> Session:
        """Check a token and keep it in an HttpOnly, SameSite=Strict cookie for the page's
        reads (writes still need ``Authorization: Bearer``)."""
        who = token_table(request).authenticate(body.token)
        if who is None:
            log.info("dashboard sign-in refused: unknown token")
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail="unknown token")
        response.set_cookie(
            SESSION_COOKIE,
            body.token,
            max_age=SESSION_MAX_AGE_S,
            path="/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        response.headers["Cache-Control"] = "no-store"
        return Session(user=who.user, admin=who.admin)

    @router.delete("", status_code=status.HTTP_204_NO_CONTENT)
    def sign_out(request: Request) -> Response:
        """Forget the session cookie (DELETE: no other site's page can send one here)."""
        response = Response(status_code=status.HTTP_204_NO_CONTENT)
        response.delete_cookie(
            SESSION_COOKIE,
            path="/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    return router


def dashboard_router(
    view: LiveView, clock: Callable[[], float], *, engine: Engine | None = None
) -> APIRouter:
    router = APIRouter(
        prefix="/dashboard/api", tags=["dashboard"], dependencies=[Depends(principal)]
    )

    @router.get("/preemptions")
    def preemptions(limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> RecentPreemptions:
        """The most recent preemptions (newest first), with reason, preemptor and message."""
        now = clock()
        with view.read() as state:
            return RecentPreemptions.model_validate(
                {"as_of": queries.iso(now), "preemptions": recent_preemptions(state, limit)}
            )

    @router.get("/usage")
    def usage(hours: Annotated[int, Query(ge=1, le=24 * 62)] = 48) -> UsageSeries:
        """Hourly GPU-hours per leaf budget and pool (allocated, unallocated, entitlement) and
        per-pool occupancy, for the ``hours`` up to the current one."""
        now = clock()
        stored = _stored_usage(engine, now, hours)
        with view.read() as state:
            return UsageSeries.model_validate(
                usage_series(state, now, hours, stored, engine is not None)
            )

    return router


def recent_preemptions(state: LiveState, limit: int) -> list[dict[str, Any]]:
    found: list[tuple[float, str, str]] = []
    for workload_id, records in state.commands.items():
        for record in records:
            if isinstance(record.command, PreemptCommand):
                found.append((record.time, record.command.command_id, workload_id))
    found.sort(key=lambda item: (-item[0], item[1]))
    out = []
    for _time, command_id, workload_id in found[:limit]:
        listed = queries.command_records(state, workload_id)["preemptions"]
        item = next(r for r in listed if r["command_id"] == command_id)
        workload = state.cluster.workloads.get(workload_id)
        out.append(
            {
                "workload_id": workload_id,
                "budget": None if workload is None else workload.budget,
                "submitter": None if workload is None else workload.submitter,
                "status": None if workload is None else workload.status,
                **{
                    k: item[k]
                    for k in (
                        "time",
                        "pool",
                        "attempt",
                        "reason",
                        "preemptor",
                        "preemptor_budget",
                        "requeue",
                        "message",
                    )
                },
            }
        )
    return out


Stored = dict[tuple[str, str, int], tuple[int, int]]


def _stored_usage(engine: Engine | None, now: float, hours: int) -> Stored:
    """(pool, budget, hour start) -> (allocated, unallocated) GPU-seconds from the read models."""
    if engine is None:
        return {}
    last = int(now) // HOUR * HOUR
    first = last - (hours - 1) * HOUR
    query = select(
        hourly_usage.c.pool,
        hourly_usage.c.budget,
        hourly_usage.c.bucket_start,
        hourly_usage.c.allocated_gpu_s,
        hourly_usage.c.unallocated_gpu_s,
    ).where(hourly_usage.c.bucket_start >= first, hourly_usage.c.bucket_start <= last)
    with engine.connect() as connection:
        return {
            (pool, budget, int(at)): (int(a), int(u))
            for pool, budget, at, a, u in connection.execute(query)
        }


def usage_series(
    state: LiveState, now: float, hours: int, stored: Stored, from_read_models: bool
) -> dict[str, Any]:
    last = int(now) // HOUR * HOUR
    starts = [last - (hours - 1 - i) * HOUR for i in range(hours)]
    index = {at: i for i, at in enumerate(starts)}
    pools = queries.known_pools(state)
    allocated: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * hours)
    unallocated: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0] * hours)
    for (pool, budget, at), (a, u) in stored.items():
        if at in index and at != last:
            allocated[(pool, budget)][index[at]] += a / HOUR
            unallocated[(pool, budget)][index[at]] += u / HOUR
    # The current hour is not charged until it closes: what running work has used so far.
    for pool in pools:
        for workload_id in sorted(state.cluster.active.get(pool, ())):
            workload = state.cluster.workloads[workload_id]
            if workload.started_at is None or workload.pool != pool:
                continue
            used = workload.gpus * max(0.0, now - max(workload.started_at, last)) / HOUR
            series = allocated if workload.allocated else unallocated
            series[(pool, workload.budget)][hours - 1] += used
    leaves = sorted(p for p, n in state.tree.nodes.items() if p != ROOT and n.is_leaf)
    budgets = []
    occupancy = []
    for pool in pools:
        capacity = state.cluster.capacity(pool)
        names = sorted(
            {*leaves, *(b for p, b in allocated if p == pool)}
            | {b for p, b in unallocated if p == pool}
        )
        for budget in names:
            entitlement = [
                round(state.tree.shares(pool, float(at)).get(budget, 0.0) * capacity, 4)
                for at in starts
            ]
            budgets.append(
                {
                    "pool": pool,
                    "budget": budget,
                    "allocated_gpu_h": [round(v, 4) for v in allocated[(pool, budget)]],
                    "unallocated_gpu_h": [round(v, 4) for v in unallocated[(pool, budget)]],
                    "entitlement_gpu_h": entitlement,
                }
            )
        alloc_total = [0.0] * hours
        unalloc_total = [0.0] * hours
        for (p, _b), values in allocated.items():
            if p == pool:
                alloc_total = [x + y for x, y in zip(alloc_total, values, strict=True)]
        for (p, _b), values in unallocated.items():
            if p == pool:
                unalloc_total = [x + y for x, y in zip(unalloc_total, values, strict=True)]
        spans = [max(0.0, min(HOUR, now - at)) / HOUR for at in starts]
        occupancy.append(
            {
                "pool": pool,
                "capacity_gpus": capacity,
                "allocated_gpu_h": [round(v, 4) for v in alloc_total],
                "unallocated_gpu_h": [round(v, 4) for v in unalloc_total],
                "occupancy": [
                    None if not capacity or not span else round((a + u) / (capacity * span), 4)
                    for a, u, span in zip(alloc_total, unalloc_total, spans, strict=True)
                ],
            }
        )
    return {
        "as_of": queries.iso(now),
        "hours": [queries.iso(at) for at in starts],
        "source": "read-models+live" if from_read_models else "live (current hour only)",
        "budgets": budgets,
        "pools": occupancy,
    }
