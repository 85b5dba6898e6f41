"""The read side of the API: answers built from a LiveState, in the API's words.

What to say is decided elsewhere (the queue order and why work waits in the scheduling core's
:mod:`~services.scheduler.core.why_pending`, the figures in the folds); this module only turns
it into the answers of :mod:`services.api.models` and the sentences clients have always read.
Nothing here changes the state it reads.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from events.models import PreemptCommand
from events.times import DEFAULT_WINDOW_S
from projections.budget_tree import ROOT, BudgetTree, parent_of
from projections.cluster_state import ClusterState, NodeState, WorkloadState
from projections.demand import wanted
from projections.live_state import CommandRecord, LiveState
from services.api import models as m
from services.api.errors import NotFound
from services.scheduler.core import why_pending as why
from services.scheduler.core.fairshare_order import FairShareOrder


@overload
def iso(ts: float) -> str: ...
@overload
def iso(ts: None) -> None: ...
def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _ratio(value: float) -> float | None:
    """JSON has no infinity: a budget without a share has no ratio."""
    return None if value == float("inf") else value


def _fmt(value: float) -> str:
    return "none" if value == float("inf") else f"{value:.4g}"


# -- lookups that answer 404 --------------------------------------------------------------------
def workload_or_404(state: LiveState, workload_id: str) -> WorkloadState:
    workload = state.cluster.workloads.get(workload_id)
    if workload is None:
        raise NotFound(f"unknown workload {workload_id!r}")
    return workload


def budget_or_404(state: LiveState, budget: str) -> None:
    if budget == ROOT or budget not in state.tree.nodes:
        raise NotFound(f"unknown budget {budget!r}")


def node_or_404(state: LiveState, node: str, user: str | None = None) -> NodeState:
    found = state.cluster.nodes.get(node)
    if found is None:
        raise NotFound(f"unknown node {node!r}", user=user)
    return found


def pools_or_404(state: LiveState, pool: str | None) -> list[str]:
    """Every known pool, or just ``pool`` if it is known."""
    pools = known_pools(state)
    if pool is None:
        return pools
    if pool not in pools:
        raise NotFound(f"unknown pool {pool!r}")
    return [pool]


def known_pools(state: LiveState) -> list[str]:
    return sorted(set(state.cluster.pools) | set(state.cluster.pending) | set(state.usage))


# -- workloads and nodes ------------------------------------------------------------------------
def workload_view(workload: WorkloadState) -> m.WorkloadView:
    contract_end = None
    if workload.allocated and workload.started_at is not None:
        contract_end = workload.started_at + workload.min_runtime_s
    return m.WorkloadView(
        workload_id=workload.workload_id,
        budget=workload.budget,
        submitter=workload.submitter,
        status=workload.status,
        pools=list(workload.pools),
        gpus=workload.gpus,
        gang=workload.gang,
        min_runtime_s=workload.min_runtime_s,
        allocated=workload.allocated,
        resumable=workload.resumable,
        priority=workload.priority,
        spec=workload.spec,
        attempt=workload.attempt,
        pool=workload.pool,
        placement=[m.PlacementPart(node=n, gpus=list(g)) for n, g in workload.placement],
        submitted_at=iso(workload.submitted_at),
        placed_at=iso(workload.placed_at),
        started_at=iso(workload.started_at),
        contract_ends_at=iso(contract_end),
        preempting=workload.preempting,
        cancel_requested=workload.cancel_requested,
    )


def matches(
    workload: WorkloadState,
    *,
    status: str | None = None,
    budget: str | None = None,
    submitter: str | None = None,
    pool: str | None = None,
) -> bool:
    if status is not None and workload.status != status:
        return False
    if budget is not None and not (
        workload.budget == budget or workload.budget.startswith(budget + "/")
    ):
        return False
    if submitter is not None and workload.submitter != submitter:
        return False
    return (
        pool is None or workload.pool == pool or (workload.pool is None and pool in workload.pools)
    )


def workload_list(
    state: LiveState,
    *,
    status: str | None,
    budget: str | None,
    submitter: str | None,
    pool: str | None,
    limit: int,
) -> m.WorkloadList:
    """Newest first."""
    found = [
        w
        for w in state.cluster.workloads.values()
        if matches(w, status=status, budget=budget, submitter=submitter, pool=pool)
    ]
    found.sort(key=lambda w: (-w.submitted_at, w.workload_id))
    return m.WorkloadList(total=len(found), workloads=[workload_view(w) for w in found[:limit]])


def node_state(node: NodeState) -> str:
    if node.down:
        return "down"
    if node.drained:
        return "drained"
    if node.cordoned:
        return "draining" if node.holders else "cordoned"
    if not node.assigned:
        return "idle"
    return "allocated" if node.free == 0 else "mixed"


def node_view(node: NodeState) -> m.NodeView:
    return m.NodeView(
        node=node.name,
        cluster=node.cluster,
        pool=node.pool,
        gpu_type=node.gpu_type,
        gpus=node.gpus,
        used_gpus=len(node.assigned),
        free_gpus=node.free,
        state=node_state(node),
        cordoned=node.cordoned,
        down=node.down,
        drained=node.drained,
        workloads=sorted(node.holders),
        last_heartbeat=iso(node.last_heartbeat),
    )


def node_list(state: LiveState, pool: str | None) -> m.NodeList:
    return m.NodeList(
        nodes=[
            node_view(n)
            for _, n in sorted(state.cluster.nodes.items())
            if pool is None or n.pool == pool
        ]
    )


def me(state: LiveState, user: str, admin: bool) -> m.Me:
    roles = {
        path: sorted(node.members[user])
        for path, node in sorted(state.tree.nodes.items())
        if node.members.get(user)
    }
    return m.Me(user=user, admin=admin, roles=roles)


# -- the queue ----------------------------------------------------------------------------------
def pending_queue(
    state: LiveState, pool: str, now: float, window_s: int = DEFAULT_WINDOW_S
) -> why.PoolQueue:
    return why.PoolQueue(
        state.cluster, state.tree, pool, now, state.usage_in_window(pool, now), window_s
    )


def pool_queue(
    state: LiveState,
    pool: str,
    now: float,
    window_s: int = DEFAULT_WINDOW_S,
    *,
    reasons: bool = True,
) -> m.PoolQueueView:
    """``pool``'s pending work in order, with position (1-based) and, if asked, reasons."""
    queue = pending_queue(state, pool, now, window_s)
    entries = []
    for position, workload in enumerate(queue.ordered, start=1):
        entries.append(
            m.QueueEntry(
                position=position,
                workload_id=workload.workload_id,
                budget=workload.budget,
                submitter=workload.submitter,
                gpus=workload.gpus,
                gang=workload.gang,
                min_runtime_s=workload.min_runtime_s,
                allocated=workload.allocated,
                priority=workload.priority,
                submitted_at=iso(workload.submitted_at),
                budget_rank=queue.rank(workload.budget),
                usage_ratio=_ratio(queue.usage_ratio(workload.budget)),
                reasons=reason_views(queue.reasons(position), now) if reasons else None,
            )
        )
    nodes = [n for n in state.cluster.nodes.values() if n.pool == pool]
    usable = [n for n in nodes if n.schedulable]
    return m.PoolQueueView(
        pool=pool,
        capacity=state.cluster.capacity(pool),
        free_gpus=sum(n.free for n in usable),
        largest_free_gpus=max((n.free for n in usable), default=0),
        cordoned_nodes=sorted(n.name for n in nodes if n.cordoned),
        queue_length=len(queue.ordered),
        pending=entries,
    )


