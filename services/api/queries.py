"""The read side of the API: answers built from a LiveState, one function per figure.

What to say is decided elsewhere (the queue order and why work waits in the scheduling core's
:mod:`~scheduling.why_pending`, put into answers by :mod:`services.api.waiting`
and into words by :mod:`services.api.sentences`; the fair-share figures in the folds; delivered
and owed by :mod:`projections.figures` over the read models, :mod:`services.reports.window`);
this module turns them into the answers of :mod:`services.api.models`. Nothing here changes the
state it reads.
"""

from __future__ import annotations

import logging
import math

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from events.models.budgets import KUBERNETES_NAMESPACE, SLURM_ACCOUNT
from events.times import DEFAULT_WINDOW_S
from projections.bindings import Binding, counts
from projections.budget_tree import ROOT, BudgetTree, parent_of
from projections.cluster_state import ClusterState
from projections.cluster_types import TERMINAL, NodeState, WorkloadState
from projections.contract import contract_end
from projections.figures import Bins, BudgetSeries, OpenRun, PoolFigures, wanted
from projections.live_state import LiveState
from scheduling.fairshare_order import FairShareOrder
from services.api import estimates, waiting
from services.api import models as m
from services.api.errors import NotFound
from services.api.sentences import iso, ratio
from services.api.waiting import command_records, pending_queue, pool_queue, workload_name
from services.reports.source import window_start
from services.reports.window import WindowFigures
from services.reports.window import window_figures as read_window_figures

log = logging.getLogger(__name__)

#: Re-exported: readers (the dashboard) have always found these here.
__all__ = [
    "command_records",
    "iso",
    "pending_queue",
    "pool_queue",
]


# -- lookups that answer 404 --------------------------------------------------------------------
def workload_or_404(state: LiveState, workload_id: str) -> WorkloadState:
    workload = state.cluster.workloads.get(resolve_workload_id(state, workload_id))
    if workload is None:
        raise NotFound(f"unknown workload {workload_id!r}")
    return workload


#: The shortest prefix of a workload id a reader may type for the whole (git's default too).
MIN_PREFIX = 4
#: Candidates an ambiguous prefix names.
_SHOWN = 5


def resolve_workload_id(state: LiveState, typed: str) -> str:
    """``typed``, or the one live workload whose id it begins (at least :data:`MIN_PREFIX`
    characters), as git takes a unique prefix of a commit; an ambiguous prefix is a 404 that
    names the candidates. Looked for only when no id is ``typed`` exactly, so a whole id
    never costs a scan."""
    workloads = state.cluster.workloads
    if typed in workloads or len(typed) < MIN_PREFIX:
        return typed
    found = sorted(w for w in workloads if w.startswith(typed))
    if len(found) > 1:
        named = ", ".join(found[:_SHOWN]) + (", ..." if len(found) > _SHOWN else "")
        raise NotFound(
            f"workload id prefix {typed!r} is ambiguous: {len(found)} workloads begin with it "
            f"({named}); type more of it"
        )
    return found[0] if found else typed


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
def workload_view(
    state: LiveState,
    workload: WorkloadState,
    now: float | None = None,
    *,
    window_s: int | None = None,
) -> m.WorkloadView:
    """A workload, with its elapsed time and contract left at ``now`` (None: not computed), and
    with ``window_s`` (and ``now``), its estimated start while it is pending."""
    ends = None
    if workload.allocated and workload.started_at is not None:
        ends = contract_end(workload.started_at, workload.min_runtime_s)
    elapsed = contract_left = None
    if now is not None and workload.started_at is not None:
        until = workload.ended_at if workload.ended_at is not None else now
        elapsed = max(0, round(until - workload.started_at))
        if ends is not None and workload.status in ("placed", "running"):
            contract_left = max(0, round(ends - now))
    limit = estimates.run_limit(state, workload, now if now is not None else workload.submitted_at)
    estimate = None
    if now is not None and window_s is not None and workload.status == "pending":
        found = estimates.start_estimates(state, now, window_s, (workload.workload_id,))
        estimate = found.get(workload.workload_id)
    starts = {} if estimate is None else _start_fields(estimate)
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
        contract_ends_at=iso(ends),
        preempting=workload.preempting,
        cancel_requested=workload.cancel_requested,
        name=workload_name(workload.spec),
        preemptions=waiting.preemption_count(state, workload.workload_id),
        ended_at=iso(workload.ended_at),
        exit_code=workload.exit_code,
        end_message=workload.end_message,
        elapsed_s=elapsed,
        contract_left_s=contract_left,
        charged_gpu_s=state.charged_gpu_s.get(workload.workload_id, 0),
        burst_gpu_s=state.free_gpu_s.get(workload.workload_id, 0),
        running_gpu_s=running_gpu_s(state, workload, now),
        time_limit_s=workload.time_limit_s,
        run_time_limit_s=limit.limit_s,
        time_limit_ends_at=limit.ends_at,
        **starts,
        array_id=workload.array_id,
        array_index=workload.array_index,
        held_by_array=state.cluster.indexes.held_by_array(workload),
    )


