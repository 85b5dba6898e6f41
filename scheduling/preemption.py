"""Choosing victims for a pending allocated workload that does not fit (docs/design.md section 2.6).

Who may be a victim: unallocated work, always; allocated work past its ``min_runtime`` of
another budget, when the churn rules of ``churn.py`` allow it (the preemptor's budget is owed
GPUs and the victim's can give them, or it ranks far enough ahead of the victim's to catch up,
by a margin that grows with what the stop would waste). Work inside its contract is never a
victim. Debug-lane work (``debug_lane.py``) may preempt regardless of rank, but never work
inside its contract and never other lane work.

Among the placements that become valid, the cheapest wins: fewest allocated victims, then the
fewest GPU-seconds wasted (``work_at_risk.py``: progress since each victim's last checkpoint
and the restart it will pay), then fewest victims; ties prefer the most over-served victim
budget, then the youngest run, then the node name. On one node the cheapest set of victims is
exact (a small knapsack over the node's runs), so no victim the placement does not need is
ever preempted.

A :class:`VictimIndex` of the preemptible work is kept per pool while the pool's
``preemption_signature`` stays the same (no assignment changed, no further contract ended), so
each search visits only nodes that hold preemptible work. A search that failed is remembered
under the same signature, the same preemptor budget and starvation, the same set of eligible
victims, the same free GPUs it could use and the same held nodes: an equal or bigger gang
cannot succeed until one of them changes. Both are exact (they only skip work whose result is
known), so decisions are the same with or without them. They are kept, with what stopping each
run would waste, in the pool's :class:`PreemptionMemo`, one of the scheduler's memos
(``memos.py``), never in the cluster state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Generic, TypeVar

from projections.budget_tree import ROOT
from projections.cluster_state import ClusterState
from projections.cluster_types import NodeState, PlacementSpec, WorkloadState
from scheduling.churn import MAX_PREEMPTIONS, ChurnControl, preemptions_left, room
from scheduling.debug_lane import DebugLane
from scheduling.fairshare_order import FairShareOrder
from scheduling.placement import needs_whole_nodes
from scheduling.work_at_risk import wasted_if_stopped


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
    preemptions: int = 0


@dataclass(frozen=True)
class VictimRule:
    """Who may be a victim for one preemptor: the churn rule, or with ``lane`` set, the debug
    lane's (any rank, but never work that lane admits)."""

    churn: ChurnControl
    lane: DebugLane | None = None
    #: GPUs of the pool's largest node: a workload that needs a whole node or more may starve.
    node_size: int = 0

    def starving(self, preemptor: WorkloadState, now: float) -> bool:
        return self.churn.starving(preemptor, self.node_size, now)


#: (allocated victims, GPU-seconds wasted, victims, -ratio of the most over-served victim
#: budget, -start of the youngest victim, node)
Cost = tuple[int, float, int, float, float, str]


@lru_cache(maxsize=65536)
def _paths_to(budget: str) -> tuple[str, ...]:
    """``budget`` and every ancestor of it but the root, top down: ``a``, ``a/b``, ``a/b/c``."""
    parts = budget.split("/")
    return tuple("/".join(parts[: depth + 1]) for depth in range(len(parts)))