def queue_view(
    state: LiveState,
    now: float,
    window_s: int,
    *,
    pool: str | None,
    budget: str | None,
    submitter: str | None,
    reasons: bool,
) -> m.QueueView:
    """Every pool's queue (or ``pool``'s), entries filtered by budget subtree and submitter
    (positions stay those of the whole queue)."""
    result = []
    for name in pools_or_404(state, pool):
        entry = pool_queue(state, name, now, window_s, reasons=reasons)
        entry.pending = [
            item
            for item in entry.pending
            if (budget is None or item.budget == budget or item.budget.startswith(budget + "/"))
            and (submitter is None or item.submitter == submitter)
        ]
        result.append(entry)
    return m.QueueView(as_of=iso(now), window_s=window_s, pools=result)


def why_view(state: LiveState, workload_id: str, now: float, window_s: int) -> m.WhyView:
    """Why a workload is pending (per acceptable pool) and its decision records."""
    workload = workload_or_404(state, workload_id)
    pending = []
    if workload.status == "pending":
        for pool in workload.pools:
            queue = pending_queue(state, pool, now, window_s)
            for position, queued in enumerate(queue.ordered, start=1):
                if queued.workload_id != workload_id:
                    continue
                pending.append(
                    m.PendingInPool(
                        pool=pool,
                        position=position,
                        queue_length=len(queue.ordered),
                        budget_rank=queue.rank(queued.budget),
                        usage_ratio=_ratio(queue.usage_ratio(queued.budget)),
                        reasons=reason_views(queue.reasons(position), now),
                    )
                )
    placements, preemptions = _records(state, workload_id)
    return m.WhyView(
        workload_id=workload_id,
        status=workload.status,
        attempt=workload.attempt,
        as_of=iso(now),
        pending=pending,
        placements=placements,
        preemptions=preemptions,
    )