def running_gpu_s(state: LiveState, workload: WorkloadState, now: float | None) -> int:
    """What the workload's running attempt has used and no charge holds yet, by the rule
    ``/budgets`` counts delivered with (``figures.OpenRun.uncharged``)."""
    if now is None or workload.status != "running" or workload.started_at is None:
        return 0
    attempt, through = state.charged_through.get(workload.workload_id, (0, 0.0))
    charged_until = through if attempt == workload.attempt else 0.0
    run = OpenRun(
        workload.budget, workload.allocated, workload.gpus, workload.started_at, charged_until
    )
    return round(run.uncharged(workload.started_at, now))


def matches(
    workload: WorkloadState,
    *,
    status: str | None = None,
    budget: str | None = None,
    submitter: str | None = None,
    pool: str | None = None,
    array: str | None = None,
) -> bool:
    if status is not None and workload.status != status:
        return False
    if array is not None and workload.array_id != array:
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
    preempted: bool = False,
    now: float | None = None,
    array: str | None = None,
) -> m.WorkloadList:
    """Newest first (an array's elements by index); ``preempted``: only work preempted at
    least once (it is requeued, so no status says so); ``array``: only its elements."""
    found = [
        w
        for w in _candidates(state, array)
        if matches(w, status=status, budget=budget, submitter=submitter, pool=pool, array=array)
        and (not preempted or waiting.preemption_count(state, w.workload_id) > 0)
    ]
    found.sort(key=lambda w: (-w.submitted_at, w.queue_key()[2], w.workload_id))
    return m.WorkloadList(
        total=len(found), workloads=[workload_view(state, w, now) for w in found[:limit]]
    )


def _candidates(state: LiveState, array: str | None) -> list[WorkloadState]:
    """The workloads a filtered list looks at: an array's elements only, when one is asked."""
    workloads = state.cluster.workloads
    if array is None:
        return list(workloads.values())
    found = state.cluster.arrays.get(array)
    elements = () if found is None else found.elements
    return [workloads[w] for w in elements if w in workloads]


#: Statuses a workload ends in; preempted and lost only when it will not be requeued.
ENDED = frozenset({*TERMINAL, "preempted", "lost"})


def finished(state: LiveState, workload: WorkloadState) -> bool:
    """Whether ``workload`` is over for good (not waiting to be requeued)."""
    return workload.status in ENDED and workload.workload_id not in state.cluster.awaiting_requeue


def history(
    state: LiveState,
    now: float,
    *,
    budget: str | None,
    submitter: str | None,
    pool: str | None,
    since: float | None,
    limit: int,
    array: str | None = None,
) -> m.WorkloadList:
    """Finished work, the latest end first (like sacct): exit code, elapsed time and the
    GPU-seconds charged are in each view; ``array``: only its elements."""
    found = [
        w
        for w in _candidates(state, array)
        if finished(state, w)
        and matches(w, budget=budget, submitter=submitter, pool=pool, array=array)
        and (since is None or (w.ended_at or w.submitted_at) >= since)
    ]
    found.sort(key=lambda w: (-(w.ended_at or w.submitted_at), w.workload_id))
    return m.WorkloadList(
        total=len(found), workloads=[workload_view(state, w, now) for w in found[:limit]]
    )


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
        cordon_reason=node.cordon_reason,
        cordoned_by=node.cordoned_by,
        cordoned_at=iso(node.cordoned_at),
        foreign_gpus=node.foreign,
        foreign_holders=[m.ForeignHolderView(**h.model_dump()) for h in node.foreign_holders],
        foreign_since=iso(node.foreign_since),
    )


