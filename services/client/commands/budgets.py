"""Budget commands: ``share`` (sshare; ``--cost``: the month's money), ``budgets list`` and
``budgets members`` (the tree and who holds which role), ``budgets create|close``, ``budgets
set-weight``, ``budgets add-member`` and ``budgets revoke-member`` (sacctmgr's part of it);
``budgets bind-namespace``, ``unbind-namespace`` and ``namespaces`` (which Kubernetes
namespaces may charge which budgets); ``budgets bind-account``, ``unbind-account`` and
``accounts`` (which Slurm accounts charge which budgets)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Protocol

import typer

from services.client.commands.common import (
    ApiOption,
    CaOption,
    JsonOption,
    PoolFilter,
    TokenOption,
    ask,
    emit,
    hours,
    num,
)
from services.client.commands.money import COST_COLUMNS, cost_cells
from services.client.constants import DEFAULT_API
from services.client.terminal import FittedTable, console, plain

if TYPE_CHECKING:
    from services.api.models import (
        AccountBindingAnswer,
        BudgetAnswer,
        BudgetReport,
        NamespaceBindingAnswer,
    )
    from services.api.money import StatementList
    from services.client.api import FairshareClient


def share(
    ctx: typer.Context,
    pool: PoolFilter = None,
    cost: Annotated[
        bool,
        typer.Option(
            "--cost",
            help="add each budget's money this month: spent, and the forecasts at the current "
            "rate and at its entitlement (all pools)",
        ),
    ] = False,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """The budget tree: shares, window usage, usage ratio, fair-share factor, rank, and
    delivered vs owed as the charges report computes them (like sshare); with ``--cost``
    the money of the API's current month too."""
    if not cost:
        answer = ask(ctx, api, token, ca, lambda c: c.budgets(pool))
        emit(answer, as_json, lambda o: o.print(_share_table(answer)))
        return
    report, money = ask(ctx, api, token, ca, lambda c: _with_money(c, pool))
    if as_json:
        both = {
            "budgets": report.model_dump(mode="json", by_alias=True),
            "statements": money.model_dump(mode="json", by_alias=True),
        }
        typer.echo(json.dumps(both, indent=2, ensure_ascii=True))
    else:
        console().print(_share_table(report, money))


