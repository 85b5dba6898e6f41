"""``/queue``: pending work in scheduling order, with why each workload waits."""

from __future__ import annotations

from fastapi import APIRouter

from services.api import queries
from services.api.deps import Context, User
from services.api.models import QueueView

router = APIRouter(tags=["queue"])


@router.get("/queue")
def queue(
    who: User,
    ctx: Context,
    pool: str | None = None,
    budget: str | None = None,
    submitter: str | None = None,
    reasons: bool = True,
    start: bool = False,
    array: str | None = None,
) -> QueueView:
    """Pending work per pool in the order the scheduler considers it, with each
    workload's position and why it is pending (the elements an array's limit holds back come
    last); with ``start``, when each should start; ``array``: only its elements."""
    now = ctx.clock()
    with ctx.view.read() as state:
        return queries.queue_view(
            state,
            now,
            ctx.window_s,
            pool=pool,
            budget=budget,
            submitter=submitter,
            reasons=reasons,
            start=start,
            array=array,
        )