def node_list(state: LiveState, pool: str | None) -> m.NodeList:
    return m.NodeList(
        nodes=[
            node_view(n)
            for _, n in sorted(state.cluster.nodes.items())
            if pool is None or n.pool == pool
        ]
    )


def pool_list(state: LiveState) -> m.PoolList:
    """Every pool with nodes or work: what ``fairshare submit`` picks from when there is one."""
    pools = []
    for pool in known_pools(state):
        nodes = [n for n in state.cluster.nodes.values() if n.pool == pool]
        pools.append(
            m.PoolView(
                pool=pool,
                capacity=state.cluster.capacity(pool),
                free_gpus=sum(n.free for n in nodes if n.schedulable),
                nodes=len(nodes),
            )
        )
    return m.PoolList(pools=pools)


def me(state: LiveState, user: str, admin: bool) -> m.Me:
    roles = {
        path: sorted(node.members[user])
        for path, node in sorted(state.tree.nodes.items())
        if node.members.get(user)
    }
    return m.Me(user=user, admin=admin, roles=roles)


# -- the queue ----------------------------------------------------------------------------------
def queue_view(
    state: LiveState,
    now: float,
    window_s: int,
    *,
    pool: str | None,
    budget: str | None,
    submitter: str | None,
    reasons: bool,
    start: bool = False,
    array: str | None = None,
) -> m.QueueView:
    """Every pool's queue (or ``pool``'s; 404 if unknown), entries filtered by budget subtree,
    submitter and array (positions stay those of the whole queue); with ``start``, each
    entry's estimated start (one forward run for the whole queue)."""
    pools = pools_or_404(state, pool)
    view = waiting.queue_view(
        state,
        now,
        window_s,
        pools,
        budget=budget,
        submitter=submitter,
        reasons=reasons,
        array=array,
    )
    if start:
        ids = [entry.workload_id for queue in view.pools for entry in queue.pending]
        found = estimates.start_estimates(state, now, window_s, ids)
        for queue in view.pools:
            for entry in queue.pending:
                estimate = found.get(entry.workload_id)
                if estimate is not None:
                    for name, value in _start_fields(estimate).items():
                        setattr(entry, name, value)
    return view


def _start_fields(estimate: estimates.Estimate) -> dict[str, str | None]:
    """An estimate as the answers' fields (one place for ``show`` and ``queue --start``)."""
    return {
        "estimated_start": iso(estimate.at),
        "start_basis": estimate.basis,
        "latest_start": iso(estimate.latest),
    }


def why_view(state: LiveState, workload_id: str, now: float, window_s: int) -> m.WhyView:
    """Why a workload is pending, or what happened to it (404 if unknown; a unique prefix of
    its id will do)."""
    workload = workload_or_404(state, workload_id)
    return waiting.why_view(state, workload.workload_id, now, window_s)


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


#: How ``owed_gpu_s`` and ``delivered_gpu_s`` are computed, sent with every budget report.
OWED = (
    "from the read models (projections.figures, the one computation every surface asks), over "
    "the window's hours up to now: delivered = GPU-seconds charged to the budget, corrections "
    "included, plus what its running work used since its last charge; owed = min(share x "
    "capacity, demand) moment by moment, per leaf, counted to the same instant; capacity counts "
    "every node that is not down; an inner budget's are the sums of its leaves'"
)