def list_budgets(
    ctx: typer.Context,
    pool: PoolFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """The budget tree (like sacctmgr show account): each budget's weight, its share of each
    pool, its members and whether it is closed. Usage and money: ``fairshare share``."""
    answer = ask(ctx, api, token, ca, lambda c: c.budgets(pool))
    emit(answer, as_json, lambda o: o.print(_tree_table(answer)))


def _tree_table(answer: BudgetReport) -> FittedTable:
    table = FittedTable(
        "BUDGET", "WEIGHT", "SHARE", "MEMBERS", "STATE", whole=("BUDGET",), drop=("STATE",)
    )
    for b in answer.budgets:
        shares = [
            f"{pool} {figures.share:.1%}"
            for pool, figures in sorted(b.pools.items())
            if figures.share is not None
        ]
        weights = [num(b.weight)] + [f"{p} {num(w)}" for p, w in sorted(b.pool_weights.items())]
        members = [f"{user} ({', '.join(roles)})" for user, roles in sorted(b.members.items())]
        table.add_row(
            (
                "  " * b.depth + b.budget.rsplit("/", 1)[-1] if b.depth else b.budget,
                ", ".join(weights),
                shares or "-",
                members or "-",
                "closed" if b.closed else "open",
            )
        )
    return table


def members(
    ctx: typer.Context,
    budget: Annotated[
        str | None, typer.Argument(help="a budget: its subtree (default: every budget)")
    ] = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Who may do what where: one row per budget, user and role, in a budget's subtree. A
    role on a budget holds on its whole subtree (a manager of lab manages lab/vision)."""
    answer = ask(ctx, api, token, ca, lambda c: c.budgets(None))
    inside = [
        b for b in answer.budgets if budget is None or b.budget == budget or
        b.budget.startswith(f"{budget}/")
    ]  # fmt: skip
    if budget is not None and not inside:
        console(stderr=True).print(plain(f"unknown budget {budget!r}"))
        raise typer.Exit(1)
    rows = [
        {"budget": b.budget, "user": user, "role": role}
        for b in inside
        for user, roles in sorted(b.members.items())
        for role in roles
    ]
    if as_json:
        typer.echo(json.dumps({"members": rows}, indent=2, ensure_ascii=True))
        return
    table = FittedTable("BUDGET", "USER", "ROLE", whole=("BUDGET", "USER"))
    for row in rows:
        table.add_row((row["budget"], row["user"], row["role"]))
    console().print(table)


def _with_money(client: FairshareClient, pool: str | None) -> tuple[BudgetReport, StatementList]:
    """The tree, and every budget's statement for the month the API's clock is in."""
    answer = client.budgets(pool)
    return answer, client.statements(answer.as_of[:7], workloads=False)


def _title(answer: BudgetReport) -> str:
    title = f"window {answer.window_s // 3600} h, as of {answer.as_of}"
    source = answer.delivered_owed
    if source is None:
        return title + "; delivered/owed: no read models"
    return f"{title}; delivered/owed from the read models, {source.from_} to {source.to}"


def _share_table(answer: BudgetReport, money: StatementList | None = None) -> FittedTable:
    costs = COST_COLUMNS if money is not None else ()
    title = _title(answer)
    if money is not None:
        title += f"; money {money.period.month}, per budget (all pools)"
        if money.statements:
            title += f", to {money.statements[0].forecast.as_of}"
    table = FittedTable(
        "BUDGET",
        "POOL",
        "WEIGHT",
        "SHARE",
        "USAGE GPU-h",
        "RATIO",
        "FAIRSHARE",
        "RANK",
        "OWED GPU-h",
        "DELIVERED GPU-h",
        "DELIVERED/OWED",
        "DEMAND",
        *costs,
        whole=("BUDGET", "POOL"),
        drop=(
            *(("CURRENCY",) if money is not None else ()),
            "DELIVERED GPU-h",
            "OWED GPU-h",
            "DEMAND",
            "RATIO",
            "WEIGHT",
            "DELIVERED/OWED",
        ),
        title=title,
    )
    for budget in answer.budgets:
        name = "  " * budget.depth + budget.budget.rsplit("/", 1)[-1]
        spent = cost_cells(money, budget.budget) if money is not None else ()
        for i, (pool_name, figures) in enumerate(budget.pools.items()):
            ratio = figures.delivered_ratio
            table.add_row(
                (
                    name + (" (closed)" if budget.closed else ""),
                    pool_name,
                    num(budget.pool_weights.get(pool_name, budget.weight)),
                    num(figures.share, 3),
                    hours(figures.usage_gpu_s),
                    num(figures.usage_ratio, 3),
                    num(figures.fairshare_factor, 3),
                    figures.rank or figures.sibling_rank or "-",
                    hours(figures.owed_gpu_s),
                    hours(figures.delivered_gpu_s),
                    "-" if ratio is None else f"{ratio:.3f}",
                    figures.demand_gpus,
                    # once per budget (its first pool): the money is the budget's, all pools
                    *(spent if i == 0 else ("",) * len(spent)),
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
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Set a budget's weight (a manager of its parent)."""
    answer = ask(ctx, api, token, ca, lambda c: c.set_weight(budget, weight, pool, reason))
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
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Grant a user a role on a budget's subtree (a manager of the budget)."""
    from services.api.models import MemberGrant

    answer = ask(ctx, api, token, ca, lambda c: c.add_member(budget, user, role))
    # An accepted grant (202) is recorded: granted as far as the caller can tell.
    changed = answer.changed if isinstance(answer, MemberGrant) else True
    done = "granted" if changed else "already held"
    line = plain(f"{user}: {role} of {budget} ({done})")
    emit(answer, as_json, lambda o: o.print(line))


def revoke_member(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget")],
    user: Annotated[str, typer.Argument(help="the user")],
    role: Annotated[str, typer.Option(help="member or manager")] = "member",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Take a role on a budget from a user (a manager of the budget)."""
    from services.api.models import MemberRevoke

    answer = ask(ctx, api, token, ca, lambda c: c.revoke_member(budget, user, role))
    # An accepted revoke (202) is recorded: revoked as far as the caller can tell.
    changed = answer.changed if isinstance(answer, MemberRevoke) else True
    still = answer.still_held_on if isinstance(answer, MemberRevoke) else None
    text = f"{user}: {role} of {budget} " + ("revoked" if changed else "not held there")
    if still:
        text += f"; still {role} through {still} (roles cover subtrees: revoke it there)"
    emit(answer, as_json, lambda o: o.print(plain(text)))


ClusterOption = Annotated[str, typer.Option("--cluster", help="the Kubernetes cluster's name")]
NamespaceOption = Annotated[str, typer.Option("--namespace", help="the namespace")]
SlurmClusterOption = Annotated[str, typer.Option("--cluster", help="the Slurm cluster's name")]
AccountOption = Annotated[
    str, typer.Option("--account", help="the Slurm account (sbatch --account), in lower case")
]
ClusterFilter = Annotated[str | None, typer.Option("--cluster", help="only this cluster")]


def bind_namespace(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the leaf budget, e.g. lab/robotics")],
    cluster: ClusterOption,
    namespace: NamespaceOption,
    default: Annotated[
        bool,
        typer.Option(
            "--default",
            help="the namespace's budget for work whose fairshare.dev/budget label names none "
            "(replaces its earlier default)",
        ),
    ] = False,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Let work of a Kubernetes namespace charge a budget (a manager of the budget): its
    fairshare.dev/budget label may name the budget, or, with --default, name none."""
    answer = ask(
        ctx, api, token, ca, lambda c: c.bind_namespace(budget, cluster, namespace, default)
    )
    text = _bound(f"{cluster}/{namespace}", budget, default, answer)
    emit(answer, as_json, lambda o: o.print(plain(text)))


def unbind_namespace(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget")],
    cluster: ClusterOption,
    namespace: NamespaceOption,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """A Kubernetes namespace may no longer charge a budget (a manager of the budget)."""
    answer = ask(ctx, api, token, ca, lambda c: c.unbind_namespace(budget, cluster, namespace))
    text = _unbound(f"{cluster}/{namespace}", budget, answer)
    emit(answer, as_json, lambda o: o.print(plain(text)))


def namespaces(
    ctx: typer.Context,
    cluster: ClusterFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which Kubernetes namespaces may charge which budgets, and each one's default."""
    answer = ask(ctx, api, token, ca, lambda c: c.namespaces(cluster))
    rows = [(b.namespace, b) for b in answer.bindings]
    table = _bindings_table("NAMESPACE", f"namespace bindings, as of {answer.as_of}", rows)
    emit(answer, as_json, lambda o: o.print(table))


def bind_account(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the leaf budget, e.g. lab/vision")],
    cluster: SlurmClusterOption,
    account: AccountOption,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Let work of a Slurm account (sbatch --account) charge a budget (a manager of the
    budget). An account charges one budget: this one becomes its default, replacing any
    earlier one."""
    answer = ask(ctx, api, token, ca, lambda c: c.bind_account(budget, cluster, account))
    text = _bound(f"{cluster}/{account}", budget, True, answer)
    emit(answer, as_json, lambda o: o.print(plain(text)))


def unbind_account(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget")],
    cluster: SlurmClusterOption,
    account: AccountOption,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """A Slurm account may no longer charge a budget (a manager of the budget)."""
    answer = ask(ctx, api, token, ca, lambda c: c.unbind_account(budget, cluster, account))
    text = _unbound(f"{cluster}/{account}", budget, answer)
    emit(answer, as_json, lambda o: o.print(plain(text)))


def accounts(
    ctx: typer.Context,
    cluster: ClusterFilter = None,
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Which Slurm accounts may charge which budgets, and the one each charges (its
    default)."""
    answer = ask(ctx, api, token, ca, lambda c: c.accounts(cluster))
    rows = [(b.account, b) for b in answer.bindings]
    table = _bindings_table("ACCOUNT", f"Slurm account bindings, as of {answer.as_of}", rows)
    emit(answer, as_json, lambda o: o.print(table))


def _bound(
    group: str,
    budget: str,
    default: bool,
    answer: NamespaceBindingAnswer | AccountBindingAnswer,
) -> str:
    """The line of a bind: ``k1/ml -> lab/a (default)``, and what it changed."""
    from services.api.models import BudgetAccepted

    text = f"{group} -> {budget}" + (" (default)" if default else "")
    if isinstance(answer, BudgetAccepted):
        return text + " (recorded; not yet visible)"
    text += "" if answer.changed else ": already so"
    if answer.replaced_default:
        text += f"; replaces default {answer.replaced_default}"
    return text


def _unbound(group: str, budget: str, answer: NamespaceBindingAnswer | AccountBindingAnswer) -> str:
    from services.api.models import BudgetAccepted

    # An accepted unbind (202) is recorded: unbound as far as the caller can tell.
    changed = True if isinstance(answer, BudgetAccepted) else answer.changed
    return f"{group} -> {budget}: " + ("unbound" if changed else "was not bound")


class _Binding(Protocol):
    """A row of ``GET /namespaces`` or ``GET /accounts``, less the group's name."""

    @property
    def cluster(self) -> str: ...
    @property
    def budget(self) -> str: ...
    @property
    def default(self) -> bool: ...
    @property
    def counts(self) -> bool: ...
    @property
    def bound_by(self) -> str: ...
    @property
    def bound_at(self) -> str: ...


def _bindings_table(column: str, title: str, rows: Sequence[tuple[str, _Binding]]) -> FittedTable:
    """The bindings of one kind of group: ``column`` names the group's column."""
    table = FittedTable(
        "CLUSTER",
        column,
        "BUDGET",
        "DEFAULT",
        "BOUND BY",
        "SINCE",
        whole=("CLUSTER", column, "BUDGET"),
        drop=("SINCE", "BOUND BY"),
        title=title,
    )
    for group, binding in rows:
        closed = "" if binding.counts else " (closed: does not count)"
        table.add_row(
            (
                binding.cluster,
                group,
                binding.budget + closed,
                "yes" if binding.default else "",
                binding.bound_by,
                binding.bound_at,
            )
        )
    return table


def create(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the new budget, e.g. lab/audio")],
    weight: Annotated[float, typer.Option(help="its weight among its siblings")] = 1.0,
    pool_weight: Annotated[
        list[str] | None,
        typer.Option(help="POOL=WEIGHT: another weight in one pool (repeatable)"),
    ] = None,
    description: Annotated[str, typer.Option(help="what it funds")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a budget (a manager of its parent; top-level budgets: admins)."""
    weights = _pool_weights(pool_weight or [])
    answer = ask(
        ctx, api, token, ca, lambda c: c.create_budget(budget, weight, weights, description)
    )
    emit(answer, as_json, lambda o: o.print(plain(_budget_line(budget, answer, "created"))))


def close(
    ctx: typer.Context,
    budget: Annotated[str, typer.Argument(help="the budget")],
    reason: Annotated[str, typer.Option(help="why (recorded with the event)")] = "",
    api: ApiOption = DEFAULT_API,
    token: TokenOption = None,
    ca: CaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Close a budget: its subtree takes no new work (a manager of its parent)."""
    answer = ask(ctx, api, token, ca, lambda c: c.close_budget(budget, reason))
    emit(answer, as_json, lambda o: o.print(plain(_budget_line(budget, answer, "closed"))))


def _pool_weights(items: list[str]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in items:
        pool, _, value = item.partition("=")
        try:
            weights[pool] = float(value)
        except ValueError as error:
            raise typer.BadParameter(
                f"{item!r} is not POOL=WEIGHT", param_hint="--pool-weight"
            ) from error
    return weights


def _budget_line(budget: str, answer: BudgetAnswer, done: str) -> str:
    from services.api.models import BudgetState

    if not isinstance(answer, BudgetState):
        return f"{budget}: {done} (recorded; not yet visible)"
    return f"{budget}: {done if answer.changed else 'already ' + done} (weight {answer.weight:g})"
