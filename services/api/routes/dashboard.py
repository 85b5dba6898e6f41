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
* ``GET /dashboard/api/preemptions?limit=`` recent preemptions (live view): the decision record
  of each, with a one-line ``summary`` for the page's row and the rest (standings, pass, log
  positions) as separate fields for its details;
* ``GET /dashboard/api/timeline?pool=&from=&to=&last=&bin=`` one pool over time, in bins sized
  to the range: capacity, occupancy (allocated and unallocated GPUs), demand, and per budget
  delivered vs owed (:func:`timeline`). Without a range it covers what the data covers;
  ``bin`` must be one of :data:`BINS` and an answer holds at most :data:`MAX_BINS` bins (422
  otherwise, as the reports refuse ranges over their bounds);
* ``GET /dashboard/api/usage?hours=`` hourly usage per leaf budget and pool, allocated and
  unallocated, against entitlement, and per-pool occupancy: closed hours from the read models'
  ``hourly_usage`` (when a database is configured), the current hour from the live view (what
  the page drew before the timeline; kept for scripts that read it).

Data routes need a valid token, like every read of the API.
"""

from __future__ import annotations

import logging
import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, overload

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.responses import FileResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine, select

from events.models import PreemptCommand
from events.models.ledger import parse_charge_id
from events.times import DAY, HOUR, WEEK
from projections.budget_tree import ROOT, parent_of
from projections.live_state import LiveState
from projections.owed import owed_pieces
from services.api import queries
from services.api.deps import SESSION_COOKIE, principal, token_table
from services.api.errors import NotFound
from services.api.models import (
    Answer,
    PositionView,
    RecentPreemption,
    StandingView,
    UsageSeries,
)
from services.api.view import LiveView
from services.dashboard import STATIC
from services.read_models.tables import hourly_usage, ledger_entries, node_states
from services.reports import periods

log = logging.getLogger(__name__)


@overload
def iso(ts: float) -> str: ...
@overload
def iso(ts: None) -> None: ...
def iso(ts: float | None) -> str | None:
    """``2026-11-02T09:00:00Z`` (fractions of a second kept, as the API writes times)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


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
        last: Annotated[int | None, Query(ge=60, le=periods.LATEST)] = None,
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
        try:
            window = resolve_range(now, data_from, start, end, last, bin_s)
        except ValueError as error:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                detail=[
                    {"loc": ["query", "from/to/bin"], "msg": str(error), "type": "value_error"}
                ],
            ) from error
        stored = _stored_runs(engine, name, window)
        with view.read() as state:
            return Timeline.model_validate(timeline(state, name, window, stored, data_from))

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


class PreemptionRow(RecentPreemption):
    """A recent preemption as the page shows it: ``summary`` for its row, the rest on expand
    (``message`` is the API's sentence, positions included)."""

    summary: str
    detail: str
    pass_id: int
    grace_period_s: int
    input_position: list[PositionView]
    budgets: list[StandingView]


class PreemptionRows(Answer):
    as_of: str
    preemptions: list[PreemptionRow]


#: One short phrase per reason code, for the row (the decision record is in the details).
_SUMMARIES = {
    "drain": "its node was cordoned and its contract was over",
    "node-lost": "its node stopped sending heartbeats",
    "cancel": "cancelled by its submitter",
}


def preemption_summary(reason: str, preemptor: str | None, preemptor_budget: str | None) -> str:
    if reason == "preempt-for":
        return f"made room for {preemptor}" + (f" ({preemptor_budget})" if preemptor_budget else "")
    return _SUMMARIES.get(reason, reason)


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
                "summary": preemption_summary(
                    item["reason"], item["preemptor"], item["preemptor_budget"]
                ),
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
                        "detail",
                        "pass_id",
                        "grace_period_s",
                        "input_position",
                        "budgets",
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
        "as_of": iso(now),
        "hours": [iso(at) for at in starts],
        "source": "read-models+live" if from_read_models else "live (current hour only)",
        "budgets": budgets,
        "pools": occupancy,
    }