def budget_report(
    state: LiveState,
    now: float,
    window_s: int = DEFAULT_WINDOW_S,
    pools: list[str] | None = None,
    figures: WindowFigures | None = None,
) -> m.BudgetReport:
    """The tree with, per pool: share, window usage, usage ratio, rank and fair-share factor
    (live: what the scheduler ranks by), and delivered and owed (``figures``: the one
    computation every surface asks, :mod:`projections.figures`; null without read models).

    * usage = allocated GPU-seconds of the subtree in the window (the latest usage snapshot
      plus running allocated work since it, :meth:`LiveState.usage_in_window`);
    * ``demand_gpus`` (GPUs of the subtree's pending and running allocated work now) and
      ``entitled_gpus`` = min(share x capacity, demand now): what it is owed at this instant.
    """
    tree = state.tree
    pools = known_pools(state) if pools is None else pools
    by_pool = {pool: _PoolFigures(state, pool, now, window_s, figures) for pool in pools}
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
                pools={pool: by_pool[pool].of(path, node.is_leaf) for pool in pools},
                namespaces=[
                    binding_view(state, b)
                    for b in state.bindings.of_budget(path)
                    if b.kind == KUBERNETES_NAMESPACE
                ],
                accounts=[
                    account_view(state, b)
                    for b in state.bindings.of_budget(path)
                    if b.kind == SLURM_ACCOUNT
                ],
            )
        )
    return m.BudgetReport(
        as_of=iso(now),
        window_s=window_s,
        pools=[m.PoolCapacity(pool=p, capacity=state.cluster.capacity(p)) for p in pools],
        owed=OWED,
        budgets=budgets,
        delivered_owed=None if figures is None else _source(figures),
    )


def window_figures(
    engine: Engine | None, now: float, window_s: int, pool: str | None = None
) -> WindowFigures | None:
    """Delivered and owed over the window's hours up to ``now``
    (:func:`services.reports.window.window_figures`); None without read models (or when they
    cannot be read: logged)."""
    if engine is None:
        return None
    try:
        bins = Bins.one(float(window_start(int(now), window_s)), now)
        return read_window_figures(engine, bins, pools=None if pool is None else [pool])
    except DBAPIError as error:
        log.warning("read models unreadable: no delivered and owed", extra={"error": str(error)})
        return None


def _source(figures: WindowFigures) -> m.FiguresSource:
    return m.FiguresSource(
        from_=iso(figures.bins.bounds[0]),
        to=iso(figures.bins.stop),
        as_of=None if figures.horizon is None else iso(figures.horizon),
        log_position=figures.log_position,
    )


def binding_view(state: LiveState, binding: Binding) -> m.NamespaceBinding:
    return m.NamespaceBinding(
        budget=binding.budget,
        cluster=binding.cluster,
        namespace=binding.group,
        default=binding.default,
        counts=counts(state.tree, binding.budget),
        bound_by=binding.bound_by,
        bound_at=iso(binding.bound_at),
    )


def namespace_bindings(state: LiveState, now: float, cluster: str | None) -> m.NamespaceBindingList:
    """Every Kubernetes namespace bound to a budget (of one cluster)."""
    bindings = state.bindings.all(cluster=cluster, kind=KUBERNETES_NAMESPACE)
    return m.NamespaceBindingList(
        as_of=iso(now), bindings=[binding_view(state, b) for b in bindings]
    )


def account_view(state: LiveState, binding: Binding) -> m.AccountBinding:
    return m.AccountBinding(
        budget=binding.budget,
        cluster=binding.cluster,
        account=binding.group,
        default=binding.default,
        counts=counts(state.tree, binding.budget),
        bound_by=binding.bound_by,
        bound_at=iso(binding.bound_at),
    )


def account_bindings(state: LiveState, now: float, cluster: str | None) -> m.AccountBindingList:
    """Every Slurm account bound to a budget (of one cluster)."""
    bindings = state.bindings.all(cluster=cluster, kind=SLURM_ACCOUNT)
    return m.AccountBindingList(as_of=iso(now), bindings=[account_view(state, b) for b in bindings])


def budget_detail(
    state: LiveState,
    budget: str,
    now: float,
    window_s: int,
    figures: WindowFigures | None = None,
) -> m.BudgetDetail:
    budget_or_404(state, budget)
    report = budget_report(state, now, window_s, figures=figures)
    entry = next(b for b in report.budgets if b.budget == budget)
    return m.BudgetDetail(**dict(entry), as_of=report.as_of, window_s=window_s)


