"""Workload commands: ``submit`` (sbatch), ``cancel`` (scancel), ``list``, ``queue`` (squeue),
``show`` (scontrol show job) and ``why``."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.api.models import QueueView, WhyView, WorkloadList, WorkloadView
from services.client.api import DEFAULT_API
from services.client.commands.common import (
    ApiOption,
    JsonOption,
    PoolFilter,
    TokenOption,
    ask,
    duration,
    emit,
    parse_duration,
)
from services.client.terminal import add_row, plain

BudgetFilter = Annotated[str | None, typer.Option("--budget", "-A", help="budget subtree")]
UserFilter = Annotated[str | None, typer.Option("--user", "-u", help="submitter")]


def submit(
    ctx: typer.Context,
    budget: Annotated[
        str, typer.Option("--budget", "-A", help="leaf budget that funds it (Slurm: account)")
    ],
    command: Annotated[
        list[str] | None, typer.Argument(help="the command to run (after --)")
    ] = None,
    gpus: Annotated[int, typer.Option("--gpus", "-G", help="GPUs of the gang")] = 1,
    pool: Annotated[
        list[str] | None,
        typer.Option("--pool", "-p", help="acceptable pool, repeatable, preferred first"),
    ] = None,
    min_runtime: Annotated[
        str,
        typer.Option(
            "--min-runtime",
            "-t",
            help="protected (and charged) runtime: 0 = unallocated burst; e.g. 30m, 2h, "
            "01:30:00; a bare number is seconds",
        ),
    ] = "0",
    gang: Annotated[str, typer.Option(help="single-node or whole-nodes")] = "single-node",
    priority: Annotated[int, typer.Option(help="order within the budget only")] = 0,
    resumable: Annotated[bool, typer.Option(help="requeue automatically after preemption")] = True,
    workload_id: Annotated[
        str | None, typer.Option("--id", help="client id (default: a new UUID)")
    ] = None,
    spec: Annotated[
        str | None, typer.Option(help="JSON object for the agent (image, env, ...)")
    ] = None,
    image: Annotated[str | None, typer.Option(help="container image (into the spec)")] = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Submit a workload (like sbatch). Retrying with the same --id is safe."""
    try:
        payload_spec: dict[str, Any] = json.loads(spec) if spec else {}
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"--spec is not JSON: {error}") from error
    if not isinstance(payload_spec, dict):
        raise typer.BadParameter("--spec must be a JSON object")
    if command:
        payload_spec["command"] = list(command)
    if image:
        payload_spec["image"] = image
    wid = workload_id or str(uuid.uuid4())
    # Sent as given, not checked here: the API names a bad field (422) like for any client.
    request = {
        "workload_id": wid,
        "budget": budget,
        "pools": list(pool or []),
        "gpus": gpus,
        "gang": gang,
        "min_runtime_s": parse_duration(min_runtime),
        "resumable": resumable,
        "priority": priority,
        "spec": payload_spec,
    }
    if not request["pools"]:
        raise typer.BadParameter("at least one --pool is required", param_hint="--pool")
    answer, code = ask(ctx, api, token, lambda c: (c.submit(request), c.last_status))

    def say(console: Console) -> None:
        if code == 201:
            console.print(plain(f"Submitted workload {wid} ({answer.status})"))
        elif code == 200:
            console.print(plain(f"Workload {wid} was already submitted ({answer.status})"))
        else:
            console.print(plain(f"Accepted workload {wid} (recorded; not yet visible)"))

    emit(answer, as_json, say)


def cancel(
    ctx: typer.Context,
    workload_id: Annotated[str, typer.Argument(help="the workload")],
    reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a workload (like scancel)."""
    answer = ask(ctx, api, token, lambda c: c.cancel(workload_id, reason))
    done = plain(f"Cancel of {workload_id} recorded ({answer.status})")
    emit(answer, as_json, lambda o: o.print(done))


def list_workloads(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(help="pending, running, ...")] = None,
    budget: BudgetFilter = None,
    user: UserFilter = None,
    pool: PoolFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """List workloads, newest first."""
    answer = ask(
        ctx,
        api,
        token,
        lambda c: c.workloads(status=status, budget=budget, submitter=user, pool=pool),
    )
    emit(answer, as_json, lambda o: o.print(_workload_table(answer)))


def _workload_table(answer: WorkloadList) -> Table:
    table = Table("WORKLOAD", "BUDGET", "USER", "STATUS", "GPUS", "POOL", "SUBMITTED")
    for w in answer.workloads:
        add_row(
            table,
            (
                w.workload_id,
                w.budget,
                w.submitter,
                w.status,
                w.gpus,
                w.pool or ",".join(w.pools),
                w.submitted_at or "",
            ),
        )
    return table


def queue(
    ctx: typer.Context,
    pool: PoolFilter = None,
    budget: BudgetFilter = None,
    user: UserFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Pending work in scheduling order per pool, with why it waits (like squeue)."""
    answer = ask(ctx, api, token, lambda c: c.queue(pool=pool, budget=budget, submitter=user))
    emit(answer, as_json, lambda o: o.print(_queue_table(answer)))


def _queue_table(answer: QueueView) -> Table:
    table = Table("POOL", "POS", "WORKLOAD", "BUDGET", "USER", "GPUS", "CONTRACT", "RANK", "REASON")
    for entry in answer.pools:
        for item in entry.pending:
            add_row(
                table,
                (
                    entry.pool,
                    item.position,
                    item.workload_id,
                    item.budget,
                    item.submitter,
                    item.gpus,
                    duration(item.min_runtime_s) if item.allocated else "burst",
                    item.budget_rank or "-",
                    ",".join(r.code for r in item.reasons or []),
                ),
            )
    return table


def show(
    ctx: typer.Context,
    workload_id: Annotated[str, typer.Argument(help="the workload")],
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """One workload (like scontrol show job)."""
    answer = ask(ctx, api, token, lambda c: c.workload(workload_id))
    emit(answer, as_json, lambda o: o.print(_fields_table(answer)))


def _fields_table(answer: WorkloadView) -> Table:
    table = Table("FIELD", "VALUE", show_header=False)
    for key, value in answer.model_dump(mode="json").items():
        add_row(table, (key, value if isinstance(value, str) else json.dumps(value)))
    return table


def why(
    ctx: typer.Context,
    workload_id: Annotated[str, typer.Argument(help="the workload")],
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Why a workload is pending, or why it was preempted."""
    answer = ask(ctx, api, token, lambda c: c.why(workload_id))
    emit(answer, as_json, lambda o: _explain(o, workload_id, answer))


def _explain(console: Console, workload_id: str, answer: WhyView) -> None:
    console.print(plain(f"{workload_id}: {answer.status} (attempt {answer.attempt})"))
    for entry in answer.pending:
        console.print(
            plain(
                f"pending in {entry.pool}: position {entry.position} of "
                f"{entry.queue_length} (budget rank {entry.budget_rank or '-'})"
            )
        )
        for reason in entry.reasons:
            console.print(plain(f"  - [{reason.code}] {reason.message}"))
    for item in answer.preemptions:
        console.print(plain(f"preempted (attempt {item.attempt}, {item.time}): {item.message}"))
    if not answer.pending and not answer.preemptions:
        console.print(plain("nothing to explain: it is neither pending nor was it preempted"))