# -- reasons, in words --------------------------------------------------------------------------
def reason_views(reasons: tuple[why.PendingReason, ...], now: float) -> list[m.Reason]:
    return [reason_view(reason, now) for reason in reasons]


def reason_view(reason: why.PendingReason, now: float) -> m.Reason:
    """One typed reason of the core as the API says it (code, sentence, details)."""
    match reason:
        case why.NoShare(budget=budget, pool=pool):
            message = (
                f"{budget} has no share of {pool} (closed, or not in the tree): its work is "
                "considered last"
            )
            return m.PlainReason(code=reason.code.value, message=message)
        case why.NoNodes(pool=pool):
            message = f"no node is registered in pool {pool}"
            return m.PlainReason(code=reason.code.value, message=message)
        case why.Unallocated():
            message = (
                "it runs unallocated (min_runtime 0): it never preempts, and waits for idle GPUs"
            )
            return m.PlainReason(code=reason.code.value, message=message)
        case why.FairShare():
            return _fair_share(reason)
        case why.BudgetQueue(budget=budget, workloads_ahead=ahead):
            message = (
                f"{len(ahead)} workload(s) of {budget} come first (higher priority or submitted "
                "earlier)"
            )
            return m.BudgetQueueReason(
                code="budget-queue", message=message, workloads_ahead=list(ahead[:20])
            )
        case why.TooLarge() | why.FitsNow() | why.InsufficientCapacity():
            return _capacity(reason)
        case why.Contract():
            return _contract(reason, now)
        case why.Starting(workloads=workloads):
            message = (
                "placed work has not started yet (its contract starts when it does): "
                + ", ".join(workloads[:10])
            )
            return m.WorkloadsReason(
                code="starting", message=message, workloads=list(workloads[:10])
            )
        case why.RanksAhead():
            return _ranks_ahead(reason)
        case why.CordonedNodes(pool=pool, nodes=nodes, gpus=gpus):
            message = (
                f"{len(nodes)} node(s) of {pool} are cordoned ({gpus} GPUs take no new work): "
                + ", ".join(nodes)
            )
            return m.CordonedReason(
                code="cordoned-nodes", message=message, nodes=list(nodes), gpus=gpus
            )
        case why.DownNodes(pool=pool, nodes=nodes):
            message = f"{len(nodes)} node(s) of {pool} are down: {', '.join(nodes)}"
            return m.DownReason(code="down-nodes", message=message, nodes=list(nodes))


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)


def _fair_share(reason: why.FairShare) -> m.FairShareReason:
    message = (
        f"{reason.workloads_ahead} workload(s) of budget(s) ranking ahead of {reason.budget} "
        f"(rank {_rank(reason.rank)}, usage ratio {_fmt(reason.usage_ratio)}) come first: "
        + ", ".join(
            f"{b.budget} (rank {_rank(b.rank)}, usage ratio {_fmt(b.usage_ratio)})"
            for b in reason.ahead
        )
    )
    return m.FairShareReason(
        code="fair-share",
        message=message,
        budget=reason.budget,
        budget_rank=reason.rank,
        budget_usage_ratio=_ratio(reason.usage_ratio),
        budgets_ahead=[
            m.BudgetAheadView(
                budget=b.budget,
                rank=b.rank,
                usage_ratio=_ratio(b.usage_ratio),
                workloads_ahead=b.workloads_ahead,
            )
            for b in reason.ahead
        ],
    )


