"""Node commands: ``nodes`` (sinfo -N, and -R for the reasons nodes take no work),
``cordon`` and ``uncordon`` (scontrol update state=drain / resume)."""

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
    from rich.text import Text

    from services.api.models import NodeAnswer, NodeList, NodeView

NodeArgument = Annotated[str, typer.Argument(help="the node")]


def nodes(
    ctx: typer.Context,
    pool: PoolFilter = None,
    reasons: Annotated[
        bool,
        typer.Option(
            "--list-reasons", "-R", help="only nodes taking no work, and why (like sinfo -R)"
        ),
    ] = False,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Nodes: state, used and free GPUs, GPUs held by work Fairshare did not place, last
    heartbeat, why cordoned (like sinfo -N)."""
    answer = ask(ctx, api, token, ca, lambda c: c.nodes(pool))
    if reasons:
        from services.api.models import NodeList

        answer = NodeList(nodes=[n for n in answer.nodes if n.cordoned or n.down])
    table = _reason_table if reasons else _node_table
    emit(answer, as_json, lambda o: o.print(table(answer)))


def _node_table(answer: NodeList) -> FittedTable:
    table = FittedTable(
        "NODE",
        "POOL",
        "STATE",
        "GPUS",
        "USED",
        "FREE",
        "FOREIGN",
        "HEARTBEAT",
        "WORKLOADS",
        "REASON",
        whole=("NODE", "POOL", "WORKLOADS"),
        drop=("HEARTBEAT", "USED", "GPUS", "FOREIGN"),
    )
    for n in answer.nodes:
        table.add_row(
            (
                n.node,
                n.pool,
                n.state,
                n.gpus,
                n.used_gpus,
                n.free_gpus,
                foreign(n),
                n.last_heartbeat or "-",
                n.workloads or "-",
                reason(n) or "-",
            ),
        )
    return table


def foreign(node: NodeView) -> str:
    """GPUs held by work Fairshare did not place, and the first of what holds them."""
    if not node.foreign_gpus:
        return "-"
    holders = node.foreign_holders
    if not holders:
        return str(node.foreign_gpus)
    more = f" +{len(holders) - 1}" if len(holders) > 1 else ""
    return f"{node.foreign_gpus} ({holders[0].name}{more})"


def reason(node: NodeView) -> str:
    """Why the node takes no work: the cordon's reason (the admin's words), or that it stopped
    sending heartbeats."""
    if node.cordoned:
        return node.cordon_reason or "cordoned (no reason given)"
    if node.down:
        return "not responding (no heartbeat)"
    return ""


def _reason_table(answer: NodeList) -> FittedTable:
    table = FittedTable("REASON", "USER", "TIMESTAMP", "NODE", "STATE", whole=("USER", "NODE"))
    for n in answer.nodes:
        since = n.cordoned_at if n.cordoned else n.last_heartbeat
        by = n.cordoned_by if n.cordoned else "-"
        table.add_row((reason(n), by or "-", since or "-", n.node, n.state))
    return table


def cordon(
    ctx: typer.Context,
    node: NodeArgument,
    reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Stop new placements on a node; its work drains as contracts end (admins)."""
    answer = ask(ctx, api, token, ca, lambda c: c.cordon(node, reason))
    emit(answer, as_json, lambda o: o.print(_state_line(node, answer)))


def uncordon(
    ctx: typer.Context,
    node: NodeArgument,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Return a node to service (admins)."""
    answer = ask(ctx, api, token, ca, lambda c: c.uncordon(node))
    emit(answer, as_json, lambda o: o.print(_state_line(node, answer)))


def _state_line(node: str, answer: NodeAnswer) -> Text:
    """Its state, or ``accepted`` while the API has not seen the change yet."""
    from services.api.models import NodeView

    return plain(f"{node}: {answer.state if isinstance(answer, NodeView) else answer.status}")
