"""Workload commands: ``submit`` (sbatch, ``--array`` too), ``cancel`` (scancel), ``list`` and
``show`` (scontrol show job). A job array's id works where a workload's does: ``cancel A``
cancels its every element, ``show A`` summarises it, ``list --array A`` lists its elements."""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Annotated, Any

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
    nodelist,
    parse_duration,
    submitter_filter,
)
from services.client.constants import DEFAULT_API, WorkloadStatus
from services.client.terminal import FittedTable, plain

if TYPE_CHECKING:
    from rich.console import Console

    from services.api.models import (
        ArrayCancelView,
        ArraySubmitAnswer,
        ArrayView,
        CancelAnswer,
        WorkloadList,
        WorkloadView,
    )
    from services.client.api import ApiError, FairshareClient


def submit(
    ctx: typer.Context,
    budget: Annotated[
        str,
        typer.Option("--budget", "-A", help="leaf budget that funds it (Slurm: account)"),
    ],
    command: Annotated[
        list[str] | None, typer.Argument(help="the command to run (after --)")
    ] = None,
    gpus: Annotated[int, typer.Option("--gpus", "-G", help="GPUs of the gang")] = 1,
    pool: Annotated[
        list[str] | None,
        typer.Option(
            "--pool",
            "-p",
            help="acceptable pool, repeatable, preferred first (required when the cluster has "
            "several pools; default: its only pool)",
            show_default=False,
        ),
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
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--time-limit",
            help="how long a run may last before it is stopped (like sbatch --time; default: "
            "the pool's); e.g. 4h, 2d, 01:30:00",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", "-J", help="a name for the job (shown by list, queue, history)"),
    ] = None,
    gang: Annotated[str, typer.Option(help="single-node or whole-nodes")] = "single-node",
    priority: Annotated[int, typer.Option(help="order within the budget only")] = 0,
    resumable: Annotated[bool, typer.Option(help="requeue automatically after preemption")] = True,
    workload_id: Annotated[
        str | None,
        typer.Option("--id", help="client id, of the array with --array (default: a new UUID)"),
    ] = None,
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            "-a",
            help="a job array, like sbatch --array: indices 0-999, 0-99:2 or 1,3,5-7, and %K "
            "to run at most K at once (0-999%50); each element gets FAIRSHARE_ARRAY_INDEX",
            show_default=False,
        ),
    ] = None,
    spec: Annotated[
        str | None, typer.Option(help="JSON object for the agent (image, env, ...)")
    ] = None,
    image: Annotated[str | None, typer.Option(help="container image (into the spec)")] = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Submit a workload, or a job array with --array (like sbatch). Retrying with the same
    --id is safe: the whole array is recorded once, or not at all."""
    payload_spec = _spec(spec, command, image, name)
    wid = workload_id or str(uuid.uuid4())
    # Sent as given, not checked here: the API names a bad field (422) like for any client.
    request: dict[str, Any] = {
        "budget": budget,
        "pools": list(pool or []),
        "gpus": gpus,
        "gang": gang,
        "min_runtime_s": parse_duration(min_runtime),
        "resumable": resumable,
        "priority": priority,
        "spec": payload_spec,
    }
    if time_limit is not None:
        request["time_limit_s"] = parse_duration(time_limit)
    if array is not None:
        request.update(_array_fields(array), array_id=wid)
    else:
        request["workload_id"] = wid

    def send(client: FairshareClient) -> tuple[Any, int]:
        if not request["pools"]:
            request["pools"] = [_only_pool(client)]
        if array is not None:
            return client.submit_array(request), client.last_status
        return client.submit(request), client.last_status

    answer, code = ask(ctx, api, token, ca, send)
    if array is not None:
        emit(answer, as_json, lambda console: console.print(plain(_array_said(answer, code, wid))))
        return

    def say(console: Console) -> None:
        if code == 201:
            console.print(plain(f"Submitted workload {wid} ({answer.status})"))
        elif code == 200:
            console.print(plain(f"Workload {wid} was already submitted ({answer.status})"))
        else:
            console.print(plain(f"Accepted workload {wid} (recorded; not yet visible)"))

    emit(answer, as_json, say)


def _array_fields(text: str) -> dict[str, Any]:
    """``--array``'s value as the API takes it: the indices, and ``max_running`` from ``%K``
    (the API checks both and names a bad item)."""
    indices, percent, limit = text.partition("%")
    if not percent:
        return {"indices": indices}
    if not limit.isdigit():
        raise typer.BadParameter(f"%{limit}: give a whole number of elements", param_hint="--array")
    return {"indices": indices, "max_running": int(limit)}


def _array_said(answer: ArraySubmitAnswer, code: int, array_id: str) -> str:
    from services.api.models import ArrayView

    if not isinstance(answer, ArrayView):
        return f"Accepted array {array_id} (recorded; not yet visible)"
    limit = f", at most {answer.max_running} at once" if answer.max_running else ""
    what = f"{answer.count} element(s) ({answer.first_element} .. {answer.last_element}){limit}"
    if code == 200:
        return f"Array {array_id} was already submitted: {what}"
    return f"Submitted array {array_id}: {what}"


def _spec(
    spec: str | None, command: list[str] | None, image: str | None, name: str | None
) -> dict[str, Any]:
    try:
        payload: dict[str, Any] = json.loads(spec) if spec else {}
    except json.JSONDecodeError as error:
        raise typer.BadParameter(f"--spec is not JSON: {error}") from error
    if not isinstance(payload, dict):
        raise typer.BadParameter("--spec must be a JSON object")
    if command:
        payload["command"] = list(command)
    if image:
        payload["image"] = image
    if name is not None:
        if not name.strip():
            raise typer.BadParameter("a name cannot be empty", param_hint="--name")
        payload["name"] = name
    return payload


def _only_pool(client: FairshareClient) -> str:
    """The cluster's only pool; with none or several, ``--pool`` is required (said with the
    pools to choose from)."""
    pools = [p.pool for p in client.pools().pools]
    if len(pools) == 1:
        return pools[0]
    known = f"{len(pools)} pools: {', '.join(pools)}" if pools else "no pool yet"
    raise typer.BadParameter(f"required: the cluster has {known}", param_hint="--pool")


def cancel(
    ctx: typer.Context,
    workload_id: Annotated[
        str, typer.Argument(help="the workload, an array's element (A_5), or a whole array (A)")
    ],
    reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Cancel a workload, or every element of a job array (like scancel)."""
    answer = ask(ctx, api, token, ca, lambda c: _workload_or_array(c, workload_id, reason))
    emit(answer, as_json, lambda o: o.print(plain(_cancel_said(answer, workload_id))))