def _capacity(reason: why.TooLarge | why.FitsNow | why.InsufficientCapacity) -> m.CapacityReason:
    fit = reason.offer
    shape = "on whole nodes" if fit.needs_whole_nodes else "on one node"
    if isinstance(reason, why.TooLarge):
        if reason.limit == "pool":
            message = (
                f"needs {reason.gpus} GPUs but {reason.pool} has only {reason.limit_gpus} GPUs "
                "on nodes that are up"
            )
        else:
            message = (
                f"needs {reason.gpus} GPUs on one node; the largest node of {reason.pool} has "
                f"{reason.limit_gpus}"
            )
    elif isinstance(reason, why.FitsNow):
        where = fit.largest_free_node if not fit.needs_whole_nodes else "idle nodes"
        message = (
            f"{reason.gpus} GPU(s) are free {shape} ({where}): the next scheduling pass should "
            "place it, unless work ahead of it takes them first"
        )
    else:
        if fit.needs_whole_nodes:
            offer = f"{fit.free_gpus_on_idle_nodes} GPU(s) are on fully idle nodes"
        else:
            offer = f"the largest free block is {fit.largest_free_gpus} GPU(s)" + (
                f" on {fit.largest_free_node}" if fit.largest_free_node else ""
            )
        message = (
            f"needs {reason.gpus} GPU(s) {shape}; {offer} ({fit.free_gpus} free in {reason.pool})"
        )
    return m.CapacityReason(
        code=reason.code.value,
        message=message,
        fits_now=fit.fits_now,
        needs_whole_nodes=fit.needs_whole_nodes,
        free_gpus=fit.free_gpus,
        largest_free_node=fit.largest_free_node,
        largest_free_gpus=fit.largest_free_gpus,
        free_gpus_on_idle_nodes=fit.free_gpus_on_idle_nodes,
        capacity=fit.capacity,
        largest_node_gpus=fit.largest_node_gpus,
    )


def _contract(reason: why.Contract, now: float) -> m.ContractReason:
    first = reason.waits_on
    end = first.ends_at
    message = (
        "preemption is blocked by a min_runtime: it waits on "
        f"{first.workload_id} ({first.budget}, {first.gpus} GPU(s), "
        f"min_runtime {first.min_runtime_s} s), "
        f"whose contract ends at {iso(end)} (in {max(0, round(end - now))} s)"
    )
    return m.ContractReason(
        code="contract",
        message=message,
        waits_on=first.workload_id,
        contract_ends_at=iso(end),
        contracts=[
            m.ContractView(
                workload_id=hold.workload_id,
                budget=hold.budget,
                gpus=hold.gpus,
                min_runtime_s=hold.min_runtime_s,
                contract_ends_at=iso(hold.ends_at),
            )
            for hold in reason.holds[:10]
        ],
    )


def _ranks_ahead(reason: why.RanksAhead) -> m.WorkloadsReason:
    shown = reason.workloads[:10]
    message = (
        "running work past its contract belongs to budgets that rank ahead of "
        f"{reason.budget} even after counting this request, so it may not be preempted: "
        + ", ".join(f"{w.workload_id} ({w.budget}, rank {_rank(w.rank)})" for w in shown)
    )
    return m.WorkloadsReason(
        code="ranks-ahead", message=message, workloads=[w.workload_id for w in shown]
    )


# -- decision records ---------------------------------------------------------------------------
def _records(
    state: LiveState, workload_id: str
) -> tuple[list[m.PlacementRecord], list[m.PreemptionRecord]]:
    """The place and preempt commands of a workload, with their decision records."""
    placements: list[m.PlacementRecord] = []
    preemptions: list[m.PreemptionRecord] = []
    for record in state.commands.get(workload_id, []):
        command = record.command
        if isinstance(command, PreemptCommand):
            preemptions.append(_preemption(state, record, command))
            continue
        placements.append(
            m.PlacementRecord(
                **_decision_fields(record),
                placement=[
                    m.PlacementPart(node=part.node, gpus=list(part.gpus))
                    for part in command.placement.nodes
                ],
            )
        )
    return placements, preemptions


