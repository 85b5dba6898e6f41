"""Choosing victims for a pending allocated workload that does not fit (docs/design.md section 2.6).

Eligible victims, in tiers: (0) unallocated work, always; (1) allocated work past its
``min_runtime`` whose budget ranks behind the preemptor's even after the preemptor's own request
is counted. Work inside its contract is never eligible. Among placements that become valid, the
one needing the fewest allocated victims, then fewest victims, wins; ties prefer the most
over-served victim budgets, then the youngest runs, then the node name.

A :class:`VictimIndex` of the preemptible work is kept per pool while the pool's
``preemption_signature`` stays the same (no assignment changed, no further contract ended), so
each search first checks in O(budgets) whether enough GPUs could be freed at all and then visits
only nodes that hold preemptible work. A search that failed is remembered under the same
signature and set of eligible budgets: an equal or bigger gang cannot succeed until one of them
changes. Both caches are exact (they only skip work whose result is known), so decisions are
the same with or without them.
"""

from __future__ import annotations

from dataclasses import dataclass

from projections.cluster_state import ClusterState, NodeState, PlacementSpec, WorkloadState
from services.scheduler.core.fairshare_order import FairShareOrder
from services.scheduler.core.placement import needs_whole_nodes


@dataclass(frozen=True)
class PreemptionPlan:
    placement: PlacementSpec
    victims: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Candidate:
    """Preemptible work on one node."""

    workload_id: str
    tier: int  # 0 unallocated, 1 allocated past its contract
    gpus: tuple[int, ...]  # its GPUs on this node
    budget: str
    started: float


Cost = tuple[int, int, float, float, str]


class VictimIndex:
    """Preemptible work of one pool at one instant, by node and by budget."""

    def __init__(self, cluster: ClusterState, pool: str, now: float) -> None:
        self.by_node: dict[str, list[Candidate]] = {}
        self.gpus_by_budget: dict[str, int] = {}
        self.tier0_gpus = 0
        self.tier1_gpus = 0
        for workload_id in cluster.preemptible(pool, now):
            workload = cluster.workloads[workload_id]
            if workload.preempting or (workload.allocated and not workload.contract_over(now)):
                continue
            tier = 1 if workload.allocated else 0
            started = workload.started_at if workload.started_at is not None else 0.0
            for node_name, gpus in workload.placement:
                node = cluster.nodes.get(node_name)
                if node is None or not node.schedulable:
                    continue
                self.by_node.setdefault(node_name, []).append(
                    Candidate(workload_id, tier, gpus, workload.budget, started)
                )
            if tier == 0:
                self.tier0_gpus += workload.gpus
            else:
                self.tier1_gpus += workload.gpus
                self.gpus_by_budget[workload.budget] = (
                    self.gpus_by_budget.get(workload.budget, 0) + workload.gpus
                )

    def remove(self, cluster: ClusterState, workload_ids: tuple[str, ...]) -> None:
        """Forget victims already chosen in this pass (cheaper than rebuilding the index)."""
        gone = set(workload_ids)
        for workload_id in workload_ids:
            workload = cluster.workloads[workload_id]
            for node_name, _gpus in workload.placement:
                kept = [c for c in self.by_node.get(node_name, ()) if c.workload_id not in gone]
                if kept:
                    self.by_node[node_name] = kept
                else:
                    self.by_node.pop(node_name, None)
            if not workload.allocated:
                self.tier0_gpus -= workload.gpus
            elif workload.budget in self.gpus_by_budget:
                self.gpus_by_budget[workload.budget] -= workload.gpus
                self.tier1_gpus -= workload.gpus


def victim_index(cluster: ClusterState, pool: str, now: float) -> VictimIndex:
    signature = cluster.preemption_signature(pool, now)
    cached = cluster.caches.get(f"victims:{pool}")
    if isinstance(cached, tuple) and cached[0] == signature:
        index: VictimIndex = cached[1]
        return index
    index = VictimIndex(cluster, pool, now)
    cluster.caches[f"victims:{pool}"] = (signature, index)
    return index


def _failures(
    cluster: ClusterState, pool: str, now: float
) -> dict[tuple[str, bool, frozenset[str]], int]:
    """Smallest failed gang per (budget, whole nodes?, eligible budgets), under the current
    signature of the pool."""
    signature = cluster.preemption_signature(pool, now)
    cached = cluster.caches.get(f"failures:{pool}")
    if isinstance(cached, tuple) and cached[0] == signature:
        failures: dict[tuple[str, bool, frozenset[str]], int] = cached[1]
        return failures
    failures = {}
    cluster.caches[f"failures:{pool}"] = (signature, failures)
    return failures


