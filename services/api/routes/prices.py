"""``/prices``: what a GPU-hour costs in each pool, from when (admins set them; anyone reads
them)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from services.api.application import Outcome
from services.api.deps import Context, User
from services.api.models import PriceAnswer, PriceList, PriceRequest
from services.api.writes import prices as writes

router = APIRouter(tags=["prices"])

_PRICE_SET = {
    Outcome.DONE: status.HTTP_201_CREATED,
    Outcome.UNCHANGED: status.HTTP_200_OK,
    Outcome.ACCEPTED: status.HTTP_202_ACCEPTED,
}


@router.get("/prices")
def prices(who: User, ctx: Context, pool: str | None = None) -> PriceList:
    """Every price (list prices and negotiated rates), by pool, subtree and effective time,
    from the live state's price book."""
    with ctx.view.read() as state:
        return writes.price_list(state, pool)


@router.post("/prices", status_code=status.HTTP_201_CREATED)
def set_price(body: PriceRequest, who: User, response: Response, ctx: Context) -> PriceAnswer:
    """Set the price of a GPU-hour in a pool from ``effective_at`` on (admins): ``201`` new,
    ``200`` this very price already set, ``409`` another price for that instant."""
    result = writes.set_price(ctx, who, body)
    response.status_code = _PRICE_SET[result.outcome]
    return result.answer
