"""``history``: finished work, like sacct: how it ended, how long it ran, what it cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from services.client.commands.common import (
    ApiOption,
    ArrayFilter,
    BudgetFilter,
    CaOption,
    JsonOption,
    MeFilter,
    PoolFilter,
    TokenOption,
    UserFilter,
    ask,
    elapsed,
    emit,
    hours,
    nodelist,
    submitter_filter,
)
from services.client.constants import DEFAULT_API
from services.client.terminal import FittedTable

if TYPE_CHECKING:
    from services.api.models import WorkloadList


def history(
    ctx: typer.Context,
    budget: BudgetFilter = None,
    user: UserFilter = None,
    me: MeFilter = False,
    pool: PoolFilter = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            "-S",
            help="only work that ended since: an ISO date/time (UTC if naive), or 2h, 3d, 1w "
            "ago, yesterday, today",
        ),
    ] = None,
    array: ArrayFilter = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 100,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Finished work, the latest end first (like sacct): status, exit code, elapsed time and
    GPU-hours charged. Work that will be requeued is not finished."""
    from services.runtime.when import resolve

    answer = ask(
        ctx,
        api,
        token,
        ca,
        lambda c: c.history(
            budget=budget,
            submitter=submitter_filter(c, user, me),
            pool=pool,
            since=None if since is None else resolve(since),
            limit=limit,
            array=array,
        ),
    )
    emit(answer, as_json, lambda o: o.print(_history_table(answer)))


def _history_table(answer: WorkloadList) -> FittedTable:
    table = FittedTable(
        "WORKLOAD",
        "NAME",
        "BUDGET",
        "USER",
        "STATUS",
        "EXIT",
        "ELAPSED",
        "GPUS",
        "CHARGED GPU-h",
        "BURST GPU-h",
        "PREEMPTED",
        "NODELIST",
        "ENDED",
        whole=("WORKLOAD", "BUDGET", "USER", "NODELIST"),
        drop=("BURST GPU-h", "PREEMPTED", "NODELIST", "NAME", "GPUS", "ELAPSED", "ENDED"),
    )
    for w in answer.workloads:
        table.add_row(
            (
                w.workload_id,
                w.name or "-",
                w.budget,
                w.submitter,
                w.status,
                "-" if w.exit_code is None else w.exit_code,
                elapsed(w.elapsed_s),
                w.gpus,
                hours(w.charged_gpu_s, 2),
                hours(w.burst_gpu_s, 2),
                w.preemptions,
                nodelist([p.node for p in w.placement]),
                w.ended_at or "-",
            ),
        )
    return table
