"""``/budgets``: the tree with its fair-share figures; creating and closing budgets, their
weights, members and bound groups (Kubernetes namespaces, Slurm accounts); ``/namespaces`` and
``/accounts``: every binding of each kind."""

from __future__ import annotations

from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Query, Response, status

from events.types import Identifier, Role
from services.api import queries
from services.api.application import Outcome, Result
from services.api.deps import Context, User, token_table
from services.api.models import (
    AccountBindingAnswer,
    AccountBindingList,
    AccountBindRequest,
    BudgetAnswer,
    BudgetCloseRequest,
    BudgetCreateRequest,
    BudgetDetail,
    BudgetReport,
    MemberAnswer,
    MemberRequest,
    NamespaceBindingAnswer,
    NamespaceBindingList,
    NamespaceBindRequest,
    RevokeAnswer,
    WeightAnswer,
    WeightRequest,
)
from services.api.tokens import TokenTable
from services.api.writes import budgets as writes
from services.api.writes import groups, members

router = APIRouter(tags=["budgets"])
A = TypeVar("A")

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


_CREATED = {
    Outcome.DONE: status.HTTP_201_CREATED,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}
#: Closing and revoking: 200 once done (or already so), 202 while not yet visible.
_CHANGED = {
    Outcome.DONE: status.HTTP_200_OK,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}


@router.get("/budgets")
def budgets(who: User, ctx: Context, pool: str | None = None) -> BudgetReport:
    """The budget tree with, per pool: share, window usage, usage ratio, rank, fair-share
    factor, and delivered and owed GPU-seconds from the read models (see ``owed`` and
    ``delivered_owed`` in the answer for how and where they were computed)."""
    now = ctx.clock()
    with ctx.view.read() as state:
        pools = None if pool is None else queries.pools_or_404(state, pool)
    figures = queries.window_figures(ctx.read_model_engine(), now, ctx.window_s, pool)
    with ctx.view.read() as state:
        return queries.budget_report(state, now, ctx.window_s, pools, figures)


@router.post("/budgets", status_code=status.HTTP_201_CREATED)
def create_budget(
    body: BudgetCreateRequest, who: User, response: Response, ctx: Context
) -> BudgetAnswer:
    """Create a budget under an open parent: a manager of the parent (top-level: admins).
    The same budget again: 200; other weights: 409."""
    return _answer(writes.create_budget(ctx, who, body), response, _CREATED)


@router.post("/budgets/{budget:path}/close")
def close_budget(
    budget: str,
    who: User,
    response: Response,
    ctx: Context,
    body: BudgetCloseRequest | None = None,
) -> BudgetAnswer:
    """Close a budget: its subtree takes no new work (a manager of its parent)."""
    result = writes.close_budget(ctx, who, budget, body or BudgetCloseRequest())
    return _answer(result, response, _CHANGED)


@router.get("/budgets/{budget:path}")
def budget(budget: str, who: User, ctx: Context) -> BudgetDetail:
    now = ctx.clock()
    with ctx.view.read() as state:
        queries.budget_or_404(state, budget)
    figures = queries.window_figures(ctx.read_model_engine(), now, ctx.window_s)
    with ctx.view.read() as state:
        return queries.budget_detail(state, budget, now, ctx.window_s, figures)


@router.put("/budgets/{budget:path}/weight")
def set_weight(
    budget: str, body: WeightRequest, who: User, response: Response, ctx: Context
) -> WeightAnswer:
    """Set a budget's weight (in every pool, or in ``pool``): a manager of its parent."""
    result = writes.set_weight(ctx, who, budget, body)
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
    result = members.add_member(ctx, who, budget, body, known_users=known)
    response.status_code = _MEMBER_ADDED[result.outcome]
    return result.answer


@router.delete("/budgets/{budget:path}/members/{user}")
def revoke_member(
    budget: str,
    user: Identifier,
    who: User,
    response: Response,
    ctx: Context,
    role: Annotated[Role, Query()] = "member",
) -> RevokeAnswer:
    """Take a role on the budget from a user: a manager of the budget (or above). Not held
    there: 200 with ``changed`` false (and where they still hold it, if above)."""
    result = members.revoke_member(ctx, who, budget, user, role)
    return _answer(result, response, _CHANGED)


@router.post("/budgets/{budget:path}/namespaces", status_code=status.HTTP_201_CREATED)
def bind_namespace(
    budget: str, body: NamespaceBindRequest, who: User, response: Response, ctx: Context
) -> NamespaceBindingAnswer:
    """Let work of a Kubernetes namespace of a cluster charge this leaf budget (its
    ``fairshare.dev/budget`` label naming it, or, with ``default``, naming none): a manager of
    the budget (or above). A later default for the namespace replaces the earlier one. The
    same binding again: 200 with ``changed`` false."""
    result = groups.bind_namespace(ctx, who, budget, body)
    return _answer(result, response, _MEMBER_ADDED)


@router.delete("/budgets/{budget:path}/namespaces/{cluster}/{namespace}")
def unbind_namespace(
    budget: str,
    cluster: Identifier,
    namespace: str,
    who: User,
    response: Response,
    ctx: Context,
) -> NamespaceBindingAnswer:
    """The namespace may no longer charge this budget: a manager of the budget (or above).
    Not bound: 200 with ``changed`` false."""
    result = groups.unbind_namespace(ctx, who, budget, cluster, namespace)
    return _answer(result, response, _CHANGED)


@router.get("/namespaces")
def namespace_bindings(who: User, ctx: Context, cluster: str | None = None) -> NamespaceBindingList:
    """Which Kubernetes namespaces may charge which budgets (of one cluster), with each
    namespace's default; ``counts`` false: the budget is closed, the binding no longer lets
    work charge it."""
    now = ctx.clock()
    with ctx.view.read() as state:
        return queries.namespace_bindings(state, now, cluster)


@router.post("/budgets/{budget:path}/accounts", status_code=status.HTTP_201_CREATED)
def bind_account(
    budget: str, body: AccountBindRequest, who: User, response: Response, ctx: Context
) -> AccountBindingAnswer:
    """Let work of a Slurm account of a cluster (``sbatch --account``) charge this leaf
    budget: a manager of the budget (or above). Binding an account always makes the budget
    its default: an account's work names no budget, so an account charges one budget, the
    one it was bound to last (binding it to another replaces the default, as for namespaces;
    ``replaced_default`` names the earlier one). The same binding again: 200 with
    ``changed`` false."""
    result = groups.bind_account(ctx, who, budget, body)
    return _answer(result, response, _MEMBER_ADDED)


@router.delete("/budgets/{budget:path}/accounts/{cluster}/{account}")
def unbind_account(
    budget: str,
    cluster: Identifier,
    account: str,
    who: User,
    response: Response,
    ctx: Context,
) -> AccountBindingAnswer:
    """The Slurm account may no longer charge this budget: a manager of the budget (or
    above). Not bound: 200 with ``changed`` false."""
    result = groups.unbind_account(ctx, who, budget, cluster, account)
    return _answer(result, response, _CHANGED)


@router.get("/accounts")
def account_bindings(who: User, ctx: Context, cluster: str | None = None) -> AccountBindingList:
    """Which Slurm accounts may charge which budgets (of one cluster), with each account's
    default (the budget its work charges); ``counts`` false: the budget is closed, the
    binding no longer lets work charge it."""
    now = ctx.clock()
    with ctx.view.read() as state:
        return queries.account_bindings(state, now, cluster)


def _answer(result: Result[A], response: Response, codes: dict[Outcome, int]) -> A:
    response.status_code = codes[result.outcome]
    return result.answer
