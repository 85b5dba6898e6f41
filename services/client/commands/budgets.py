"""Budget commands: ``share`` (sshare), ``budgets set-weight`` and ``budgets add-member``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from services.api.models import BudgetReport, MemberGrant
from services.client.api import DEFAULT_API
from services.client.commands.common import (
    ApiOption,
    JsonOption,
    PoolFilter,
    TokenOption,
    ask,
    emit,
    hours,
    num,
)
from services.client.terminal import add_row, plain


def share(
    ctx: typer.Context,
    pool: PoolFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The budget tree: shares, window usage, usage ratio, rank, owed vs delivered
    (like sshare)."""
    answer = ask(ctx, api, token, lambda c: c.budgets(pool))
    emit(answer, as_json, lambda o: o.print(_share_table(answer)))


def _share_table(answer: BudgetReport) -> Table:
    table = Table(
        "BUDGET",
        "POOL",
        "WEIGHT",
        "SHARE",
        "USAGE GPU-h",
        "RATIO",
        "RANK",
        "OWED GPU-h",
        "DELIVERED",
        "DEMAND",
        title=plain(f"window {answer.window_s // 3600} h, as of {answer.as_of}"),
    )
    for budget in answer.budgets:
        name = "  " * budget.depth + budget.budget.rsplit("/", 1)[-1]
        for pool_name, figures in budget.pools.items():
            ratio = figures.delivered_ratio
            add_row(
                table,
                (
                    name + (" (closed)" if budget.closed else ""),
                    pool_name,
                    num(budget.pool_weights.get(pool_name, budget.weight)),
                    num(figures.share, 3),
                    hours(figures.usage_gpu_s),
                    num(figures.usage_ratio, 3),
                    figures.rank or figures.sibling_rank or "-",
                    hours(figures.owed_gpu_s),
                    "-" if ratio is None else f"{ratio:.1%}",
                    figures.demand_gpus,
                ),
            )
    return table


def set_weight(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget, e.g. lab/robotics")],
    weight: Annotated[float, typer.Argument(help="positive weight among its siblings")],
    pool: Annotated[str | None, typer.Option(help="only in this pool")] = None,
    reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set a budget's weight (a manager of its parent)."""
    answer = ask(ctx, api, token, lambda c: c.set_weight(budget, weight, pool, reason))
    where = f" in {pool}" if pool else ""
    done = plain(f"{budget}: weight {weight:g}{where}")
    emit(answer, as_json, lambda o: o.print(done))


def add_member(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget")],
    user: Annotated[str, typer.Argument(help="the user")],
    role: Annotated[str, typer.Option(help="member or manager")] = "member",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Grant a user a role on a budget's subtree (a manager of the budget)."""
    answer = ask(ctx, api, token, lambda c: c.add_member(budget, user, role))
    # An accepted grant (202) is recorded: granted as far as the caller can tell.
    changed = answer.changed if isinstance(answer, MemberGrant) else True
    done = "granted" if changed else "already held"
    line = plain(f"{user}: {role} of {budget} ({done})")
    emit(answer, as_json, lambda o: o.print(line))