def _decision_fields(record: CommandRecord) -> dict[str, Any]:
    command = record.command
    decision = command.decision
    return {
        "time": iso(record.time),
        "command_id": command.command_id,
        "attempt": command.attempt,
        "pool": command.pool,
        "reason": decision.reason,
        "detail": decision.detail,
        "pass_id": decision.pass_id,
        "input_position": [p.model_dump() for p in decision.input_position],
        "budgets": [b.model_dump() for b in decision.budgets],
    }


def _preemption(
    state: LiveState, record: CommandRecord, command: PreemptCommand
) -> m.PreemptionRecord:
    decision = command.decision
    preemptor = state.cluster.workloads.get(decision.preemptor or "")
    preemptor_budget = None if preemptor is None else preemptor.budget
    fields = _decision_fields(record)
    return m.PreemptionRecord(
        **fields,
        preemptor=decision.preemptor,
        preemptor_budget=preemptor_budget,
        requeue=command.requeue,
        grace_period_s=command.grace_period_s,
        message=_preempt_message(decision.reason, decision.preemptor, preemptor_budget, fields),
    )


def _preempt_message(
    reason: str, preemptor: str | None, preemptor_budget: str | None, fields: dict[str, Any]
) -> str:
    standings = "; ".join(
        f"{b['budget']} rank {b['rank']}, usage ratio {b['usage_ratio']:.4g}"
        for b in fields["budgets"]
    )
    text = {
        "preempt-for": f"preempted to make room for {preemptor}"
        + (f" ({preemptor_budget})" if preemptor_budget else ""),
        "drain": "preempted because its node is cordoned and its contract was over",
        "node-lost": "its node stopped sending heartbeats",
        "cancel": "cancelled by its submitter",
    }.get(reason, reason)
    where = f" (pass {fields['pass_id']}"
    if fields["input_position"]:
        where += ", decided at " + ", ".join(
            f"{p['topic']}/{p['partition']}@{p['offset']}" for p in fields["input_position"]
        )
    where += ")"
    return text + (f"; budgets: {standings}" if standings else "") + where


def command_records(state: LiveState, workload_id: str) -> dict[str, list[dict[str, Any]]]:
    """The decision records as plain dicts, for readers that index them (the dashboard)."""
    placements, preemptions = _records(state, workload_id)
    return {
        "placements": [r.model_dump() for r in placements],
        "preemptions": [r.model_dump() for r in preemptions],
    }


# -- budgets ------------------------------------------------------------------------------------
def _order(state: LiveState, pool: str, now: float, window_s: int) -> FairShareOrder:
    return FairShareOrder(
        state.tree,
        pool,
        now,
        state.usage_in_window(pool, now),
        state.cluster.capacity(pool),
        window_s,
    )


#: How ``owed_gpu_s`` is computed, sent with every budget report.
OWED = (
    "GPU-seconds over the window of min(share x capacity, demand), moment by moment, per leaf; "
    "an inner budget's is the sum of its leaves'"
)


