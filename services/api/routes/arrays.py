"""``/arrays``: submit a job array, read its summary, cancel it whole (``sbatch --array``,
``scancel ARRAY``). Its elements are workloads: ``/workloads/{array}_{index}`` for one,
``/workloads?array=`` and ``/queue?array=`` for all."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from services.api import arrays
from services.api.application import Outcome
from services.api.deps import Context, User
from services.api.models import (
    ArrayCancelView,
    ArraySubmitAnswer,
    ArraySubmitRequest,
    ArrayView,
    CancelRequest,
)

router = APIRouter(tags=["arrays"])

_SUBMITTED = {
    Outcome.DONE: status.HTTP_201_CREATED,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}


@router.post("/arrays", status_code=status.HTTP_201_CREATED)
def submit_array(
    body: ArraySubmitRequest, who: User, response: Response, ctx: Context
) -> ArraySubmitAnswer:
    """Submit a job array: one workload ``<array_id>_<index>`` per index, recorded all or
    none. Same id and same content again: 200 with the existing array; same id, other
    content, or an id that is taken: 409."""
    result = arrays.submit_array(ctx, who, body)
    response.status_code = _SUBMITTED[result.outcome]
    return result.answer


@router.get("/arrays/{array_id}")
def get_array(array_id: str, who: User, ctx: Context) -> ArrayView:
    """An array: what each element asks for, and how many elements are in each state (an
    array the view has forgotten, every element ended a window ago, from the read models)."""
    return arrays.array_or_past(ctx, array_id)


@router.post("/arrays/{array_id}/cancel")
def cancel_array(
    array_id: str,
    who: User,
    response: Response,
    ctx: Context,
    body: CancelRequest | None = None,
) -> ArrayCancelView:
    """Cancel every element still pending or running (its submitter, a manager of its
    budget, or an admin): 202 (running elements stop when the scheduler's preempt commands
    are carried out), 200 when none was left to cancel."""
    result = arrays.cancel_array(ctx, who, array_id, body.reason if body else "")
    unchanged = result.outcome is Outcome.UNCHANGED
    response.status_code = status.HTTP_200_OK if unchanged else status.HTTP_202_ACCEPTED
    return result.answer