class VictimIndex:
    """Preemptible work of one pool at one instant, by node and by budget.

    Kept between passes and brought up to date from the fold's change list
    (``ClusterIndexes.victim_changes``) and the contracts that ended since, instead of being
    rebuilt from every run of the pool each pass: a pass after one event then costs what
    changed, not the size of the cluster. Its content is a function of the state and ``now``
    only (the sets, not their order, are what the searches read), so a caught-up index and a
    fresh one lead to the same decisions; ``tests/unit/test_incremental_scheduler.py`` checks
    both against each other on random histories."""

    def __init__(
        self, cluster: ClusterState, pool: str, now: float, bound: int = MAX_PREEMPTIONS
    ) -> None:
        self.pool = pool
        #: A run preempted this many times is no victim (``ChurnControl.max_preemptions``).
        self.bound = bound
        self.by_node: dict[str, list[Candidate]] = {}
        self.gpus_by_budget: dict[str, int] = {}
        #: Allocated runs past their contract per budget, by their GPU count: whether one may
        #: be taken depends on its size against its budget's limits, so a search takes a
        #: whole size at once instead of judging run by run (``eligible_victims``).
        self.ids_by_budget: dict[str, dict[int, set[str]]] = {}
        #: Per budget path and every ancestor of it, the budgets below with such runs: every
        #: budget under one sibling of a preemptor's ancestors gets one answer from the churn
        #: rules, so a search asks once per such subtree instead of once per budget. Changes
        #: only when a budget gains its first run or loses its last (``budgets_version``).
        self.budgets_under: dict[str, set[str]] = {}
        self.budgets_version = 0
        self._unshared: tuple[Mapping[str, float], int, tuple[str, ...]] | None = None
        self.tier0: set[str] = set()
        self.tier0_gpus = 0
        self.tier1_gpus = 0
        #: Every indexed run: (tier, budget, GPUs, nodes it is listed on).
        self._members: dict[str, tuple[int, str, int, tuple[str, ...]]] = {}
        for workload_id in cluster.preemptible(pool, now):
            self.refresh(cluster, workload_id, now)

    def refresh(self, cluster: ClusterState, workload_id: str, now: float) -> None:
        """Index ``workload_id`` as it stands at ``now``: in, out, or as it was."""
        self._discard(workload_id)
        workload = cluster.workloads.get(workload_id)
        if (
            workload is None
            or workload.pool != self.pool
            or workload.preempting
            or workload_id not in cluster.indexes.active.get(self.pool, ())
            or not preemptions_left(workload, self.bound)
        ):
            return
        if workload.allocated and not workload.contract_over(now):
            return  # inside its contract (or not started): never a victim
        tier = 1 if workload.allocated else 0
        started = workload.started_at if workload.started_at is not None else 0.0
        nodes: list[str] = []
        for node_name, gpus in workload.placement:
            node = cluster.nodes.get(node_name)
            if node is None or not node.schedulable:
                continue
            nodes.append(node_name)
            self.by_node.setdefault(node_name, []).append(
                Candidate(workload_id, tier, gpus, workload.budget, started, workload.preemptions)
            )
        self._members[workload_id] = (tier, workload.budget, workload.gpus, tuple(nodes))
        if tier == 0:
            self.tier0.add(workload_id)
            self.tier0_gpus += workload.gpus
        else:
            self.tier1_gpus += workload.gpus
            self.gpus_by_budget[workload.budget] = (
                self.gpus_by_budget.get(workload.budget, 0) + workload.gpus
            )
            own = self.ids_by_budget.setdefault(workload.budget, {})
            if not own:
                self.budgets_version += 1
                for path in _paths_to(workload.budget):
                    self.budgets_under.setdefault(path, set()).add(workload.budget)
            own.setdefault(workload.gpus, set()).add(workload_id)

    def _discard(self, workload_id: str) -> None:
        member = self._members.pop(workload_id, None)
        if member is None:
            return
        tier, budget, gpus, nodes = member
        for node_name in nodes:
            kept = [c for c in self.by_node.get(node_name, ()) if c.workload_id != workload_id]
            if kept:
                self.by_node[node_name] = kept
            else:
                self.by_node.pop(node_name, None)
        if tier == 0:
            self.tier0.discard(workload_id)
            self.tier0_gpus -= gpus
        else:
            own = self.ids_by_budget[budget]
            same = own[gpus]
            same.discard(workload_id)
            if not same:
                del own[gpus]
            self.gpus_by_budget[budget] -= gpus
            self.tier1_gpus -= gpus
            if not own:
                self.budgets_version += 1
                for path in _paths_to(budget):
                    self.budgets_under[path].discard(budget)

    def nodes_of(self, workload_ids: frozenset[str]) -> set[str]:
        """The nodes where any of ``workload_ids`` is listed."""
        nodes: set[str] = set()
        for workload_id in workload_ids:
            member = self._members.get(workload_id)
            if member is not None:
                nodes.update(member[3])
        return nodes

    def remove(self, cluster: ClusterState, workload_ids: tuple[str, ...]) -> None:
        """Forget victims already chosen in this pass (cheaper than rebuilding the index)."""
        for workload_id in workload_ids:
            self._discard(workload_id)

    def unshared(self, shares: Mapping[str, float]) -> tuple[str, ...]:
        """The budgets with runs past their contract that have no share now (a closed
        budget's runs): judged alone, wherever they sit in the tree. Kept while ``shares``
        (one object per version of the tree) and the budgets with such runs stay the same."""
        kept = self._unshared
        if kept is not None and kept[0] is shares and kept[1] == self.budgets_version:
            return kept[2]
        budgets = tuple(
            sorted(b for b, ids in self.ids_by_budget.items() if ids and b not in shares)
        )
        self._unshared = (shares, self.budgets_version, budgets)
        return budgets

    def content(self) -> tuple[object, ...]:
        """What the index holds, as sets (the searches read nothing else): a caught-up index
        and a fresh one of the same state at the same instant must agree on it."""
        return (
            dict(self._members),
            {node: frozenset(c.workload_id for c in found) for node, found in self.by_node.items()},
            frozenset(self.tier0),
            self.tier0_gpus,
            self.tier1_gpus,
            {budget: gpus for budget, gpus in self.gpus_by_budget.items() if gpus},
            {
                budget: {size: frozenset(ids) for size, ids in by_size.items()}
                for budget, by_size in self.ids_by_budget.items()
                if by_size
            },
            {path: frozenset(found) for path, found in self.budgets_under.items() if found},
        )


