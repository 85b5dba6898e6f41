"""Typer commands of the API client, Slurm-familiar where it helps.

``submit`` (sbatch), ``cancel`` (scancel), ``queue`` (squeue), ``list``, ``show``, ``why``,
``share`` (sshare), ``nodes`` (sinfo), ``cordon``/``uncordon`` (scontrol update state=drain),
``budgets set-weight`` and ``budgets add-member``. Every read command takes ``--json`` to print
the API's JSON as it came. HTTP errors print the status and the API's detail and exit 1.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from services.client.api import DEFAULT_API, ApiError, FairshareClient

ClientFactory = Callable[[str, str | None], FairshareClient]

ApiOption = Annotated[
    str, typer.Option("--api", envvar="FAIRSHARE_API", help="base URL of the Fairshare API")
]
TokenOption = Annotated[
    str | None,
    typer.Option("--token", envvar="FAIRSHARE_TOKEN", help="bearer token", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print the API's JSON")]
PoolFilter = Annotated[str | None, typer.Option("--pool", "-p", help="only this pool")]

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int:
    """Seconds from ``3600``, ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d``, ``MM:SS`` or
    ``HH:MM:SS``. A bare number is seconds (unlike Slurm's ``--time``, which means minutes)."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    if ":" in value:
        parts = value.split(":")
        if len(parts) in (2, 3) and all(p.isdigit() for p in parts):
            seconds = 0
            for part in parts:
                seconds = seconds * 60 + int(part)
            return seconds
    match = _DURATION.match(value)
    if value and match and any(match.groups()):
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    raise typer.BadParameter(f"{text!r} is not a duration (e.g. 3600, 45m, 2h, 1h30m, 01:30:00)")


def _hours(gpu_seconds: float | None) -> str:
    return "-" if gpu_seconds is None else f"{gpu_seconds / 3600:,.1f}"


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def register(app: typer.Typer, client_factory: ClientFactory | None = None) -> None:
    """Add the client's commands, and a ``budgets`` sub-app, to ``app``."""
    make_client: ClientFactory = client_factory or (lambda api, token: FairshareClient(api, token))

    @contextmanager
    def client(api: str, token: str | None) -> Iterator[FairshareClient]:
        made = make_client(api, token)
        try:
            yield made
        except ApiError as error:
            Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {error}", markup=True)
            raise typer.Exit(1) from error
        finally:
            made.close()

    def out() -> Console:
        return Console(soft_wrap=True)

    def dump(data: Any) -> None:
        typer.echo(json.dumps(data, indent=2))

    # -- workloads ------------------------------------------------------------------------
    @app.command()
    def submit(
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
        resumable: Annotated[
            bool, typer.Option(help="requeue automatically after preemption")
        ] = True,
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
        request = {
            "workload_id": workload_id or str(uuid.uuid4()),
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
        with client(api, token) as c:
            result = c.submit(request)
            if as_json:
                dump(result)
                return
            wid = request["workload_id"]
            if c.last_status == 201:
                out().print(f"Submitted workload {wid} ({result.get('status')})")
            elif c.last_status == 200:
                out().print(f"Workload {wid} was already submitted ({result.get('status')})")
            else:
                out().print(f"Accepted workload {wid} (recorded; not yet visible)")

    @app.command()
    def cancel(
        workload_id: Annotated[str, typer.Argument(help="the workload")],
        reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Cancel a workload (like scancel)."""
        with client(api, token) as c:
            result = c.cancel(workload_id, reason)
            if as_json:
                dump(result)
            else:
                out().print(f"Cancel of {workload_id} recorded ({result.get('status')})")

    @app.command("list")
    def list_workloads(
        status: Annotated[str | None, typer.Option(help="pending, running, ...")] = None,
        budget: Annotated[str | None, typer.Option("--budget", "-A", help="budget subtree")] = None,
        user: Annotated[str | None, typer.Option("--user", "-u", help="submitter")] = None,
        pool: PoolFilter = None,
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """List workloads, newest first."""
        with client(api, token) as c:
            result = c.workloads(status=status, budget=budget, submitter=user, pool=pool)
        if as_json:
            dump(result)
            return
        table = Table("WORKLOAD", "BUDGET", "USER", "STATUS", "GPUS", "POOL", "SUBMITTED")
        for w in result["workloads"]:
            table.add_row(
                w["workload_id"],
                w["budget"],
                w["submitter"],
                w["status"],
                str(w["gpus"]),
                w["pool"] or ",".join(w["pools"]),
                w["submitted_at"] or "",
            )
        out().print(table)

    @app.command()
    def queue(
        pool: PoolFilter = None,
        budget: Annotated[str | None, typer.Option("--budget", "-A", help="budget subtree")] = None,
        user: Annotated[str | None, typer.Option("--user", "-u", help="submitter")] = None,
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Pending work in scheduling order per pool, with why it waits (like squeue)."""
        with client(api, token) as c:
            result = c.queue(pool=pool, budget=budget, submitter=user)
        if as_json:
            dump(result)
            return
        table = Table(
            "POOL", "POS", "WORKLOAD", "BUDGET", "USER", "GPUS", "CONTRACT", "RANK", "REASON"
        )
        for entry in result["pools"]:
            for item in entry["pending"]:
                table.add_row(
                    entry["pool"],
                    str(item["position"]),
                    item["workload_id"],
                    item["budget"],
                    item["submitter"],
                    str(item["gpus"]),
                    _duration(item["min_runtime_s"]) if item["allocated"] else "burst",
                    str(item["budget_rank"] or "-"),
                    ",".join(r["code"] for r in item.get("reasons", [])),
                )
        out().print(table)

    @app.command()
    def show(
        workload_id: Annotated[str, typer.Argument(help="the workload")],
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """One workload (like scontrol show job)."""
        with client(api, token) as c:
            result = c.workload(workload_id)
        if as_json:
            dump(result)
            return
        table = Table("FIELD", "VALUE", show_header=False)
        for key, value in result.items():
            text = value if isinstance(value, str) else json.dumps(value)
            table.add_row(key, text)
        out().print(table)

    @app.command()
    def why(
        workload_id: Annotated[str, typer.Argument(help="the workload")],
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Why a workload is pending, or why it was preempted."""
        with client(api, token) as c:
            result = c.why(workload_id)
        if as_json:
            dump(result)
            return
        console = out()
        console.print(f"{workload_id}: {result['status']} (attempt {result['attempt']})")
        for entry in result["pending"]:
            console.print(
                f"pending in {entry['pool']}: position {entry['position']} of "
                f"{entry['queue_length']} (budget rank {entry['budget_rank'] or '-'})"
            )
            for reason in entry["reasons"]:
                console.print(f"  - [{reason['code']}] {reason['message']}", markup=False)
        for item in result["preemptions"]:
            console.print(
                f"preempted (attempt {item['attempt']}, {item['time']}): {item['message']}",
                markup=False,
            )
        if not result["pending"] and not result["preemptions"]:
            console.print("nothing to explain: it is neither pending nor was it preempted")

    @app.command()
    def share(
        pool: PoolFilter = None,
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """The budget tree: shares, window usage, usage ratio, rank, owed vs delivered
        (like sshare)."""
        with client(api, token) as c:
            result = c.budgets(pool)
        if as_json:
            dump(result)
            return
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
            title=f"window {result['window_s'] // 3600} h, as of {result['as_of']}",
        )
        for budget in result["budgets"]:
            name = "  " * budget["depth"] + budget["budget"].rsplit("/", 1)[-1]
            for pool_name, figures in budget["pools"].items():
                ratio = figures["delivered_ratio"]
                table.add_row(
                    name + (" (closed)" if budget["closed"] else ""),
                    pool_name,
                    _num(budget["pool_weights"].get(pool_name, budget["weight"])),
                    _num(figures["share"], 3),
                    _hours(figures["usage_gpu_s"]),
                    _num(figures["usage_ratio"], 3),
                    str(figures["rank"] or figures["sibling_rank"] or "-"),
                    _hours(figures["owed_gpu_s"]),
                    "-" if ratio is None else f"{ratio:.1%}",
                    str(figures["demand_gpus"]),
                )
        out().print(table)

    # -- nodes ----------------------------------------------------------------------------
    @app.command()
    def nodes(
        pool: PoolFilter = None,
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Nodes: state, used and free GPUs, last heartbeat (like sinfo -N)."""
        with client(api, token) as c:
            result = c.nodes(pool)
        if as_json:
            dump(result)
            return
        table = Table("NODE", "POOL", "STATE", "GPUS", "USED", "FREE", "HEARTBEAT", "WORKLOADS")
        for n in result["nodes"]:
            table.add_row(
                n["node"],
                n["pool"],
                n["state"],
                str(n["gpus"]),
                str(n["used_gpus"]),
                str(n["free_gpus"]),
                n["last_heartbeat"] or "-",
                ",".join(n["workloads"]),
            )
        out().print(table)

    @app.command()
    def cordon(
        node: Annotated[str, typer.Argument(help="the node")],
        reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Stop new placements on a node; its work drains as contracts end (admins)."""
        with client(api, token) as c:
            result = c.cordon(node, reason)
        if as_json:
            dump(result)
        else:
            out().print(f"{node}: {result.get('state', result.get('status'))}")

    @app.command()
    def uncordon(
        node: Annotated[str, typer.Argument(help="the node")],
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Return a node to service (admins)."""
        with client(api, token) as c:
            result = c.uncordon(node)
        if as_json:
            dump(result)
        else:
            out().print(f"{node}: {result.get('state', result.get('status'))}")

    # -- budgets --------------------------------------------------------------------------
    budgets_app = typer.Typer(no_args_is_help=True, help="Manage budgets (managers, admins).")
    app.add_typer(budgets_app, name="budgets")

    @budgets_app.command("set-weight")
    def set_weight(
        budget: Annotated[str, typer.Argument(help="the budget, e.g. lab/robotics")],
        weight: Annotated[float, typer.Argument(help="positive weight among its siblings")],
        pool: Annotated[str | None, typer.Option(help="only in this pool")] = None,
        reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Set a budget's weight (a manager of its parent)."""
        with client(api, token) as c:
            result = c.set_weight(budget, weight, pool, reason)
        if as_json:
            dump(result)
        else:
            where = f" in {pool}" if pool else ""
            out().print(f"{budget}: weight {weight:g}{where}")

    @budgets_app.command("add-member")
    def add_member(
        budget: Annotated[str, typer.Argument(help="the budget")],
        user: Annotated[str, typer.Argument(help="the user")],
        role: Annotated[str, typer.Option(help="member or manager")] = "member",
        api: ApiOption = DEFAULT_API,
        token: TokenOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Grant a user a role on a budget's subtree (a manager of the budget)."""
        with client(api, token) as c:
            result = c.add_member(budget, user, role)
        if as_json:
            dump(result)
        else:
            done = "granted" if result.get("changed", True) else "already held"
            out().print(f"{user}: {role} of {budget} ({done})")