# -- the timeline -------------------------------------------------------------------------------
#: The bin lengths the timeline offers, in seconds: 10 s up to a week.
BINS = (10, 60, 300, 900, HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, WEEK)
#: Without ``bin``: the shortest of these that cuts the range into at most :data:`AUTO_BINS`
#: (10-second bins for 5 minutes, 1-minute ones for an hour, 15-minute ones for a day, hourly
#: ones for a week, daily ones for 10 weeks). Half days are left out: they draw day and night
#: as a zigzag.
AUTO_LADDER = (10, 60, 300, 900, HOUR, 6 * HOUR, DAY, WEEK)
AUTO_BINS = 180
#: The most bins one answer may hold (a chart has no use for more; like the reports'
#: ``MAX_PERIODS``, it bounds the work and the answer before anything is read).
MAX_BINS = 2_000
#: The longest range a chart covers (the reports cover longer ones).
MAX_SPAN_S = 3 * 366 * DAY
#: The default range is what the data covers, from the pool's first submission to now, but at
#: least this long (a demo that has run a minute)...
MIN_DEFAULT_SPAN_S = 300
#: ... and at most this long (older history: ask for it with ``from``).
MAX_DEFAULT_SPAN_S = 92 * DAY


class BudgetTimeline(Answer):
    """One budget in the pool, bin by bin, in GPUs (averages over each bin's elapsed part; None
    for bins after ``as_of``); an inner budget's figures are the sums of its leaves'."""

    budget: str
    parent: str | None
    leaf: bool
    #: Allocated GPUs in use (what is charged to it).
    delivered_gpus: list[float | None]
    #: Unallocated (burst) GPUs in use: free, and not delivered against what it is owed.
    unallocated_gpus: list[float | None]
    #: min(share x capacity, demand), moment by moment (the definition of docs/api.md).
    owed_gpus: list[float | None]
    #: share x capacity at the start of each bin.
    entitled_gpus: list[float | None]


class Timeline(Answer):
    as_of: str
    pool: str
    #: The first bin's start and the last bin's end.
    start: str
    end: str
    bin_s: int
    #: Start of each bin.
    bins: list[str]
    #: Seconds of each bin up to ``as_of`` (the last one may be partial, later ones are 0).
    covered_s: list[float]
    #: The pool's first submission: where "what the data covers" starts (None: no work yet).
    data_from: str | None
    source: str
    #: GPUs of the pool's nodes that are up (cordoned ones included), bin averages.
    capacity_gpus: list[float | None]
    allocated_gpus: list[float | None]
    unallocated_gpus: list[float | None]
    #: GPUs wanted by allocated work (pending or holding GPUs), bin averages.
    demand_gpus: list[float | None]
    #: (allocated + unallocated) / capacity per bin, and over the whole range.
    occupancy: list[float | None]
    occupancy_over_range: float | None
    budgets: list[BudgetTimeline]