def _node_plan(
    node: NodeState,
    need: int,
    candidates: list[Candidate],
    behind: set[str],
    order: FairShareOrder,
) -> tuple[Cost, tuple[str, ...], list[int]] | None:
    """Fewest eligible victims on ``node`` that leave ``need`` GPUs free, with their cost."""
    if node.free >= need:
        return (0, 0, 0.0, 0.0, node.name), (), node.free_indices()[:need]
    usable = [c for c in candidates if c.tier == 0 or c.budget in behind]
    if node.free + sum(len(c.gpus) for c in usable) < need:
        return None
    free = node.free_indices()
    eligible = sorted(
        (c.tier, -len(c.gpus), -order.ratio(c.budget), -c.started, c.workload_id, c.gpus)
        for c in usable
    )
    taken: list[tuple[int, float, float, str, tuple[int, ...]]] = []
    count = len(free)
    for tier, _size, neg_ratio, neg_started, workload_id, gpus in eligible:
        taken.append((tier, neg_ratio, neg_started, workload_id, gpus))
        count += len(gpus)
        if count >= need:
            break
    else:
        return None
    # Drop victims a later pick made unnecessary (earliest picks first): never preempt work
    # the placement does not need.
    for victim in list(taken):
        if count - len(victim[4]) >= need:
            taken.remove(victim)
            count -= len(victim[4])
    gained = sorted([*free, *(gpu for victim in taken for gpu in victim[4])])
    cost = (
        sum(victim[0] for victim in taken),
        len(taken),
        min(victim[1] for victim in taken),
        min(victim[2] for victim in taken),
        node.name,
    )
    return cost, tuple(victim[3] for victim in taken), gained[:need]


def find_preemption(
    cluster: ClusterState,
    pool: str,
    preemptor: WorkloadState,
    order: FairShareOrder,
    victims: VictimIndex,
    node_size: int,
    now: float,
) -> PreemptionPlan | None:
    index = cluster.pools[pool]
    free_total = index.free_total
    if free_total + victims.tier0_gpus + victims.tier1_gpus < preemptor.gpus:
        return None  # not enough GPUs even if every preemptible run were a victim
    extra = float(preemptor.gpus * preemptor.min_runtime_s)
    behind = {
        budget
        for budget in victims.gpus_by_budget
        if order.ranks_behind(budget, preemptor.budget, extra)
    }
    could_free = victims.tier0_gpus + sum(victims.gpus_by_budget[b] for b in behind)
    if could_free == 0 or free_total + could_free < preemptor.gpus:
        return None
    whole = needs_whole_nodes(preemptor.gpus, preemptor.gang, node_size)
    failures = _failures(cluster, pool, now)
    memo_key = (preemptor.budget, whole, frozenset(behind))
    if preemptor.gpus >= failures.get(memo_key, preemptor.gpus + 1):
        return None
    plan = _search(cluster, pool, preemptor, order, victims, behind, whole)
    if plan is None:
        failures[memo_key] = min(preemptor.gpus, failures.get(memo_key, preemptor.gpus))
    return plan


def _search(
    cluster: ClusterState,
    pool: str,
    preemptor: WorkloadState,
    order: FairShareOrder,
    victims: VictimIndex,
    behind: set[str],
    whole: bool,
) -> PreemptionPlan | None:
    index = cluster.pools[pool]
    if not whole:
        best: tuple[Cost, tuple[str, ...], list[int]] | None = None
        for node_name, candidates in victims.by_node.items():
            node = cluster.nodes[node_name]
            if node.gpus < preemptor.gpus:
                continue
            plan = _node_plan(node, preemptor.gpus, candidates, behind, order)
            if plan is not None and plan[1] and (best is None or plan[0] < best[0]):
                best = plan
        if best is None:
            return None
        return PreemptionPlan(((best[0][4], tuple(best[2])),), best[1])
    # Whole nodes: every holder on a chosen node must be an eligible victim.
    options: list[tuple[Cost, int, NodeState, tuple[str, ...]]] = []
    for free in sorted(index.by_free):
        for node_name in index.by_free[free]:
            node = cluster.nodes[node_name]
            plan = _node_plan(node, node.gpus, victims.by_node.get(node_name, []), behind, order)
            if plan is not None:
                options.append((plan[0], -node.gpus, node, plan[1]))
    options.sort(key=lambda o: (o[0], o[1]))
    chosen: list[NodeState] = []
    taken: list[str] = []
    total = 0
    for _cost, _size, node, node_victims in options:
        chosen.append(node)
        taken.extend(v for v in node_victims if v not in taken)
        total += node.gpus
        if total >= preemptor.gpus:
            if not taken:
                return None  # it fits without preemption: placement handles that
            parts: list[tuple[str, tuple[int, ...]]] = []
            remaining = preemptor.gpus
            for part in chosen:
                take = min(part.gpus, remaining)
                parts.append((part.name, tuple(range(take))))
                remaining -= take
            return PreemptionPlan(tuple(parts), tuple(taken))
    return None
