"""``/workloads``: submit, list, show, cancel, and why one waits or was preempted;
``/history``: finished work (like sacct); and ``/arrays`` (:mod:`.arrays`), whose elements
are workloads."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from services.api import queries
from services.api.application import Outcome
from services.api.deps import Context, User
from services.api.errors import Invalid, NotFound
from services.api.models import (
    CancelAnswer,
    CancelRequest,
    SubmitAnswer,
    SubmitRequest,
    WhyView,
    WorkloadList,
    WorkloadStatus,
    WorkloadView,
)
from services.api.past_work import past_history, past_workload
from services.api.routes import arrays
from services.api.writes import workloads as writes
from services.reports.times import parse_time

router = APIRouter(tags=["workloads"])
router.include_router(arrays.router)

_SUBMITTED = {
    Outcome.DONE: status.HTTP_201_CREATED,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}
#: A cancel is accepted, not done, until the scheduler has stopped the work.
_CANCELLED = {
    Outcome.DONE: status.HTTP_202_ACCEPTED,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}


@router.post("/workloads", status_code=status.HTTP_201_CREATED)
def submit(body: SubmitRequest, who: User, response: Response, ctx: Context) -> SubmitAnswer:
    """Submit a workload. Same id and same content again: 200 with the existing one;
    same id, other content: 409."""
    result = writes.submit(ctx, who, body)
    response.status_code = _SUBMITTED[result.outcome]
    return result.answer


@router.get("/workloads")
def list_workloads(
    who: User,
    ctx: Context,
    status_: Annotated[WorkloadStatus | None, Query(alias="status")] = None,
    budget: str | None = None,
    submitter: str | None = None,
    pool: str | None = None,
    preempted: Annotated[
        bool, Query(description="only work preempted at least once (it was requeued)")
    ] = False,
    array: Annotated[str | None, Query(description="only the elements of this job array")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> WorkloadList:
    """Workloads, newest first (an array's elements by index), filtered by status, budget (its
    subtree), submitter, pool, job array, and whether they were ever preempted."""
    now = ctx.clock()
    with ctx.view.read() as state:
        return queries.workload_list(
            state,
            status=status_,
            budget=budget,
            submitter=submitter,
            pool=pool,
            limit=limit,
            preempted=preempted,
            now=now,
            array=array,
        )


@router.get("/history")
def history(
    who: User,
    ctx: Context,
    budget: str | None = None,
    submitter: str | None = None,
    pool: str | None = None,
    since: Annotated[
        str | None, Query(description="only work that ended at or after (ISO time, UTC)")
    ] = None,
    array: Annotated[str | None, Query(description="only the elements of this job array")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> WorkloadList:
    """Finished work, the latest end first (like sacct): status, exit code, elapsed time and
    the GPU-seconds charged; work that will be requeued is not finished."""
    try:
        start = None if since is None else float(parse_time(since))
    except ValueError as error:  # not a time, or out of range
        raise Invalid("since", str(error), location="query", user=who.user) from error
    now = ctx.clock()
    with ctx.view.read() as state:
        live = queries.history(
            state,
            now,
            budget=budget,
            submitter=submitter,
            pool=pool,
            since=start,
            limit=limit,
            array=array,
        )
        forgotten_before = state.forgotten_before
    if start is not None and start >= forgotten_before:
        return live
    # what the view forgot (ended before it last tidied) comes after all it holds
    total, past = past_history(
        ctx.read_model_engine(),
        before=forgotten_before,
        budget=budget,
        submitter=submitter,
        pool=pool,
        since=start,
        limit=limit - len(live.workloads),
        array=array,
    )
    return WorkloadList(total=live.total + total, workloads=[*live.workloads, *past])


@router.get("/workloads/{workload_id}")
def get_workload(workload_id: str, who: User, ctx: Context) -> WorkloadView:
    """A workload; one that ended before the live window, from the read models (archived).
    A unique prefix of a live workload's id (4 characters or more) names it, as in git."""
    now = ctx.clock()
    with ctx.view.read() as state:
        workload = state.cluster.workloads.get(queries.resolve_workload_id(state, workload_id))
        if workload is not None:
            return queries.workload_view(state, workload, now, window_s=ctx.window_s)
    past = past_workload(ctx.read_model_engine(), workload_id)
    if past is None:
        raise NotFound(f"unknown workload {workload_id!r}")
    return past


@router.post("/workloads/{workload_id}/cancel")
def cancel(
    workload_id: str,
    who: User,
    response: Response,
    ctx: Context,
    body: CancelRequest | None = None,
) -> CancelAnswer:
    """Cancel a workload (its submitter, a manager of its budget, or an admin). Running
    work is stopped by the scheduler's preempt command; the answer is 202 until then."""
    result = writes.cancel(ctx, who, workload_id, body.reason if body else "")
    response.status_code = _CANCELLED[result.outcome]
    return result.answer


@router.get("/workloads/{workload_id}/why")
def why(workload_id: str, who: User, ctx: Context) -> WhyView:
    """Why a workload is pending (per pool: position and reasons) and why it was
    preempted (the decision records of its preempt commands)."""
    now = ctx.clock()
    with ctx.view.read() as state:
        return queries.why_view(state, workload_id, now, ctx.window_s)