@dataclass(frozen=True)
class Window:
    """``count`` bins of ``bin_s`` seconds from ``start`` (on a multiple of ``bin_s``), read
    at ``now``."""

    start: int
    bin_s: int
    count: int
    now: float

    @property
    def end(self) -> int:
        return self.start + self.bin_s * self.count

    @property
    def stop(self) -> float:
        """Where the data stops: the end, or now if that is earlier."""
        return max(float(self.start), min(float(self.end), self.now))

    def bounds(self) -> list[int]:
        return [self.start + i * self.bin_s for i in range(self.count + 1)]

    def covered(self) -> list[float]:
        return [max(0.0, min(self.stop, a + self.bin_s) - a) for a in self.bounds()[: self.count]]

    def index(self, at: float) -> int:
        return int((at - self.start) // self.bin_s)

    def add(self, series: list[float], lo: float, hi: float, rate: float) -> None:
        """Add ``rate`` x the overlap of ``[lo, hi)`` with each bin (up to now)."""
        lo, hi = max(lo, float(self.start)), min(hi, self.stop)
        if hi <= lo or not rate:
            return
        first = self.index(lo)
        last = min(self.count - 1, math.ceil((hi - self.start) / self.bin_s) - 1)
        for i in range(first, last + 1):
            a = self.start + i * self.bin_s
            overlap = min(hi, a + self.bin_s) - max(lo, a)
            if overlap > 0:
                series[i] += rate * overlap


def _first_pool(state: LiveState) -> str:
    pools = queries.known_pools(state)
    if not pools:
        raise NotFound("no pool is known yet (no node registered)")
    return pools[0]


def first_activity(state: LiveState, pool: str) -> float | None:
    """When the pool's first workload was submitted (where its data starts)."""
    times = [w.submitted_at for w in state.cluster.workloads.values() if pool in w.pools]
    return min(times) if times else None


def auto_bin(span: float) -> int:
    """The shortest of :data:`AUTO_LADDER` cutting ``span`` seconds into at most
    :data:`AUTO_BINS`."""
    return next((b for b in AUTO_LADDER if math.ceil(span / b) <= AUTO_BINS), AUTO_LADDER[-1])


def resolve_range(
    now: float,
    data_from: float | None,
    start: str | None,
    end: str | None,
    last: int | None,
    bin_s: int | None,
) -> Window:
    """The bins for a request, or ValueError saying what is refused: ``last`` with
    ``from``/``to``, a ``to`` not after ``from``, a time outside the reports' range, a range
    over :data:`MAX_SPAN_S`, a ``bin`` not offered, more than :data:`MAX_BINS` bins."""
    if bin_s is not None and bin_s not in BINS:
        raise ValueError(f"bin: one of {', '.join(map(str, BINS))} seconds, not {bin_s}")
    if last is not None and (start is not None or end is not None):
        raise ValueError("give either last or from/to, not both")
    if last is not None:
        lo, hi = now - last, now
    elif start is not None or end is not None:
        hi = now if end is None else float(periods.parse_time(end))
        if start is not None:
            lo = float(periods.parse_time(start))
        else:
            lo = min(hi - MIN_DEFAULT_SPAN_S, data_from if data_from is not None else hi)
    else:
        hi = now
        lo = now - MIN_DEFAULT_SPAN_S if data_from is None else data_from
        lo = max(min(lo, hi - MIN_DEFAULT_SPAN_S), hi - MAX_DEFAULT_SPAN_S)
    if hi <= lo:
        raise ValueError(f"to ({iso(hi)}) must be after from ({iso(lo)})")
    for moment in (lo, hi):
        if not periods.EARLIEST <= moment <= periods.LATEST:
            raise ValueError(
                f"{iso(max(moment, 0.0))} is outside the times a chart may cover "
                f"({periods.iso(periods.EARLIEST)} to {periods.iso(periods.LATEST)})"
            )
    if hi - lo > MAX_SPAN_S:
        raise ValueError(
            f"from..to covers {(hi - lo) / DAY:.0f} days; a chart covers at most 3 years "
            "(the reports cover longer ranges)"
        )
    size = auto_bin(hi - lo) if bin_s is None else bin_s
    first = int(lo) // size * size
    count = max(1, -(-(math.ceil(hi) - first) // size))
    if count > MAX_BINS:
        raise ValueError(
            f"from..to covers {count} bins of {size} s; a chart holds at most {MAX_BINS}: "
            "narrow the range or choose a longer bin"
        )
    return Window(first, size, count, now)


# Runs read from the read models, before the live view is locked: per (workload, attempt),
# its budget, whether allocated, and its GPU-seconds per hour bucket; or, for bins of whole
# hours, the pool's GPU-seconds per (budget, allocated, bucket).
@dataclass
class StoredRuns:
    source: str
    #: Whether the closed hours come from ``hourly`` (bins of whole hours) or from ``runs``.
    hourly_bins: bool = False
    #: (workload, attempt) -> (budget, allocated, {bucket start: GPU-seconds}).
    runs: dict[tuple[str, int], tuple[str, bool, dict[int, int]]] = field(default_factory=dict)
    #: (budget, allocated, bucket start) -> GPU-seconds (hourly bins and longer).
    hourly: dict[tuple[str, bool, int], int] = field(default_factory=dict)
    #: (time, GPUs of the pool's nodes that are up from then on), in time order.
    capacity: list[tuple[float, int]] = field(default_factory=list)


LIVE_ONLY = "live view only: running work (no read-model database, so no history)"


def _stored_runs(engine: Engine | None, pool: str, window: Window) -> StoredRuns:
    if engine is None:
        return StoredRuns(LIVE_ONLY)
    with engine.connect() as connection:
        stored = StoredRuns("")
        stored.capacity = _capacity_steps(connection, pool)
        if window.bin_s % HOUR == 0:
            stored.hourly_bins = True
            stored.source = (
                "read models (hourly usage of closed hours) + running work from the live view"
            )
            query = select(
                hourly_usage.c.budget,
                hourly_usage.c.bucket_start,
                hourly_usage.c.allocated_gpu_s,
                hourly_usage.c.unallocated_gpu_s,
            ).where(
                hourly_usage.c.pool == pool,
                hourly_usage.c.bucket_start >= window.start,
                hourly_usage.c.bucket_start < window.end,
            )
            for budget, at, allocated, unallocated in connection.execute(query):
                stored.hourly[(budget, True, int(at))] = int(allocated)
                stored.hourly[(budget, False, int(at))] = int(unallocated)
            return stored
        stored.source = (
            "read models (each run's ledger charges, placed within their hours) + running "
            "work from the live view"
        )
        # A run's neighbouring hours say where in an hour its charge lies: read one more on
        # either side.
        query = select(
            ledger_entries.c.charge_id,
            ledger_entries.c.workload_id,
            ledger_entries.c.budget,
            ledger_entries.c.bucket_start,
            ledger_entries.c.kind,
            ledger_entries.c.debit_account,
            ledger_entries.c.gpu_seconds,
        ).where(
            ledger_entries.c.pool == pool,
            ledger_entries.c.bucket_start >= window.start // HOUR * HOUR - HOUR,
            ledger_entries.c.bucket_start < window.end + HOUR,
        )
        for row in connection.execute(query):
            parsed = parse_charge_id(str(row.charge_id))
            attempt = 0 if parsed is None else parsed[1]
            seconds = int(row.gpu_seconds)
            if str(row.debit_account).startswith("capacity:"):
                seconds = -seconds  # a reversal: capacity debited, the budget credited
            entry = stored.runs.setdefault(
                (str(row.workload_id), attempt), (str(row.budget), row.kind == "allocated", {})
            )
            at = int(row.bucket_start)
            entry[2][at] = entry[2].get(at, 0) + seconds
        return stored


def _capacity_steps(connection: Connection, pool: str) -> list[tuple[float, int]]:
    """The pool's GPUs on nodes that are up (cordoned and drained ones count, down ones do
    not), after each node change."""
    query = (
        select(
            node_states.c.node, node_states.c.gpus, node_states.c.state, node_states.c.effective_at
        )
        .where(node_states.c.pool == pool)
        .order_by(node_states.c.effective_at, node_states.c.node, node_states.c.event_id)
    )
    up: dict[str, int] = {}
    steps: list[tuple[float, int]] = []
    for node, gpus, state, at in connection.execute(query):
        up[str(node)] = 0 if state == "down" else int(gpus)
        total = sum(up.values())
        if steps and steps[-1][0] == float(at):
            steps[-1] = (float(at), total)
        elif not steps or steps[-1][1] != total:
            steps.append((float(at), total))
    return steps


class _Steps:
    """A step function of time read in increasing order (a cursor per call site is enough)."""

    def __init__(self, steps: list[tuple[float, int]], start: float) -> None:
        self.steps = steps
        self.i = bisect_right(steps, (start, math.inf)) - 1

    def at(self, moment: float) -> int:
        steps, i = self.steps, self.i
        while i + 1 < len(steps) and steps[i + 1][0] <= moment:
            i += 1
        self.i = i
        return steps[i][1] if i >= 0 else 0


def _integrate(window: Window, steps: list[tuple[float, int]]) -> list[float]:
    """Level x seconds of a step function, per bin."""
    series = [0.0] * window.count
    first = max(0, bisect_right(steps, (float(window.start), math.inf)) - 1)
    for j in range(first, len(steps)):
        at, level = steps[j]
        if at >= window.stop:
            break
        following = steps[j + 1][0] if j + 1 < len(steps) else window.stop
        window.add(series, at, following, level)
    return series


Usage = dict[tuple[str, bool], list[float]]


def _usage(state: LiveState, pool: str, window: Window, stored: StoredRuns) -> Usage:
    """GPU-seconds per (budget, allocated) per bin."""
    usage: Usage = defaultdict(lambda: [0.0] * window.count)
    running: set[tuple[str, int]] = set()
    current_hour = int(window.now) // HOUR * HOUR
    for workload_id in sorted(state.cluster.active.get(pool, ())):
        workload = state.cluster.workloads[workload_id]
        if workload.started_at is None or workload.pool != pool:
            continue
        running.add((workload_id, workload.attempt))
        # Hourly bins take its closed hours from the read models' hourly usage; otherwise the
        # run is counted here whole (its posted hours are skipped below).
        since = workload.started_at
        if stored.hourly_bins:
            since = max(since, current_hour)
        series = usage[(workload.budget, workload.allocated)]
        window.add(series, since, window.now, workload.gpus)
    for (budget, allocated, at), gpu_s in stored.hourly.items():
        if gpu_s and window.start <= at < window.end:
            usage[(budget, allocated)][window.index(at)] += gpu_s
    for key, (budget, allocated, buckets) in sorted(stored.runs.items()):
        if key in running:
            continue
        known = state.cluster.workloads.get(key[0])
        series = usage[(budget, allocated)]
        for at, gpu_s in sorted(buckets.items()):
            if gpu_s <= 0:
                continue
            if known is None:  # unknown gang size: spread over the hour
                window.add(series, at, at + HOUR, gpu_s / HOUR)
                continue
            length = min(float(HOUR), gpu_s / known.gpus)
            before, after = (at - HOUR) in buckets, (at + HOUR) in buckets
            if before and not after:
                lo = float(at)  # ended in this hour
            elif after and not before:
                lo = at + HOUR - length  # started in it
            elif before and after:
                lo = float(at)
            else:  # started and ended within it: when is told by the live view
                lo = _placed_within(state, key, at, length)
            window.add(series, lo, lo + length, gpu_s / length)
    return usage


def _placed_within(state: LiveState, key: tuple[str, int], bucket: int, length: float) -> float:
    """Where a run of ``length`` seconds that started and ended within the hour ``bucket``
    began: its start if the live view still knows it (the workload's latest attempt), else
    its preemption's deadline minus its length (victims exit within the grace period), else
    its placement (an agent starts placed work at once)."""
    workload_id, attempt = key
    workload = state.cluster.workloads.get(workload_id)
    start: float = float(bucket)
    if workload is not None and workload.attempt == attempt and workload.started_at is not None:
        start = workload.started_at
    else:
        records = state.commands.get(workload_id, [])
        ends = [
            r.time + r.command.grace_period_s
            for r in records
            if isinstance(r.command, PreemptCommand) and r.command.attempt == attempt
        ]
        placed = [
            r.time
            for r in records
            if not isinstance(r.command, PreemptCommand) and r.command.attempt == attempt
        ]
        if ends:
            start = ends[0] - length
        elif placed:
            start = placed[0]
    return min(max(start, float(bucket)), bucket + HOUR - length)


def timeline(
    state: LiveState,
    pool: str,
    window: Window,
    stored: StoredRuns,
    data_from: float | None,
) -> dict[str, Any]:
    """The pool over ``window``: see :class:`Timeline`."""
    covered = window.covered()
    capacity_steps = stored.capacity or [(float("-inf"), state.cluster.capacity(pool))]
    usage = _usage(state, pool, window, stored)
    demand_steps = {
        budget: steps for (p, budget), steps in state.demand.steps.items() if p == pool and steps
    }
    tree = state.tree
    leaves = sorted(
        {p for p, n in tree.nodes.items() if p != ROOT and n.is_leaf}
        | {budget for budget, _ in usage}
        | set(demand_steps)
    )
    owed = _owed_per_bin(state, pool, window, demand_steps, capacity_steps)
    zeros = [0.0] * window.count
    demand_total = [0.0] * window.count
    for steps in demand_steps.values():
        demand_total = [a + b for a, b in zip(demand_total, _integrate(window, steps), strict=True)]
    capacity = _integrate(window, capacity_steps)
    allocated = [sum(usage[(b, True)][i] for b in leaves) for i in range(window.count)]
    unallocated = [sum(usage[(b, False)][i] for b in leaves) for i in range(window.count)]

    def mean(values: list[float]) -> list[float | None]:
        return [
            round(v / seconds, 4) if seconds > 0 else None
            for v, seconds in zip(values, covered, strict=True)
        ]

    # A leaf's series, then summed up the tree.
    sums: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for leaf in leaves:
        own = (
            usage.get((leaf, True), zeros),
            usage.get((leaf, False), zeros),
            owed.get(leaf, zeros),
        )
        for path in tree.ancestors(leaf) if leaf in tree.nodes else [leaf]:
            if path not in sums:
                sums[path] = ([0.0] * window.count, [0.0] * window.count, [0.0] * window.count)
            for total, part in zip(sums[path], own, strict=True):
                for i, value in enumerate(part):
                    total[i] += value
    cursor = _Steps(capacity_steps, float(window.start))
    bounds = window.bounds()
    shares = [tree.shares(pool, float(a)) for a in bounds[: window.count]]
    capacity_at = [cursor.at(float(a)) for a in bounds[: window.count]]
    budgets = []
    for path in sorted(sums):
        node = tree.nodes.get(path)
        delivered, burst, owed_s = sums[path]
        budgets.append(
            {
                "budget": path,
                "parent": (parent_of(path) or None) if node is not None else None,
                "leaf": node is None or node.is_leaf,
                "delivered_gpus": mean(delivered),
                "unallocated_gpus": mean(burst),
                "owed_gpus": mean(owed_s),
                "entitled_gpus": [
                    round(share.get(path, 0.0) * gpus, 4) if seconds > 0 else None
                    for share, gpus, seconds in zip(shares, capacity_at, covered, strict=True)
                ],
            }
        )
    busy = sum(allocated) + sum(unallocated)
    total_capacity = sum(capacity)
    return {
        "as_of": iso(window.now),
        "pool": pool,
        "start": iso(window.start),
        "end": iso(window.end),
        "bin_s": window.bin_s,
        "bins": [iso(a) for a in bounds[: window.count]],
        "covered_s": [round(c, 3) for c in covered],
        "data_from": iso(data_from),
        "source": stored.source,
        "capacity_gpus": mean(capacity),
        "allocated_gpus": mean(allocated),
        "unallocated_gpus": mean(unallocated),
        "demand_gpus": mean(demand_total),
        "occupancy": [
            round((a + u) / c, 4) if c > 0 else None
            for a, u, c in zip(allocated, unallocated, capacity, strict=True)
        ],
        "occupancy_over_range": round(busy / total_capacity, 4) if total_capacity else None,
        "budgets": budgets,
    }


def _owed_per_bin(
    state: LiveState,
    pool: str,
    window: Window,
    demand_steps: dict[str, list[tuple[float, int]]],
    capacity_steps: list[tuple[float, int]],
) -> dict[str, list[float]]:
    """GPU-seconds owed to each leaf in each bin: min(share x capacity, demand) integrated
    piece by piece (:func:`projections.owed.owed_pieces`, the one definition), the pieces cut
    at bin bounds and wherever demand, shares or capacity change."""
    lo, hi = float(window.start), window.stop
    if hi <= lo or not demand_steps:
        return {}
    cuts = {float(a) for a in window.bounds() if a < hi} | {hi}
    cuts.update(state.tree.change_times(lo, hi))
    cuts.update(t for t, _ in capacity_steps if lo < t < hi)
    for steps in demand_steps.values():
        cuts.update(t for t, _ in steps if lo < t < hi)
    levels = {leaf: _Steps(steps, lo) for leaf, steps in demand_steps.items()}
    capacity = _Steps(capacity_steps, lo)

    def wanted(a: float, b: float) -> dict[str, float]:
        return {leaf: cursor.at(a) * (b - a) for leaf, cursor in levels.items()}

    def entitled(a: float) -> dict[str, float]:
        shares, gpus = state.tree.shares(pool, a), capacity.at(a)
        return {leaf: shares.get(leaf, 0.0) * gpus for leaf in levels}

    owed: dict[str, list[float]] = {leaf: [0.0] * window.count for leaf in levels}
    for a, _b, piece in owed_pieces(sorted(cuts), wanted, entitled):
        i = window.index(a)
        for leaf, gpu_s in piece.items():
            owed[leaf][i] += gpu_s
    return owed
