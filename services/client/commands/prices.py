"""Price commands: ``prices set`` (admins) and ``prices list``: what a GPU-hour costs in each
pool, from when, as list prices and negotiated rates of budget subtrees."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from services.client.commands.common import (
    ApiOption,
    CaOption,
    JsonOption,
    PoolFilter,
    TokenOption,
    ask,
    emit,
)
from services.client.constants import DEFAULT_API
from services.client.terminal import FittedTable, plain

if TYPE_CHECKING:
    from services.api.models import PriceAnswer, PriceList


def set_price(
    ctx: typer.Context,
    pool: Annotated[str, typer.Argument(help="the pool, e.g. a100")],
    amount: Annotated[
        str, typer.Argument(help="the price of one GPU-hour, a decimal (at most 6 decimals)")
    ],
    currency: Annotated[
        str, typer.Option(help="ISO 4217 code (one billing currency: that of the first price)")
    ],
    effective_at: Annotated[
        str | None,
        typer.Option(
            help="from when, an ISO time on the hour, e.g. 2026-12-01T00:00:00Z (default: the "
            "start of the current hour; never before the current month)"
        ),
    ] = None,
    budget: Annotated[
        str | None, typer.Option(help="a negotiated rate for this budget's subtree")
    ] = None,
    reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set the price of a GPU-hour in a pool, from an hour on (admins)."""
    answer = ask(
        ctx,
        api,
        token,
        ca,
        lambda c: c.set_price(
            pool,
            amount,
            currency.upper(),
            effective_at=effective_at,
            budget=budget,
            reason=reason,
        ),
    )
    emit(answer, as_json, lambda o: o.print(plain(_price_line(pool, answer))))


def _price_line(pool: str, answer: PriceAnswer) -> str:
    from services.api.models import PriceSetView

    if not isinstance(answer, PriceSetView):
        return f"{pool}: price recorded; not yet visible"
    whose = f" for {answer.budget}" if answer.budget else ""
    line = (
        f"{pool}: {answer.per_gpu_hour} {answer.currency} per GPU-hour{whose} "
        f"from {answer.effective_at}"
    )
    if answer.reason:
        line += f" ({answer.reason})"
    return line + ("" if answer.changed else "; already set")


def list_prices(
    ctx: typer.Context,
    pool: PoolFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every price: list prices and negotiated rates, by pool and from when."""
    answer = ask(ctx, api, token, ca, lambda c: c.prices(pool))
    emit(answer, as_json, lambda o: o.print(_price_table(answer)))


def _price_table(answer: PriceList) -> FittedTable:
    table = FittedTable(
        "POOL",
        "BUDGET",
        "PER GPU-HOUR",
        "CURRENCY",
        "FROM",
        "SET BY",
        "REASON",
        whole=("POOL", "BUDGET"),
        drop=("REASON", "SET BY"),
        title=None if answer.prices else "no prices set",
    )
    for price in answer.prices:
        table.add_row(
            (
                price.pool,
                price.budget or "(list price)",
                price.per_gpu_hour,
                price.currency,
                price.effective_at,
                price.set_by,
                price.reason or "-",
            )
        )
    return table