def fairshare_factor(usage_ratio: float) -> float:
    """sshare's FairShare, 2^-(usage / share): 1 for no usage, 0.5 at exactly its share,
    towards 0 the more over-served; strictly decreasing in the ratio the scheduler ranks by,
    so it orders siblings as the ranks do."""
    return round(math.exp2(-min(usage_ratio, 1e6)), 6)


class _PoolFigures:
    """One pool's figures for every budget, computed once per report."""

    def __init__(
        self,
        state: LiveState,
        pool: str,
        now: float,
        window_s: int,
        figures: WindowFigures | None,
    ) -> None:
        self.pool = pool
        self.order = _order(state, pool, now, window_s)
        self.capacity = state.cluster.capacity(pool)
        self.demand = _demand(state.cluster, state.tree, pool)
        self.figures = None if figures is None else figures.pools.get(pool)
        self.read = figures is not None

    def of(self, path: str, leaf: bool) -> m.PoolFigures:
        order = self.order
        share = order.shares.get(path)
        used = order.usage.get(path, 0.0)
        demand = self.demand.get(path, 0)
        usage_ratio = None if share is None else ratio(order.ratio(path))
        delivered, owed, delivered_ratio = _delivered_owed(self.read, self.figures, path)
        return m.PoolFigures(
            share=share,
            usage_gpu_s=round(used, 3),
            usage_ratio=usage_ratio,
            rank=order.ranks().get(path) if leaf else None,
            sibling_rank=_sibling_rank(order, path),
            owed_gpu_s=owed,
            delivered_gpu_s=delivered,
            delivered_ratio=delivered_ratio,
            demand_gpus=demand,
            entitled_gpus=None if share is None else min(share * self.capacity, demand),
            fairshare_factor=None if usage_ratio is None else fairshare_factor(usage_ratio),
        )


def _delivered_owed(
    read: bool, figures: PoolFigures | None, budget: str
) -> tuple[float | None, float | None, float | None]:
    """(delivered, owed, delivered/owed): GPU-seconds (to the millisecond) and a ratio of 6
    decimals; all None without read models."""
    if not read:
        return None, None, None
    found: BudgetSeries | None = None if figures is None else figures.budgets.get(budget)
    if found is None:
        return 0, 0, None
    ratio_ = found.ratio()
    return (
        round(found.delivered_total, 3),
        round(found.owed_total, 3),
        None if ratio_ is None else round(ratio_, 6),
    )


def _sibling_rank(order: FairShareOrder, path: str) -> int | None:
    if path not in order.shares:
        return None
    siblings = sorted(order.children.get(parent_of(path), []), key=order.key)
    return siblings.index(path) + 1 if path in siblings else None


def _demand(cluster: ClusterState, tree: BudgetTree, pool: str) -> dict[str, int]:
    """GPUs of pending and running allocated work per budget (summed up the tree)."""
    leaf: dict[str, int] = {}
    for workload in _may_want(cluster, pool):
        gpus = wanted(cluster, workload).get(pool)
        if gpus:
            leaf[workload.budget] = leaf.get(workload.budget, 0) + gpus
    total: dict[str, int] = {}
    for budget, gpus in leaf.items():
        for ancestor in tree.ancestors(budget):
            total[ancestor] = total.get(ancestor, 0) + gpus
    return total


def _may_want(cluster: ClusterState, pool: str) -> list[WorkloadState]:
    """The work that may want GPUs in ``pool`` (:func:`projections.figures.wanted` says how
    many): queued there, held back by its array's limit (pending work wants its GPUs, as the
    read models count it), holding GPUs there, or awaiting its requeue. Read from the fold's
    indexes, not from every workload it remembers: a long history holds thousands ended."""
    ids = set(cluster.active.get(pool, ())) | set(cluster.awaiting_requeue)
    for by_kind in cluster.pending.get(pool, {}).values():
        for queue in by_kind.values():
            ids.update(key[3] for key in queue)
    for gate in cluster.indexes.gates.values():
        ids.update(key[3] for key in gate.held)
    return [cluster.workloads[i] for i in sorted(ids) if i in cluster.workloads]