def _workload_or_array(
    client: FairshareClient, target: str, reason: str
) -> CancelAnswer | ArrayCancelView:
    """The workload's cancel, or the array's when no workload has that id."""
    from services.client.api import ApiError

    try:
        return client.cancel(target, reason)
    except ApiError as error:
        if error.status != 404:
            raise
        unknown = error
    try:
        return client.cancel_array(target, reason)
    except ApiError as error:
        raise _neither(unknown) if error.status == 404 else error from None


def _cancel_said(answer: CancelAnswer | ArrayCancelView, target: str) -> str:
    from services.api.models import ArrayCancelView

    if not isinstance(answer, ArrayCancelView):
        return f"Cancel of {target} recorded ({answer.status})"
    if not answer.cancelled:
        return (
            f"Nothing left to cancel in array {target}: {answer.already_cancelled} element(s) "
            f"cancelled already, {answer.ended} ended"
        )
    left = f" ({answer.already_cancelled} cancelled already, {answer.ended} ended)"
    pending = "" if answer.visible else "; not yet visible"
    return (
        f"Cancel of array {target} recorded for {answer.cancelled} element(s){left}: running "
        f"ones stop when the scheduler stops them{pending}"
    )


StatusFilter = Annotated[
    WorkloadStatus | None,
    typer.Option(
        "--status",
        "-t",
        help="only work in this status (preempted work is requeued: see --preempted)",
        show_default=False,
    ),
]


def list_workloads(
    ctx: typer.Context,
    status: StatusFilter = None,
    preempted: Annotated[
        bool, typer.Option("--preempted", help="only work preempted at least once")
    ] = False,
    budget: BudgetFilter = None,
    user: UserFilter = None,
    me: MeFilter = False,
    pool: PoolFilter = None,
    array: ArrayFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """List workloads, newest first (an array's elements by index)."""
    answer = ask(
        ctx,
        api,
        token,
        ca,
        lambda c: c.workloads(
            status=status,
            budget=budget,
            submitter=submitter_filter(c, user, me),
            pool=pool,
            preempted=preempted or None,
            array=array,
        ),
    )
    emit(answer, as_json, lambda o: o.print(_workload_table(answer)))


def _workload_table(answer: WorkloadList) -> FittedTable:
    table = FittedTable(
        "WORKLOAD",
        "NAME",
        "BUDGET",
        "USER",
        "STATUS",
        "GPUS",
        "ELAPSED",
        "CONTRACT LEFT",
        "PREEMPTED",
        "NODELIST / POOLS",
        "SUBMITTED",
        whole=("WORKLOAD", "BUDGET", "USER", "NODELIST / POOLS"),
        drop=(
            "SUBMITTED",
            "PREEMPTED",
            "CONTRACT LEFT",
            "ELAPSED",
            "NAME",
            "GPUS",
            "NODELIST / POOLS",
        ),
    )
    for w in answer.workloads:
        left = "-" if w.contract_left_s is None else elapsed(w.contract_left_s)
        table.add_row(
            (
                w.workload_id,
                w.name or "-",
                w.budget,
                w.submitter,
                w.status,
                w.gpus,
                elapsed(w.elapsed_s),
                left if w.allocated else "burst",
                w.preemptions,
                nodelist([p.node for p in w.placement] or w.pools),
                w.submitted_at or "",
            ),
        )
    return table


def show(
    ctx: typer.Context,
    workload_id: Annotated[str, typer.Argument(help="the workload, or a job array")],
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """One workload, or a job array's summary (like scontrol show job)."""
    answer = ask(ctx, api, token, ca, lambda c: _shown(c, workload_id))
    emit(answer, as_json, lambda o: o.print(_fields_table(answer)))


def _shown(client: FairshareClient, target: str) -> WorkloadView | ArrayView:
    """The workload, or the array when no workload has that id."""
    from services.client.api import ApiError

    try:
        return client.workload(target)
    except ApiError as error:
        if error.status != 404:
            raise
        unknown = error
    try:
        return client.array(target)
    except ApiError as error:
        raise _neither(unknown) if error.status == 404 else error from None


def _neither(unknown: ApiError) -> ApiError:
    """The API's 404 for the workload, saying that no array has the id either."""
    from services.client.api import ApiError, format_detail

    return ApiError(
        404, f"{format_detail(unknown.detail)} (no array has that id either)", unknown.url
    )


def _fields_table(answer: WorkloadView | ArrayView) -> FittedTable:
    table = FittedTable("FIELD", "VALUE", whole=("FIELD",), show_header=False)
    for key, value in answer.model_dump(mode="json").items():
        table.add_row((key, value if isinstance(value, str) else json.dumps(value)))
    return table