@dataclass
class KeptVictimIndex:
    """A pool's victim index between passes, and how far it has followed the state."""

    index: VictimIndex
    now: float
    node_version: int
    dropped: int
    cursor: int


#: Changes whenever the possible victims or the free GPUs of a pool may have changed
#: (``ClusterState.preemption_signature``).
Signature = tuple[int, tuple[float, str] | None]

#: A failed search: (preemptor budget, whole nodes?, starving?, free GPUs usable, eligible
#: victims, nodes held for another).
FailureKey = tuple[str, bool, bool, int, frozenset[str], frozenset[str]]

ValidityT = TypeVar("ValidityT")
EntryT = TypeVar("EntryT")
ResultT = TypeVar("ResultT")


@dataclass
class ValidWhile(Generic[ValidityT, EntryT, ResultT]):
    """Results that hold as long as one key (what they were computed under) stays the same."""

    validity: ValidityT | None = None
    results: dict[EntryT, ResultT] = field(default_factory=dict)

    def under(self, validity: ValidityT) -> dict[EntryT, ResultT]:
        """The results computed under ``validity``: none when it is not the one they were."""
        if self.validity != validity:
            self.validity, self.results = validity, {}
        return self.results


@dataclass
class PreemptionMemo:
    """What the preemption searches of one pool keep from one pass to the next (see
    ``memos.py`` for who owns it); every entry is checked against the state before use."""

    victims: KeptVictimIndex | None = None
    #: Smallest failed gang per failure key, under the pool's signature and instant: whether a
    #: search succeeds depends on the fair-share order and the wastes at that instant too (the
    #: victims' costs order the nodes, a plan must hold together by budget), so a failure
    #: from an earlier pass may not hold now, and a pass given no memos would then decide
    #: otherwise (as the decision audit found: issue 22).
    failed_searches: ValidWhile[tuple[Signature, float], FailureKey, int] = field(
        default_factory=ValidWhile
    )
    #: GPU-seconds each run would waste if stopped, under the signature and instant.
    wastes: ValidWhile[tuple[Signature, float], str, float] = field(default_factory=ValidWhile)


def victim_index(
    cluster: ClusterState,
    pool: str,
    now: float,
    memo: PreemptionMemo,
    bound: int = MAX_PREEMPTIONS,
) -> VictimIndex:
    """The pool's victim index at ``now``: the kept one caught up (the runs the fold changed
    since, and the contracts that ended since), or a fresh one when the pool's nodes changed,
    the change list was dropped, time went back or the preemption bound changed."""
    kept = memo.victims
    node_version = cluster.indexes.node_version.get(pool, 0)
    dropped = cluster.indexes.victim_changes_dropped.get(pool, 0)
    changes = cluster.indexes.victim_changes.get(pool, [])
    if (
        kept is not None
        and (kept.node_version, kept.dropped) == (node_version, dropped)
        and kept.now <= now
        and kept.cursor <= len(changes)
        and kept.index.bound == bound
    ):
        index = kept.index
        refresh = set(changes[kept.cursor :])
        # The index dates each contract's end by ``projections.contract.contract_end``, the
        # rule ``contract_over`` reads too: a run whose end has come is past its contract.
        ends = cluster.indexes.contract_ends.get(pool)
        if ends and now > kept.now:
            refresh.update(
                workload_id
                for _end, workload_id in ends.irange(
                    (kept.now, "\U0010ffff"), (now, "\U0010ffff"), inclusive=(False, True)
                )
            )
        for workload_id in sorted(refresh):
            index.refresh(cluster, workload_id, now)
        kept.now, kept.cursor = now, len(changes)
        return index
    index = VictimIndex(cluster, pool, now, bound)
    memo.victims = KeptVictimIndex(index, now, node_version, dropped, len(changes))
    return index


