"""What waits and why: ``queue`` (squeue) with one reason per job, and ``why``.

Like squeue, ``queue`` shows a job array's elements that wait in a row for one reason as one
line, ``A_[5-999]`` (``--json`` has every element)."""

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
    VerboseOption,
    ask,
    duration,
    emit,
    submitter_filter,
)
from services.client.constants import DEFAULT_API
from services.client.terminal import FittedTable, plain

if TYPE_CHECKING:
    from rich.console import Console

    from services.api.models import PreemptionRecord, QueueEntry, QueueView, WhyView


def queue(
    ctx: typer.Context,
    pool: PoolFilter = None,
    budget: BudgetFilter = None,
    user: UserFilter = None,
    me: MeFilter = False,
    array: ArrayFilter = None,
    long: Annotated[
        bool, typer.Option("--long", "-l", help="say the reason of each job in a sentence")
    ] = False,
    start: Annotated[
        bool,
        typer.Option(
            "--start",
            help="when each job should start (like squeue --start: every run ending at its "
            "time limit; '-' beyond 7 days)",
        ),
    ] = False,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pending work in scheduling order per pool, with the reason each job waits (like
    squeue's REASON; -l: in words, `why JOB`: every detail; --start: when it should start,
    how sure (SURE: now, history, pool or guess) and at the latest, every run to its limit)."""
    answer = ask(
        ctx,
        api,
        token,
        ca,
        lambda c: c.queue(
            pool=pool,
            budget=budget,
            submitter=submitter_filter(c, user, me),
            start=True if start else None,
            array=array,
        ),
    )
    emit(answer, as_json, lambda o: o.print(_queue_table(answer, long, start)))


def _queue_table(answer: QueueView, long: bool, start: bool = False) -> FittedTable:
    columns = ["POOL", "POS", "WORKLOAD", "NAME", "BUDGET", "USER", "GPUS", "CONTRACT", "RANK"]
    table = FittedTable(
        *columns,
        *(["START", "SURE", "LATEST"] if start else []),
        "REASON",
        *(["WHY"] if long else []),
        whole=("POOL", "WORKLOAD", "BUDGET", "USER"),
        prose=("WHY",) if long else (),
        # with -l, WHY says in words what REASON says in a code
        drop=(
            *(["REASON"] if long else []),
            *(["LATEST"] if start else []),
            "RANK",
            "CONTRACT",
            "POS",
            "NAME",
            "GPUS",
        ),
    )
    for entry in answer.pools:
        for item, last in _runs(entry.pending):
            table.add_row(
                (
                    entry.pool,
                    item.position if last is None else f"{item.position}-{last.position}",
                    item.workload_id if last is None else _elements(item, last),
                    item.name or "-",
                    item.budget,
                    item.submitter,
                    item.gpus,
                    duration(item.min_runtime_s) if item.allocated else "burst",
                    item.budget_rank or "-",
                    *(
                        [
                            _start(item.estimated_start),
                            item.start_basis or "-",
                            _start(item.latest_start),
                        ]
                        if start
                        else []
                    ),
                    item.reason or "-",
                    *([item.summary or ""] if long else []),
                ),
            )
    return table


def _runs(entries: list[QueueEntry]) -> list[tuple[QueueEntry, QueueEntry | None]]:
    """Each entry alone, or the first and last of a run of one array's elements that are
    next to each other in the queue and wait for the same reason (one line, as squeue
    shows them)."""
    runs: list[tuple[QueueEntry, QueueEntry | None]] = []
    for item in entries:
        if runs and _continues(runs[-1][1] or runs[-1][0], item):
            runs[-1] = (runs[-1][0], item)
        else:
            runs.append((item, None))
    return runs


def _continues(previous: QueueEntry, item: QueueEntry) -> bool:
    return (
        item.array_id is not None
        and item.array_id == previous.array_id
        and item.position == previous.position + 1
        and item.reason == previous.reason
        and item.estimated_start == previous.estimated_start
    )


def _elements(first: QueueEntry, last: QueueEntry) -> str:
    """A run of an array's elements, as squeue writes pending tasks: ``A_[5-999]``."""
    return f"{first.array_id}_[{first.array_index}-{last.array_index}]"


def _start(estimated: str | None) -> str:
    """An estimate as squeue --start shows it: the UTC time to the second, one word
    (``2026-12-07T15:52:01``: a narrow table never splits the day from the time; N/A: none)."""
    if estimated is None:
        return "N/A"
    return estimated.removesuffix("Z").split(".")[0]


def why(
    ctx: typer.Context,
    workload_id: Annotated[str, typer.Argument(help="the workload")],
    verbose: VerboseOption = False,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why a workload is pending, or what happened to it, in one sentence (-v: every reason,
    and the decision records behind each placement and preemption)."""
    answer = ask(ctx, api, token, ca, lambda c: c.why(workload_id))
    emit(answer, as_json, lambda o: _explain(o, answer, verbose))


def _explain(console: Console, answer: WhyView, verbose: bool) -> None:
    console.print(plain(f"{answer.workload_id}: {answer.summary}"))
    if answer.preemptions and answer.status not in ("preempted", "lost", "cancelled"):
        last = answer.preemptions[-1]
        count = len(answer.preemptions)
        console.print(plain(f"earlier: {_preempted(last)}" + (f" ({count}x)" if count > 1 else "")))
    if not verbose:
        return
    console.print(plain(f"status {answer.status}, attempt {answer.attempt}, as of {answer.as_of}"))
    for entry in answer.pending:
        console.print(
            plain(
                f"pending in {entry.pool}: position {entry.position} of {entry.queue_length} "
                f"(budget rank {entry.budget_rank or '-'}, usage ratio "
                f"{'-' if entry.usage_ratio is None else f'{entry.usage_ratio:.4g}'})"
            )
        )
        for reason in entry.reasons:
            console.print(plain(f"  - [{reason.code}] {reason.message}"))
    for placement in answer.placements:
        nodes = ", ".join(f"{p.node}{p.gpus}" for p in placement.placement)
        console.print(
            plain(
                f"placed (attempt {placement.attempt}, {placement.time}) on {nodes}: "
                f"{placement.reason}, pass {placement.pass_id}"
            )
        )
    for item in answer.preemptions:
        console.print(plain(_preempted(item)))
        _record(console, item)


def _preempted(item: PreemptionRecord) -> str:
    return f"attempt {item.attempt}, {item.time}: {item.message}"


def _record(console: Console, item: PreemptionRecord) -> None:
    """The decision record behind a preemption: each budget once, the pass and where in the
    log it was decided."""
    seen: set[str] = set()
    for standing in item.budgets:
        if standing.budget in seen:
            continue
        seen.add(standing.budget)
        console.print(
            plain(
                f"  {standing.budget}: rank {standing.rank}, share {standing.share:.3g}, usage "
                f"ratio {standing.usage_ratio:.3g}"
            )
        )
    where = ", ".join(f"{p.topic}/{p.partition}@{p.offset}" for p in item.input_position)
    console.print(plain(f"  pass {item.pass_id}, decided at {where or '-'}"))
    if item.detail:
        console.print(plain(f"  {item.detail}"))