def budget_report(
    state: LiveState, now: float, window_s: int = DEFAULT_WINDOW_S, pools: list[str] | None = None
) -> m.BudgetReport:
    """The tree with, per pool: share, window usage, usage ratio, rank, owed and delivered.

    * usage = delivered = allocated GPU-seconds of the subtree in the window (the latest usage
      snapshot plus running allocated work since it, :meth:`LiveState.usage_in_window`);
    * owed = for a leaf, the integral over the window of min(share x capacity, its demand)
      (docs/design.md section 6: a budget that asked for nothing is owed nothing), from the demand
      history the live state keeps, with the shares of each moment; for an inner budget, the
      sum of its leaves' (as in the charges report: a sibling's unused entitlement is owed to
      no one);
    * ``demand_gpus`` (GPUs of the subtree's pending and running allocated work now) and
      ``entitled_gpus`` = min(share x capacity, demand now): what it is owed at this instant.
    """
    tree = state.tree
    pools = known_pools(state) if pools is None else pools
    figures = {pool: _PoolFigures(state, pool, now, window_s) for pool in pools}
    budgets = []
    for path in sorted(p for p in tree.nodes if p != ROOT):
        node = tree.nodes[path]
        budgets.append(
            m.BudgetView(
                budget=path,
                parent=parent_of(path) or None,
                depth=path.count("/"),
                leaf=node.is_leaf,
                closed=not node.open_at(now),
                weight=node.weight_at("", now),
                pool_weights={p: node.weight_at(p, now) for p in sorted(node.pool_weights)},
                members={u: sorted(r) for u, r in sorted(node.members.items()) if r},
                pools={pool: figures[pool].of(path, node.is_leaf) for pool in pools},
            )
        )
    return m.BudgetReport(
        as_of=iso(now),
        window_s=window_s,
        pools=[m.PoolCapacity(pool=p, capacity=state.cluster.capacity(p)) for p in pools],
        owed=OWED,
        budgets=budgets,
    )


def budget_detail(state: LiveState, budget: str, now: float, window_s: int) -> m.BudgetDetail:
    budget_or_404(state, budget)
    report = budget_report(state, now, window_s)
    entry = next(b for b in report.budgets if b.budget == budget)
    return m.BudgetDetail(**dict(entry), as_of=report.as_of, window_s=window_s)


class _PoolFigures:
    """One pool's figures for every budget, computed once per report."""

    def __init__(self, state: LiveState, pool: str, now: float, window_s: int) -> None:
        self.order = _order(state, pool, now, window_s)
        self.capacity = state.cluster.capacity(pool)
        self.demand = _demand(state.cluster, state.tree, pool)
        self.owed = _owed(state, pool, now, window_s)

    def of(self, path: str, leaf: bool) -> m.PoolFigures:
        order = self.order
        share = order.shares.get(path)
        used = order.usage.get(path, 0.0)
        owed = None if share is None else self.owed.get(path, 0.0)
        demand = self.demand.get(path, 0)
        return m.PoolFigures(
            share=share,
            usage_gpu_s=round(used, 3),
            usage_ratio=None if share is None else _ratio(order.ratio(path)),
            rank=order.ranks().get(path) if leaf else None,
            sibling_rank=_sibling_rank(order, path),
            owed_gpu_s=None if owed is None else round(owed, 3),
            delivered_gpu_s=round(used, 3),
            delivered_ratio=None if not owed else round(used / owed, 6),
            demand_gpus=demand,
            entitled_gpus=None if share is None else min(share * self.capacity, demand),
        )


def _sibling_rank(order: FairShareOrder, path: str) -> int | None:
    if path not in order.shares:
        return None
    siblings = sorted(order.children.get(parent_of(path), []), key=order.key)
    return siblings.index(path) + 1 if path in siblings else None


def _owed(state: LiveState, pool: str, now: float, window_s: int) -> dict[str, float]:
    tree, capacity = state.tree, state.cluster.capacity(pool)
    lo = now - window_s

    def entitled(at: float) -> dict[str, float]:
        return {path: share * capacity for path, share in tree.shares(pool, at).items()}

    owed: dict[str, float] = {}
    leaves = state.demand.owed(pool, lo, now, entitled, tree.change_times(lo, now))
    for leaf, amount in leaves.items():
        for ancestor in tree.ancestors(leaf):
            owed[ancestor] = owed.get(ancestor, 0.0) + amount
    return owed


def _demand(cluster: ClusterState, tree: BudgetTree, pool: str) -> dict[str, int]:
    """GPUs of pending and running allocated work per budget (summed up the tree)."""
    leaf: dict[str, int] = {}
    for workload in cluster.workloads.values():
        gpus = wanted(cluster, workload, awaiting_requeue=False).get(pool)
        if gpus:
            leaf[workload.budget] = leaf.get(workload.budget, 0) + gpus
    total: dict[str, int] = {}
    for budget, gpus in leaf.items():
        for ancestor in tree.ancestors(budget):
            total[ancestor] = total.get(ancestor, 0) + gpus
    return total