class Wastes:
    """GPU-seconds each run of a pool would waste if stopped at ``now``, remembered while the
    pool's signature and the instant stay the same. Taken once per search (the state does not
    change within one), not once per run: finding the signature costs a lookup in the
    pool's contract ends."""

    def __init__(self, cluster: ClusterState, pool: str, now: float, memo: PreemptionMemo) -> None:
        self.cluster, self.now = cluster, now
        self.known = memo.wastes.under((cluster.preemption_signature(pool, now), now))

    def __call__(self, workload_id: str) -> float:
        found = self.known.get(workload_id)
        if found is None:
            found = self.known[workload_id] = wasted_if_stopped(
                self.cluster.workloads[workload_id], self.now
            )
        return found


def eligible_victims(
    cluster: ClusterState,
    pool: str,
    preemptor: WorkloadState,
    order: FairShareOrder,
    victims: VictimIndex,
    rule: VictimRule,
    now: float,
    memo: PreemptionMemo,
    need: int = 0,
) -> frozenset[str]:
    """The runs of the pool that may be stopped for ``preemptor`` at ``now``; none at all when
    even every run of every budget that may give some could not free ``need`` GPUs (a cheap
    bound checked first, budget by budget, before any run is looked at)."""
    # A budget due its gang's turn carries what it was owed and not given: its request is
    # not counted against it (gang_turn.py).
    due = rule.lane is None and order.due(preemptor.budget)
    extra = 0.0 if due else float(preemptor.gpus * preemptor.min_runtime_s)
    starving = rule.lane is None and rule.starving(preemptor, now)
    ask = _Ask(cluster, pool, preemptor, order, victims, rule, now, memo, need, starving, extra)
    if rule.lane is None and preemptor.budget in order.shares:
        return _eligible_by_subtree(ask)
    return _eligible_by_budget(ask)


@dataclass(frozen=True, slots=True)
class _Ask:
    """One question to :func:`eligible_victims`: whom ``preemptor`` may take from at ``now``
    (``starving`` and ``extra``, its request's GPU-seconds as counted, worked out once)."""

    cluster: ClusterState
    pool: str
    preemptor: WorkloadState
    order: FairShareOrder
    victims: VictimIndex
    rule: VictimRule
    now: float
    memo: PreemptionMemo
    need: int
    starving: bool
    extra: float

    def limit(self, budget: str) -> tuple[float, float, float]:
        return _limit(self.order, budget, self.preemptor, self.rule, self.starving, self.extra)

    def wastes(self) -> Wastes:
        return Wastes(self.cluster, self.pool, self.now, self.memo)


def _eligible_by_subtree(ask: _Ask) -> frozenset[str]:
    """:func:`_eligible_by_budget`'s answer for a preemptor whose budget has a share, found
    subtree by subtree: every budget with a share parts from the preemptor's at a sibling of
    one of its ancestors, and all budgets under that sibling get the sibling's answer. A
    budget without a share is judged alone, and so is every budget of a subtree holding one
    (``tests/unit/test_eligible_victims.py`` holds both ways to one answer)."""
    order, victims = ask.order, ask.victims
    limits: list[tuple[dict[int, set[str]], float, float, float]] = []
    bound = victims.tier0_gpus
    for budget in victims.unshared(order.shares):
        limit = ask.limit(budget)
        if limit[0] >= 1 or limit[2] >= 0:
            limits.append((victims.ids_by_budget[budget], *limit))
            bound += victims.gpus_by_budget[budget]
    parent = ROOT
    for ancestor in _paths_to(ask.preemptor.budget):
        for sibling in order.children.get(parent, ()):
            budgets = victims.budgets_under.get(sibling)
            if sibling == ancestor or not budgets:
                continue
            limit = ask.limit(sibling)
            if limit[0] < 1 and limit[2] < 0:
                continue
            for budget in budgets:
                if budget in order.shares:  # one without was judged alone, above
                    limits.append((victims.ids_by_budget[budget], *limit))
                    bound += victims.gpus_by_budget[budget]
        parent = ancestor
    if bound < ask.need:
        return frozenset()
    eligible: set[str] = set(victims.tier0)
    waste = ask.wastes()
    for by_size, most_gpus, catch_up, allowed in limits:
        for size, ids in by_size.items():
            if size <= most_gpus or (size <= catch_up and allowed == math.inf):
                eligible |= ids  # by its size alone (entitlement, or catch-up at any waste)
            elif size <= catch_up:
                eligible.update(i for i in ids if waste(i) < allowed)
    return frozenset(eligible)


