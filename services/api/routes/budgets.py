"""``/budgets``: the tree with its fair-share figures; weights and members."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response, status

from services.api import application, queries
from services.api.application import Outcome
from services.api.deps import Context, User, token_table
from services.api.models import (
    BudgetDetail,
    BudgetReport,
    MemberAnswer,
    MemberRequest,
    WeightAnswer,
    WeightRequest,
)
from services.api.tokens import TokenTable

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
    budget: str,
    body: MemberRequest,
    who: User,
    response: Response,
    ctx: Context,
    tokens: Annotated[TokenTable, Depends(token_table)],
) -> MemberAnswer:
    """Grant ``user`` a role on the budget's subtree: a manager of the budget (or above). The
    user must be one this API knows (a holder of a token): a typo would grant nobody."""
    known = {principal.user for principal in tokens.values()}
    result = application.add_member(ctx, who, budget, body, known_users=known)
    response.status_code = _MEMBER_ADDED[result.outcome]
    return result.answer
