"""Read-only computations over a LiveState: workloads, nodes, the queue with its reasons,
preemption records, and the budget report.

Nothing here changes the state it reads (the scheduling pass mutates its input, so it is never
called here): the queue order is recomputed with its own :class:`FairShareOrder`, charging that
object only, exactly as the pass orders its candidates.
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime
from typing import Any

from events.times import DEFAULT_WINDOW_S
from projections.budget_tree import ROOT, BudgetTree, parent_of
from projections.cluster_state import ClusterState, NodeState, QueueKey, WorkloadState
from projections.demand import wanted
from projections.live_state import LiveState
from services.scheduler.core.fairshare_order import FairShareOrder
from services.scheduler.core.placement import largest_node, needs_whole_nodes

#: The lookback window of fair share (DESIGN.md: 7 days, sliding).


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _ratio(value: float) -> float | None:
    """JSON has no infinity: a budget without a share has no ratio."""
    return None if value == float("inf") else value


# -- workloads and nodes ----------------------------------------------------------------------
def workload_view(workload: WorkloadState) -> dict[str, Any]:
    contract_end = None
    if workload.allocated and workload.started_at is not None:
        contract_end = workload.started_at + workload.min_runtime_s
    return {
        "workload_id": workload.workload_id,
        "budget": workload.budget,
        "submitter": workload.submitter,
        "status": workload.status,
        "pools": list(workload.pools),
        "gpus": workload.gpus,
        "gang": workload.gang,
        "min_runtime_s": workload.min_runtime_s,
        "allocated": workload.allocated,
        "resumable": workload.resumable,
        "priority": workload.priority,
        "spec": workload.spec,
        "attempt": workload.attempt,
        "pool": workload.pool,
        "placement": [{"node": node, "gpus": list(gpus)} for node, gpus in workload.placement],
        "submitted_at": iso(workload.submitted_at),
        "placed_at": iso(workload.placed_at),
        "started_at": iso(workload.started_at),
        "contract_ends_at": iso(contract_end),
        "preempting": workload.preempting,
        "cancel_requested": workload.cancel_requested,
    }


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


def node_view(node: NodeState) -> dict[str, Any]:
    return {
        "node": node.name,
        "cluster": node.cluster,
        "pool": node.pool,
        "gpu_type": node.gpu_type,
        "gpus": node.gpus,
        "used_gpus": len(node.assigned),
        "free_gpus": node.free,
        "state": node_state(node),
        "cordoned": node.cordoned,
        "down": node.down,
        "drained": node.drained,
        "workloads": sorted(node.holders),
        "last_heartbeat": iso(node.last_heartbeat),
    }


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


# -- the queue --------------------------------------------------------------------------------
def _order(state: LiveState, pool: str, now: float, window_s: int) -> FairShareOrder:
    return FairShareOrder(
        state.tree,
        pool,
        now,
        state.usage_in_window(pool, now),
        state.cluster.capacity(pool),
        window_s,
    )


def queue_order(state: LiveState, pool: str, now: float, window_s: int) -> list[WorkloadState]:
    """Pending work of ``pool`` in the order a scheduling pass considers it: allocated work in
    hierarchical fair-share order (each pick charging its budget ``gpus x min_runtime`` before
    the next, as the pass does for a placement), then unallocated work in the same order.
    Work of budgets without a share (closed, or unknown) comes last."""
    cluster = state.cluster
    queues = cluster.pending.get(pool, {})
    order = _order(state, pool, now, window_s)
    ordered: list[WorkloadState] = []
    for allocated in (True, False):
        per_leaf: dict[str, deque[QueueKey]] = {}
        for budget, kinds in queues.items():
            keys = sorted(key for kind, q in kinds.items() if kind[0] == allocated for key in q)
            if keys:
                per_leaf[budget] = deque(keys)
        orphans = sorted(b for b in per_leaf if b not in order.shares or order.children.get(b))
        order.activate(sorted(b for b in per_leaf if b not in orphans))
        while True:
            leaf = order.best_leaf()
            if leaf is None:
                break
            waiting = per_leaf[leaf]
            workload = cluster.workloads[waiting.popleft()[2]]
            ordered.append(workload)
            if allocated:
                order.charge(leaf, float(workload.gpus * workload.min_runtime_s))
            if not waiting:
                order.deactivate(leaf)
        for budget in orphans:
            ordered.extend(cluster.workloads[key[2]] for key in per_leaf[budget])
    return ordered


def _fit(cluster: ClusterState, pool: str, workload: WorkloadState) -> dict[str, Any]:
    """What the pool offers this gang right now."""
    nodes = [n for n in cluster.nodes.values() if n.pool == pool]
    usable = [n for n in nodes if n.schedulable]
    node_size = largest_node(cluster, pool)
    whole = needs_whole_nodes(workload.gpus, workload.gang, node_size)
    largest = max(usable, key=lambda n: (n.free, n.name), default=None)
    free_total = sum(n.free for n in usable)
    if whole:
        free_whole = sum(n.gpus for n in usable if n.free == n.gpus)
        fits = free_whole >= workload.gpus
    else:
        free_whole = None
        fits = largest is not None and largest.free >= workload.gpus
    return {
        "fits_now": fits,
        "needs_whole_nodes": whole,
        "free_gpus": free_total,
        "largest_free_node": None if largest is None else largest.name,
        "largest_free_gpus": 0 if largest is None else largest.free,
        "free_gpus_on_idle_nodes": free_whole,
        "capacity": sum(n.gpus for n in usable),
        "largest_node_gpus": node_size,
    }


def pending_reasons(
    state: LiveState,
    pool: str,
    workload: WorkloadState,
    ahead: list[WorkloadState],
    ranking: FairShareOrder,
    now: float,
) -> list[dict[str, Any]]:
    """Why ``workload`` is still pending in ``pool``, most decisive first."""
    cluster = state.cluster
    reasons: list[dict[str, Any]] = []
    ranks = ranking.ranks()
    mine = workload.budget
    if mine not in ranking.shares:
        reasons.append(
            {
                "code": "no-share",
                "message": f"{mine} has no share of {pool} (closed, or not in the tree): its "
                "work is considered last",
            }
        )
    pool_nodes = [n for n in cluster.nodes.values() if n.pool == pool]
    if not pool_nodes:
        reasons.append({"code": "no-nodes", "message": f"no node is registered in pool {pool}"})
        return reasons
    other = sorted(
        {w.budget for w in ahead if w.budget != mine},
        key=lambda b: (ranks.get(b, len(ranks) + 1), b),
    )
    if other:
        reasons.append(
            {
                "code": "fair-share",
                "message": f"{sum(1 for w in ahead if w.budget != mine)} workload(s) of "
                f"budget(s) ranking ahead of {mine} (rank {ranks.get(mine, '-')}, usage "
                f"ratio {_fmt(ranking.ratio(mine))}) come first: "
                + ", ".join(
                    f"{b} (rank {ranks.get(b, '-')}, usage ratio {_fmt(ranking.ratio(b))})"
                    for b in other
                ),
                "budget": mine,
                "budget_rank": ranks.get(mine),
                "budget_usage_ratio": _ratio(ranking.ratio(mine)),
                "budgets_ahead": [
                    {
                        "budget": b,
                        "rank": ranks.get(b),
                        "usage_ratio": _ratio(ranking.ratio(b)),
                        "workloads_ahead": sum(1 for w in ahead if w.budget == b),
                    }
                    for b in other
                ],
            }
        )
    same = [w.workload_id for w in ahead if w.budget == mine]
    if same:
        reasons.append(
            {
                "code": "budget-queue",
                "message": f"{len(same)} workload(s) of {mine} come first (higher priority or "
                "submitted earlier)",
                "workloads_ahead": same[:20],
            }
        )
    fit = _fit(cluster, pool, workload)
    shape = "on whole nodes" if fit["needs_whole_nodes"] else "on one node"
    if workload.gpus > sum(n.gpus for n in pool_nodes if not n.down):
        reasons.append(
            {
                "code": "too-large",
                "message": f"needs {workload.gpus} GPUs but {pool} has only "
                f"{sum(n.gpus for n in pool_nodes if not n.down)} GPUs on nodes that are up",
                **fit,
            }
        )
    elif not fit["needs_whole_nodes"] and workload.gpus > fit["largest_node_gpus"]:
        reasons.append(
            {
                "code": "too-large",
                "message": f"needs {workload.gpus} GPUs on one node; the largest node of "
                f"{pool} has {fit['largest_node_gpus']}",
                **fit,
            }
        )
    elif fit["fits_now"]:
        where = fit["largest_free_node"] if not fit["needs_whole_nodes"] else "idle nodes"
        reasons.append(
            {
                "code": "fits-now",
                "message": f"{workload.gpus} GPU(s) are free {shape} ({where}): the next "
                "scheduling pass should place it, unless work ahead of it takes them first",
                **fit,
            }
        )
    else:
        if fit["needs_whole_nodes"]:
            offer = f"{fit['free_gpus_on_idle_nodes']} GPU(s) are on fully idle nodes"
        else:
            offer = f"the largest free block is {fit['largest_free_gpus']} GPU(s)" + (
                f" on {fit['largest_free_node']}" if fit["largest_free_node"] else ""
            )
        reasons.append(
            {
                "code": "insufficient-capacity",
                "message": f"needs {workload.gpus} GPU(s) {shape}; {offer} "
                f"({fit['free_gpus']} free in {pool})",
                **fit,
            }
        )
        reasons.extend(_blockers(state, pool, workload, ranking, now))
    cordoned = sorted(n.name for n in pool_nodes if n.cordoned and not n.down)
    down = sorted(n.name for n in pool_nodes if n.down)
    if cordoned:
        gpus = sum(cluster.nodes[n].gpus for n in cordoned)
        reasons.append(
            {
                "code": "cordoned-nodes",
                "message": f"{len(cordoned)} node(s) of {pool} are cordoned ({gpus} GPUs take "
                f"no new work): {', '.join(cordoned)}",
                "nodes": cordoned,
                "gpus": gpus,
            }
        )
    if down:
        reasons.append(
            {
                "code": "down-nodes",
                "message": f"{len(down)} node(s) of {pool} are down: {', '.join(down)}",
                "nodes": down,
            }
        )
    return reasons


def _blockers(
    state: LiveState, pool: str, workload: WorkloadState, ranking: FairShareOrder, now: float
) -> list[dict[str, Any]]:
    """Why preemption does not free room: the contracts (min_runtime) of running work, and
    running work whose budget ranks ahead even after counting this request."""
    cluster = state.cluster
    if not workload.allocated:
        return [
            {
                "code": "unallocated",
                "message": "it runs unallocated (min_runtime 0): it never preempts, and waits "
                "for idle GPUs",
            }
        ]
    node_size = largest_node(cluster, pool)
    whole = needs_whole_nodes(workload.gpus, workload.gang, node_size)
    protected: list[tuple[float, WorkloadState]] = []
    not_started: list[WorkloadState] = []
    ahead: list[WorkloadState] = []
    extra = float(workload.gpus * workload.min_runtime_s)
    for running in cluster.active_in(pool):
        if running.preempting:
            continue
        nodes = [cluster.nodes.get(node) for node, _gpus in running.placement]
        if not any(
            n is not None and n.schedulable and (whole or n.gpus >= workload.gpus) for n in nodes
        ):
            continue  # freeing it could not make room for this gang
        if not running.allocated:
            continue  # unallocated work is always preemptible
        if running.started_at is None:
            not_started.append(running)
        elif not running.contract_over(now):
            protected.append((running.started_at + running.min_runtime_s, running))
        elif not ranking.ranks_behind(running.budget, workload.budget, extra):
            ahead.append(running)
    reasons: list[dict[str, Any]] = []
    if protected:
        protected.sort(key=lambda item: (item[0], item[1].workload_id))
        end, first = protected[0]
        reasons.append(
            {
                "code": "contract",
                "message": "preemption is blocked by a min_runtime: it waits on "
                f"{first.workload_id} ({first.budget}, {first.gpus} GPU(s), "
                f"min_runtime {first.min_runtime_s} s), "
                f"whose contract ends at {iso(end)} (in {max(0, round(end - now))} s)",
                "waits_on": first.workload_id,
                "contract_ends_at": iso(end),
                "contracts": [
                    {
                        "workload_id": w.workload_id,
                        "budget": w.budget,
                        "gpus": w.gpus,
                        "min_runtime_s": w.min_runtime_s,
                        "contract_ends_at": iso(t),
                    }
                    for t, w in protected[:10]
                ],
            }
        )
    if not_started:
        names = ", ".join(w.workload_id for w in not_started[:10])
        reasons.append(
            {
                "code": "starting",
                "message": f"placed work has not started yet (its contract starts when it "
                f"does): {names}",
                "workloads": [w.workload_id for w in not_started[:10]],
            }
        )
    if ahead:
        ranks = ranking.ranks()
        reasons.append(
            {
                "code": "ranks-ahead",
                "message": "running work past its contract belongs to budgets that rank ahead of "
                f"{workload.budget} even after counting this request, so it may not be "
                "preempted: "
                + ", ".join(
                    f"{w.workload_id} ({w.budget}, rank {ranks.get(w.budget, '-')})"
                    for w in ahead[:10]
                ),
                "workloads": [w.workload_id for w in ahead[:10]],
            }
        )
    return reasons


def _fmt(value: float) -> str:
    return "none" if value == float("inf") else f"{value:.4g}"


def pool_queue(
    state: LiveState,
    pool: str,
    now: float,
    window_s: int = DEFAULT_WINDOW_S,
    *,
    reasons: bool = True,
    only: str | None = None,
) -> dict[str, Any]:
    """``pool``'s pending work in order with position (1-based) and reasons; ``only``
    restricts the entries (not the positions) to one workload."""
    ordered = queue_order(state, pool, now, window_s)
    ranking = _order(state, pool, now, window_s)
    ranks = ranking.ranks()
    entries = []
    for position, workload in enumerate(ordered, start=1):
        if only is not None and workload.workload_id != only:
            continue
        entry = {
            "position": position,
            "workload_id": workload.workload_id,
            "budget": workload.budget,
            "submitter": workload.submitter,
            "gpus": workload.gpus,
            "gang": workload.gang,
            "min_runtime_s": workload.min_runtime_s,
            "allocated": workload.allocated,
            "priority": workload.priority,
            "submitted_at": iso(workload.submitted_at),
            "budget_rank": ranks.get(workload.budget),
            "usage_ratio": _ratio(ranking.ratio(workload.budget)),
        }
        if reasons:
            entry["reasons"] = pending_reasons(
                state, pool, workload, ordered[: position - 1], ranking, now
            )
        entries.append(entry)
    nodes = [n for n in state.cluster.nodes.values() if n.pool == pool]
    usable = [n for n in nodes if n.schedulable]
    return {
        "pool": pool,
        "capacity": state.cluster.capacity(pool),
        "free_gpus": sum(n.free for n in usable),
        "largest_free_gpus": max((n.free for n in usable), default=0),
        "cordoned_nodes": sorted(n.name for n in nodes if n.cordoned),
        "queue_length": len(ordered),
        "pending": entries,
    }


def known_pools(state: LiveState) -> list[str]:
    return sorted(set(state.cluster.pools) | set(state.cluster.pending) | set(state.usage))


# -- decision records -------------------------------------------------------------------------
def command_records(state: LiveState, workload_id: str) -> dict[str, list[dict[str, Any]]]:
    """The place and preempt commands of a workload, with their decision records."""
    from events.models import PreemptCommand

    out: dict[str, list[dict[str, Any]]] = {"placements": [], "preemptions": []}
    for record in state.commands.get(workload_id, []):
        command = record.command
        decision = command.decision
        item: dict[str, Any] = {
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
        if isinstance(command, PreemptCommand):
            preemptor = state.cluster.workloads.get(decision.preemptor or "")
            item.update(
                preemptor=decision.preemptor,
                preemptor_budget=None if preemptor is None else preemptor.budget,
                requeue=command.requeue,
                grace_period_s=command.grace_period_s,
                message=_preempt_message(decision.reason, decision.preemptor, item),
            )
            out["preemptions"].append(item)
        else:
            item["placement"] = [
                {"node": part.node, "gpus": list(part.gpus)} for part in command.placement.nodes
            ]
            out["placements"].append(item)
    return out


def _preempt_message(reason: str, preemptor: str | None, item: dict[str, Any]) -> str:
    standings = "; ".join(
        f"{b['budget']} rank {b['rank']}, usage ratio {b['usage_ratio']:.4g}"
        for b in item["budgets"]
    )
    text = {
        "preempt-for": f"preempted to make room for {preemptor}"
        + (f" ({item['preemptor_budget']})" if item.get("preemptor_budget") else ""),
        "drain": "preempted because its node is cordoned and its contract was over",
        "node-lost": "its node stopped sending heartbeats",
        "cancel": "cancelled by its submitter",
    }.get(reason, reason)
    where = f" (pass {item['pass_id']}"
    if item["input_position"]:
        where += ", decided at " + ", ".join(
            f"{p['topic']}/{p['partition']}@{p['offset']}" for p in item["input_position"]
        )
    where += ")"
    return text + (f"; budgets: {standings}" if standings else "") + where


# -- budgets ----------------------------------------------------------------------------------
def budget_report(
    state: LiveState, now: float, window_s: int = DEFAULT_WINDOW_S, pools: list[str] | None = None
) -> dict[str, Any]:
    """The tree with, per pool: share, window usage, usage ratio, rank, owed and delivered.

    * usage = delivered = allocated GPU-seconds of the subtree in the window (the latest usage
      snapshot plus running allocated work since it, :meth:`LiveState.usage_in_window`);
    * owed = for a leaf, the integral over the window of min(share x capacity, its demand)
      (DESIGN.md section 5: a budget that asked for nothing is owed nothing), from the demand
      history the live state keeps, with the shares of each moment; for an inner budget, the
      sum of its leaves' (as in the charges report: a sibling's unused entitlement is owed to
      no one);
    * ``demand_gpus`` (GPUs of the subtree's pending and running allocated work now) and
      ``entitled_gpus`` = min(share x capacity, demand now): what it is owed at this instant.
    """
    tree = state.tree
    cluster = state.cluster
    pools = known_pools(state) if pools is None else pools
    orders = {pool: _order(state, pool, now, window_s) for pool in pools}
    demand = {pool: _demand(cluster, tree, pool) for pool in pools}
    owed_in_window = {pool: _owed(state, pool, now, window_s) for pool in pools}
    budgets = []
    for path in sorted(p for p in tree.nodes if p != ROOT):
        node = tree.nodes[path]
        per_pool: dict[str, Any] = {}
        for pool in pools:
            order = orders[pool]
            capacity = cluster.capacity(pool)
            share = order.shares.get(path)
            used = order.usage.get(path, 0.0)
            owed = None if share is None else owed_in_window[pool].get(path, 0.0)
            wanted = demand[pool].get(path, 0)
            per_pool[pool] = {
                "share": share,
                "usage_gpu_s": round(used, 3),
                "usage_ratio": None if share is None else _ratio(order.ratio(path)),
                "rank": order.ranks().get(path) if node.is_leaf else None,
                "sibling_rank": _sibling_rank(order, path),
                "owed_gpu_s": None if owed is None else round(owed, 3),
                "delivered_gpu_s": round(used, 3),
                "delivered_ratio": None if not owed else round(used / owed, 6),
                "demand_gpus": wanted,
                "entitled_gpus": None if share is None else min(share * capacity, wanted),
            }
        budgets.append(
            {
                "budget": path,
                "parent": parent_of(path) or None,
                "depth": path.count("/"),
                "leaf": node.is_leaf,
                "closed": not node.open_at(now),
                "weight": node.weight_at("", now),
                "pool_weights": {p: node.weight_at(p, now) for p in sorted(node.pool_weights)},
                "members": {u: sorted(r) for u, r in sorted(node.members.items()) if r},
                "pools": per_pool,
            }
        )
    return {
        "as_of": iso(now),
        "window_s": window_s,
        "pools": [{"pool": p, "capacity": cluster.capacity(p)} for p in pools],
        "owed": "GPU-seconds over the window of min(share x capacity, demand), moment by moment, "
        "per leaf; an inner budget's is the sum of its leaves'",
        "budgets": budgets,
    }


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