def _eligible_by_budget(ask: _Ask) -> frozenset[str]:
    """The victims budget by budget: for the debug lane, and for a preemptor whose budget has
    no share (the definition :func:`_eligible_by_subtree` is held to)."""
    order, victims, preemptor, rule = ask.order, ask.victims, ask.preemptor, ask.rule
    limits: list[tuple[dict[int, set[str]], float, float, float]] = []
    bound = victims.tier0_gpus
    # Between two budgets with shares, what the preemptor may take depends only on the two
    # subtrees where their paths part: budgets under one sibling share one answer.
    by_sides: dict[tuple[str, str], tuple[float, float, float]] = {}
    preemptor_shared = preemptor.budget in order.shares
    for budget in sorted(victims.ids_by_budget):
        ids = victims.ids_by_budget[budget]
        if not ids:
            continue
        if rule.lane is not None:
            limits.append((ids, -math.inf, -math.inf, -math.inf))
            bound += victims.gpus_by_budget[budget]
            continue
        sides = (
            order.side_of(budget, preemptor.budget)
            if preemptor_shared and budget != preemptor.budget and budget in order.shares
            else None
        )
        limit = by_sides.get(sides) if sides is not None else None
        if limit is None:
            limit = ask.limit(budget)
            if sides is not None:
                by_sides[sides] = limit
        most_gpus, catch_up, allowed = limit
        if most_gpus < 1 and allowed < 0:
            continue
        limits.append((ids, most_gpus, catch_up, allowed))
        bound += victims.gpus_by_budget[budget]
    if bound < ask.need:
        return frozenset()
    eligible: set[str] = set(victims.tier0)
    waste = ask.wastes()
    lane = rule.lane
    for by_size, most_gpus, catch_up, allowed in limits:
        for workload_id in (i for ids in by_size.values() for i in ids):
            workload = ask.cluster.workloads[workload_id]
            if lane is not None:
                if not lane.admits(workload):
                    eligible.add(workload_id)
            elif workload.gpus <= most_gpus or (
                workload.gpus <= catch_up and (allowed == math.inf or waste(workload_id) < allowed)
            ):
                eligible.add(workload_id)
    return frozenset(eligible)


def _limit(
    order: FairShareOrder,
    budget: str,
    preemptor: WorkloadState,
    rule: VictimRule,
    starving: bool,
    extra: float,
) -> tuple[float, float, float]:
    """What ``preemptor`` may take from ``budget``'s runs: up to how many GPUs a run may hold
    (entitlement rule), up to how many it may hold to be caught up with, and the most
    GPU-seconds such a stop may waste (negative: none)."""
    most = room(order, budget, preemptor.budget, preemptor.gpus, rule.churn.owed_tolerance)
    # Catch-up: any budget behind by the margin (which grows with the waste), as long as the
    # victim's keeps its entitlement, unless the preemptor is an owed starving gang.
    catch_up = math.inf if starving and most.owed else most.keep
    allowed = -1.0
    if catch_up >= 1:
        allowed = rule.churn.waste_allowed(order.slack(budget, preemptor.budget, extra))
    return most.most, catch_up if allowed >= 0 else -math.inf, allowed


