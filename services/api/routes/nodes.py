"""``/nodes``: their state, work and cordon reasons; cordon and uncordon (admins);
``/pools``: the pools they form."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from services.api import queries
from services.api.application import Outcome, Result
from services.api.deps import Context, User
from services.api.models import CordonRequest, NodeAnswer, NodeList, NodeView, PoolList
from services.api.writes import cordons

router = APIRouter(tags=["nodes"])


@router.get("/nodes")
def nodes(who: User, ctx: Context, pool: str | None = None) -> NodeList:
    with ctx.view.read() as state:
        return queries.node_list(state, pool)


@router.get("/pools")
def pools(who: User, ctx: Context) -> PoolList:
    """Every pool with its capacity and free GPUs (``fairshare submit`` takes the only one
    when there is one)."""
    with ctx.view.read() as state:
        return queries.pool_list(state)


@router.get("/nodes/{node}")
def node(node: str, who: User, ctx: Context) -> NodeView:
    with ctx.view.read() as state:
        return queries.node_view(queries.node_or_404(state, node, user=who.user))


@router.post("/nodes/{node}/cordon")
def cordon(
    node: str, who: User, response: Response, ctx: Context, body: CordonRequest | None = None
) -> NodeAnswer:
    """Stop new placements on a node (admins); its work drains as contracts end."""
    result = cordons.set_cordon(ctx, who, node, True, body.reason if body else "")
    return _answer(result, response)


@router.post("/nodes/{node}/uncordon")
def uncordon(node: str, who: User, response: Response, ctx: Context) -> NodeAnswer:
    """Return a node to service (admins)."""
    return _answer(cordons.set_cordon(ctx, who, node, False), response)


def _answer(result: Result[NodeAnswer], response: Response) -> NodeAnswer:
    if result.outcome is Outcome.ACCEPTED:
        response.status_code = status.HTTP_202_ACCEPTED
    return result.answer
