"""``/budgets``: the tree with its fair-share figures; weights and members."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from services.api import application, queries
from services.api.application import Outcome
from services.api.deps import Context, User
from services.api.models import (
    BudgetDetail,
    BudgetReport,
    MemberAnswer,
    MemberRequest,
    WeightAnswer,
    WeightRequest,
)

router = APIRouter(tags=["budgets"])

_WEIGHT_SET = {
    Outcome.DONE: status.HTTP_200_OK,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}
_MEMBER_ADDED = {
    Outcome.DONE: status.HTTP_201_CREATED,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}


@router.get("/budgets")
def budgets(who: User, ctx: Context, pool: str | None = None) -> BudgetReport:
    """The budget tree with, per pool: share, window usage, usage ratio, rank, owed and
    delivered GPU-seconds (see ``owed`` in the answer for how it is computed)."""
    now = ctx.clock()
    with ctx.view.read() as state:
        pools = None if pool is None else queries.pools_or_404(state, pool)
        return queries.budget_report(state, now, ctx.window_s, pools)


@router.get("/budgets/{budget:path}")
def budget(budget: str, who: User, ctx: Context) -> BudgetDetail:
    now = ctx.clock()
    with ctx.view.read() as state:
        return queries.budget_detail(state, budget, now, ctx.window_s)


@router.put("/budgets/{budget:path}/weight")
def set_weight(
    budget: str, body: WeightRequest, who: User, response: Response, ctx: Context
) -> WeightAnswer:
    """Set a budget's weight (in every pool, or in ``pool``): a manager of its parent."""
    result = application.set_weight(ctx, who, budget, body)
    response.status_code = _WEIGHT_SET[result.outcome]
    return result.answer


@router.post("/budgets/{budget:path}/members", status_code=status.HTTP_201_CREATED)
def add_member(
    budget: str, body: MemberRequest, who: User, response: Response, ctx: Context
) -> MemberAnswer:
    """Grant ``user`` a role on the budget's subtree: a manager of the budget (or above)."""
    result = application.add_member(ctx, who, budget, body)
    response.status_code = _MEMBER_ADDED[result.outcome]
    return result.answer