def find_preemption(
    cluster: ClusterState,
    pool: str,
    preemptor: WorkloadState,
    order: FairShareOrder,
    victims: VictimIndex,
    node_size: int,
    now: float,
    rule: VictimRule,
    memo: PreemptionMemo,
    free_cap: int | None = None,
    exclude: frozenset[str] = frozenset(),
    eligible: frozenset[str] | None = None,
) -> PreemptionPlan | None:
    """The cheapest set of eligible victims whose GPUs, with at most ``free_cap`` of the
    pool's free GPUs (all when None), make a valid placement for ``preemptor`` on nodes not in
    ``exclude`` (held for another workload). ``eligible``: the victims
    :func:`eligible_victims` gives for it now, when the caller has them already."""
    index = cluster.indexes.pools[pool]
    usable_free = index.free_total if free_cap is None else min(free_cap, index.free_total)
    if usable_free + victims.tier0_gpus + victims.tier1_gpus < preemptor.gpus:
        return None  # not enough GPUs even if every preemptible run were a victim
    if eligible is None:
        need = preemptor.gpus - usable_free
        eligible = eligible_victims(cluster, pool, preemptor, order, victims, rule, now, memo, need)
    if not eligible:
        return None
    could_free = sum(cluster.workloads[i].gpus for i in eligible)
    if usable_free + could_free < preemptor.gpus:
        return None
    whole = needs_whole_nodes(preemptor.gpus, preemptor.gang, node_size)
    failures = memo.failed_searches.under((cluster.preemption_signature(pool, now), now))
    starving = rule.lane is None and rule.starving(preemptor, now)
    memo_key = (preemptor.budget, whole, starving, usable_free, eligible, exclude)
    if preemptor.gpus >= failures.get(memo_key, preemptor.gpus + 1):
        return None
    search = _Search(cluster, pool, order, victims, eligible, now, usable_free, exclude, memo)
    search.stop_cost_s = rule.churn.earlier_stop_cost_s  # what an earlier stop counts as
    plan = search.whole_nodes(preemptor.gpus) if whole else search.one_node(preemptor.gpus)
    if (
        plan is not None
        and rule.lane is None
        and not _holds_together(order, preemptor, plan, cluster, rule, now)
    ):
        plan = None
    if plan is None:
        failures[memo_key] = min(preemptor.gpus, failures.get(memo_key, preemptor.gpus))
    return plan


def _holds_together(
    order: FairShareOrder,
    preemptor: WorkloadState,
    plan: PreemptionPlan,
    cluster: ClusterState,
    rule: VictimRule,
    now: float,
) -> bool:
    """Eligibility is judged victim by victim; what the plan takes from each budget in all
    must fit that budget's room too."""
    taken: dict[str, int] = {}
    for victim_id in plan.victims:
        victim = cluster.workloads[victim_id]
        if victim.allocated:
            taken[victim.budget] = taken.get(victim.budget, 0) + victim.gpus
    starving = rule.starving(preemptor, now)
    for budget, gpus in sorted(taken.items()):
        most = room(order, budget, preemptor.budget, preemptor.gpus, rule.churn.owed_tolerance)
        if gpus > max(most.most, most.keep) and not (starving and most.owed):
            return False
    return True


class _Search:
    def __init__(
        self,
        cluster: ClusterState,
        pool: str,
        order: FairShareOrder,
        victims: VictimIndex,
        eligible: frozenset[str],
        now: float,
        usable_free: int,
        exclude: frozenset[str],
        memo: PreemptionMemo,
    ) -> None:
        self.exclude = exclude
        self.memo = memo
        self.waste = Wastes(cluster, pool, now, memo)
        self.cluster = cluster
        self.pool = pool
        self.order = order
        self.victims = victims
        self.eligible = eligible
        self.now = now
        self.usable_free = usable_free
        #: What each earlier stop of a victim counts as, in GPU-seconds per GPU.
        self.stop_cost_s = 0.0

    def _usable(self, node: NodeState) -> list[Candidate]:
        return [
            c for c in self.victims.by_node.get(node.name, ()) if c.workload_id in self.eligible
        ]

    def _item_cost(self, candidate: Candidate) -> tuple[int, float]:
        """Allocated or not, and the GPU-seconds the stop wastes plus what the run's earlier
        stops count as (``ChurnControl.earlier_stop_cost_s``): among equally cheap victims,
        the run stopped less often goes, so stops spread instead of spending one run's bound."""
        waste = self.waste(candidate.workload_id)
        spent = candidate.preemptions * self.stop_cost_s * len(candidate.gpus)
        return candidate.tier, waste + spent

    def _node_plan(
        self, node: NodeState, need: int, free: int
    ) -> tuple[Cost, tuple[str, ...], list[int]] | None:
        """The cheapest eligible victims on ``node`` that, with ``free`` of its free GPUs,
        leave ``need`` GPUs for the preemptor (an exact 0/1 knapsack: nodes are small)."""
        free_indices = node.free_indices()[:free]
        # A foreign hold over GPUs already assigned: that many more must be freed first.
        deficit = need - len(free_indices) + max(0, -node.room)
        if deficit <= 0:
            return None  # it fits without preemption: placement handles that
        # In this order, among equally cheap sets the one with the earlier runs wins.
        usable = sorted(
            self._usable(node),
            key=lambda c: (c.tier, -self.order.ratio(c.budget), -c.started, c.workload_id),
        )
        if sum(len(c.gpus) for c in usable) < deficit:
            return None
        # best[k]: cheapest (allocated victims, waste, victims) freeing k GPUs (capped).
        best: dict[int, tuple[tuple[int, float, int], tuple[int, ...]]] = {0: ((0, 0.0, 0), ())}
        for position, candidate in enumerate(usable):
            tier, waste = self._item_cost(candidate)
            size = len(candidate.gpus)
            for freed, (so_far, chosen) in list(best.items()):
                reach = min(deficit, freed + size)
                total = (so_far[0] + tier, so_far[1] + waste, so_far[2] + 1)
                held = best.get(reach)
                if held is None or total < held[0]:
                    best[reach] = (total, (*chosen, position))
        found = best.get(deficit)
        if found is None:
            return None
        (allocated, waste, count), chosen = found
        taken = [usable[i] for i in chosen]
        gained = sorted([*free_indices, *(gpu for c in taken for gpu in c.gpus)])
        cost: Cost = (
            allocated,
            waste,
            count,
            min(-self.order.ratio(c.budget) for c in taken),
            min(-c.started for c in taken),
            node.name,
        )
        return cost, tuple(sorted(c.workload_id for c in taken)), gained[:need]

    def _nodes_with_victims(self) -> list[str]:
        """Nodes where an eligible victim runs (a node without one frees nothing), found from
        whichever side is smaller: the eligible runs, or the nodes with preemptible work."""
        if len(self.eligible) < len(self.victims.by_node):
            return sorted(self.victims.nodes_of(self.eligible))
        return sorted(self.victims.by_node)

    def one_node(self, gpus: int) -> PreemptionPlan | None:
        best: tuple[Cost, tuple[str, ...], list[int]] | None = None
        for node_name in self._nodes_with_victims():
            node = self.cluster.nodes[node_name]
            if node.gpus - node.foreign < gpus or node_name in self.exclude:
                continue
            plan = self._node_plan(node, gpus, min(node.free, self.usable_free))
            if plan is not None and (best is None or plan[0] < best[0]):
                best = plan
        if best is None:
            return None
        return PreemptionPlan(((best[0][5], tuple(best[2])),), best[1])

    def whole_nodes(self, gpus: int) -> PreemptionPlan | None:
        """Every holder on a chosen node must be an eligible victim; nodes cheapest first."""
        index = self.cluster.indexes.pools[self.pool]
        options: list[tuple[Cost, int, NodeState, tuple[str, ...]]] = []
        # A node is an option when it is empty, or when eligible victims run on it (a node
        # with neither frees nothing); the options are sorted by a total order below.
        candidates = set(self._nodes_with_victims())
        for free in sorted(index.by_free):
            if free > 0:
                candidates.update(
                    name for name in index.by_free[free] if self.cluster.nodes[name].gpus == free
                )
        for node_name in sorted(candidates):
            node = self.cluster.nodes[node_name]
            if not node.schedulable or node.free > self.usable_free or node_name in self.exclude:
                continue
            if node.free == node.gpus:
                zero: Cost = (0, 0.0, 0, 0.0, 0.0, node.name)
                options.append((zero, -node.gpus, node, ()))
                continue
            # Every GPU assigned on the node must be freed: its holders must all be victims.
            plan = self._node_plan(node, node.gpus, node.free)
            if plan is not None:
                options.append((plan[0], -node.gpus, node, plan[1]))
        options.sort(key=lambda o: (o[0], o[1]))
        chosen: list[NodeState] = []
        taken: list[str] = []
        total = free_used = 0
        for _cost, _size, node, node_victims in options:
            if free_used + node.free > self.usable_free:
                continue
            chosen.append(node)
            taken.extend(v for v in node_victims if v not in taken)
            total += node.gpus
            free_used += node.free
            if total >= gpus:
                if not taken:
                    return None  # it fits without preemption: placement handles that
                parts: list[tuple[str, tuple[int, ...]]] = []
                remaining = gpus
                for part in chosen:
                    take = min(part.gpus, remaining)
                    parts.append((part.name, tuple(range(take))))
                    remaining -= take
                return PreemptionPlan(tuple(parts), tuple(taken))
        return None
