"""One scheduling pass: from state and a time to decisions, each with its reasons.

Pure and deterministic: no I/O, no clock (``now`` is an argument), iteration in sorted orders
only. The pass folds each decision into the state it was given as soon as it makes it, exactly
as replaying the decision from the log would (the fold ignores the replayed duplicate), so the
next pick already sees the GPUs taken and the budget charged. It returns the decisions for the
caller to publish (the service) or to act out (the simulator). Decisions are built with
``events.trusted`` (no re-validation of values the core computed from validated state); the
tests decode every emitted decision through the strict serde.

Order of work in a pass:
1. maintenance: work on down nodes is lost (and requeued if resumable); preempted/lost
   resumable work is requeued keeping its submit time; cancellations of running work become
   preempt commands; work on cordoned nodes is preempted once past its contract (the drain; the
   baselines, like Slurm, only wait for it to end); a cordoned node with nothing left on it is
   drained;
2. per pool, the debug lane first (``debug_lane.py``: small, short work placed at once, or by
   preempting work past its contract regardless of rank); then allocated work in fair-share
   order (budgets holding less than their entitlement first), placing, or preempting under
   the churn rules of ``churn.py``; a gang that is owed GPUs but finds no room holds the nodes
   that will be free for it soonest (``reservation.py``); then unallocated work in the same
   order into what is left (never preempting). Neither may take the free GPUs the lane's
   reserve holds, nor place on held nodes.

Time alone changes what a pass may do when a contract ends (:func:`next_contract_expiry`), when
a debug job's patience runs out and when a gang starts to starve (``PassResult.wake_at``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from events.models import (
    BudgetStanding,
    DecisionRecord,
    EventData,
    InputPosition,
    NodeDrained,
    NodeGpus,
    PlaceCommand,
    Placement,
    PreemptCommand,
    WorkloadLost,
    WorkloadPlaced,
    WorkloadRequeued,
)
from events.models.commands import ReasonCode
from events.times import DEFAULT_WINDOW_S
from events.times import utc_from_epoch as _utc
from events.trusted import trusted
from projections.budget_tree import BudgetTree
from projections.cluster_state import (
    ClusterState,
    PlacementSpec,
    QueueKey,
    QueueKind,
    WorkloadState,
)
from services.scheduler.core.churn import ChurnControl, needs_a_node
from services.scheduler.core.debug_lane import DebugLanes, LaneState, lane_state
from services.scheduler.core.fairshare_order import FairShareOrder, held_by_leaf
from services.scheduler.core.placement import find_placement, largest_node, needs_whole_nodes
from services.scheduler.core.preemption import (
    VictimIndex,
    VictimRule,
    eligible_victims,
    find_preemption,
    victim_index,
)
from services.scheduler.core.reservation import nodes_to_hold

#: Usage of each leaf budget in a pool, in GPU-seconds within the window, at the pass time.
UsageSource = Callable[[str], Mapping[str, float]]


@dataclass(frozen=True)
class PassContext:
    now: float
    pass_id: int = 0
    input_position: tuple[InputPosition, ...] = ()
    window_s: int = DEFAULT_WINDOW_S
    grace_period_s: int = 30
    #: Bound on preemption searches per pool and pass (each scans the pool's nodes).
    max_preemption_searches: int = 16
    preemption: bool = True
    #: The leader's lease epoch, stamped on every command as its fencing token.
    epoch: int = 0
    #: When a run past its contract is worth stopping (churn.py).
    churn: ChurnControl = field(default_factory=ChurnControl)
    #: Which work starts fast, per pool (debug_lane.py).
    debug_lanes: DebugLanes = field(default_factory=DebugLanes)
    #: The pools this pass decides for (None: every pool). With a lease per pool
    #: (services/scheduler/lease.py) a scheduler leads some pools only: the pass then touches
    #: nothing of another pool (see :meth:`PassContext.schedules`).
    pools: frozenset[str] | None = None
    #: The epoch of each led pool's own lease, stamped on that pool's commands (a pool not
    #: named here gets ``epoch``).
    pool_epochs: Mapping[str, int] | None = None

    def leads(self, pool: str | None) -> bool:
        """Whether this pass decides for ``pool``: maintenance of its nodes and runs (down,
        cordoned, requeues, cancellations; a run belongs to the pool it runs or ran in)."""
        return self.pools is None or pool in self.pools

    def schedules(self, workload: WorkloadState) -> bool:
        """Whether this pass may place pending ``workload``: with a lease per pool, only the
        leader of the *first* pool it lists does, in whichever of its pools that leader leads.
        Two leaders of different pools thus never race to place one workload (each would
        fold its own placement, and the log keeps one of them only)."""
        return self.pools is None or workload.pools[0] in self.pools

    def epoch_for(self, pool: str) -> int:
        if self.pool_epochs is None:
            return self.epoch
        return self.pool_epochs.get(pool, self.epoch)


@dataclass
class PassResult:
    #: Facts the scheduler states (placed, requeued, lost, drained), in decision order.
    events: list[EventData] = field(default_factory=list)
    #: Commands for cluster agents (place, preempt), in decision order.
    commands: list[EventData] = field(default_factory=list)
    #: Both, interleaved in the order they were decided (what is published, in that order).
    ordered: list[EventData] = field(default_factory=list)
    #: The earliest later time at which the passage of time alone lets a pass decide more than
    #: this one did, other than a contract's end (see :func:`next_contract_expiry`): a debug
    #: job's patience running out, a gang starting to starve. None when there is none.
    wake_at: float | None = None

    def wake(self, at: float) -> None:
        if self.wake_at is None or at < self.wake_at:
            self.wake_at = at

    def all(self) -> list[EventData]:
        return list(self.ordered)


def command_id(kind: str, workload: WorkloadState) -> str:
    """Deterministic and readable: one place and at most one preempt per workload attempt."""
    return f"{kind}:{workload.workload_id}:{workload.attempt}"


class PassRecorder:
    def __init__(
        self, cluster: ClusterState, tree: BudgetTree, usage: UsageSource, ctx: PassContext
    ) -> None:
        self.cluster = cluster
        self.tree = tree
        self.usage = usage
        self.ctx = ctx
        self.result = PassResult()

    # -- emitting ----------------------------------------------------------------------------
    def emit(self, data: EventData, command: bool = False) -> None:
        self.cluster.apply(data, self.ctx.now)
        (self.result.commands if command else self.result.events).append(data)
        self.result.ordered.append(data)

    def decision(
        self,
        reason: ReasonCode,
        order: FairShareOrder | None,
        budgets: tuple[str, ...],
        preemptor: str | None = None,
        detail: str = "",
    ) -> DecisionRecord:
        standings = []
        if order is not None:
            ranks = order.ranks()
            for budget in budgets:
                ratio = order.ratio(budget)
                standings.append(
                    trusted(
                        BudgetStanding,
                        budget=budget,
                        rank=ranks.get(budget, len(ranks) + 1),
                        share=min(1.0, max(0.0, order.shares.get(budget, 0.0))),
                        usage_gpu_s=int(order.usage.get(budget, 0.0)),
                        usage_ratio=ratio if ratio != float("inf") else 1e18,
                    )
                )
        return trusted(
            DecisionRecord,
            pass_id=self.ctx.pass_id,
            input_position=self.ctx.input_position,
            reason=reason,
            budgets=tuple(standings),
            preemptor=preemptor,
            detail=detail,
        )

    def preempt(
        self,
        workload: WorkloadState,
        reason: ReasonCode,
        decision: DecisionRecord,
        requeue: bool,
    ) -> None:
        cluster_name = self.cluster.nodes[workload.placement[0][0]].cluster
        pool = workload.pool or workload.pools[0]
        self.emit(
            trusted(
                PreemptCommand,
                command_id=command_id("preempt", workload),
                epoch=self.ctx.epoch_for(pool),
                cluster=cluster_name,
                pool=pool,
                workload_id=workload.workload_id,
                attempt=workload.attempt,
                grace_period_s=self.ctx.grace_period_s,
                requeue=requeue,
                decision=decision,
            ),
            command=True,
        )

    def place(
        self,
        workload: WorkloadState,
        pool: str,
        placement: PlacementSpec,
        decision: DecisionRecord,
    ) -> None:
        place_id = command_id("place", workload)
        shape = trusted(
            Placement, nodes=tuple(trusted(NodeGpus, node=n, gpus=g) for n, g in placement)
        )
        attempt = workload.attempt
        self.emit(
            trusted(
                PlaceCommand,
                command_id=place_id,
                epoch=self.ctx.epoch_for(pool),
                cluster=self.cluster.nodes[placement[0][0]].cluster,
                pool=pool,
                workload_id=workload.workload_id,
                attempt=attempt,
                budget=workload.budget,
                placement=shape,
                allocated=workload.allocated,
                min_runtime_s=workload.min_runtime_s,
                spec=workload.spec,
                decision=decision,
            ),
            command=True,
        )
        self.emit(
            trusted(
                WorkloadPlaced,
                workload_id=workload.workload_id,
                attempt=attempt,
                pool=pool,
                placement=shape,
                allocated=workload.allocated,
                command_id=place_id,
            )
        )

    # -- 1. maintenance ----------------------------------------------------------------------
    def maintenance(self, drain: bool = True) -> None:
        """``drain`` False leaves work on cordoned nodes to end by itself (Slurm's drain)."""
        cluster, now, leads = self.cluster, self.ctx.now, self.ctx.leads
        for name in sorted(cluster.down_nodes):
            node = cluster.nodes[name]
            if not leads(node.pool):
                continue
            for workload_id in sorted(node.holders):
                workload = cluster.workloads[workload_id]
                last = max(
                    filter(None, (workload.last_heartbeat, node.last_heartbeat)),
                    default=workload.started_at or workload.placed_at or now,
                )
                last = min(last, now)
                self.emit(
                    WorkloadLost(
                        workload_id=workload_id,
                        attempt=workload.attempt,
                        node=name,
                        last_heartbeat=_utc(last),
                    )
                )
        for workload_id in sorted(cluster.awaiting_requeue):
            workload = cluster.workloads[workload_id]
            if not leads(workload.pool or workload.pools[0]):
                continue
            self.emit(
                WorkloadRequeued(
                    workload_id=workload_id,
                    attempt=workload.attempt,
                    original_submit_time=_utc(workload.submitted_at),
                    reason="lost" if workload.status == "lost" else "preempted",
                )
            )
        for workload_id in sorted(cluster.cancelling):
            workload = cluster.workloads[workload_id]
            if not workload.preempting and leads(workload.pool or workload.pools[0]):
                self.preempt(
                    workload,
                    "cancel",
                    self.decision("cancel", None, (), detail="cancelled by its submitter"),
                    requeue=False,
                )
        for name in sorted(cluster.cordoned_nodes):
            node = cluster.nodes[name]
            if node.down or not leads(node.pool):
                continue
            for workload_id in sorted(node.holders) if drain else ():
                workload = cluster.workloads[workload_id]
                if not workload.preempting and workload.contract_over(now):
                    detail = f"node {name} is cordoned and the contract of {workload_id} is over"
                    self.preempt(
                        workload,
                        "drain",
                        self.decision("drain", None, (), detail=detail),
                        requeue=workload.resumable,
                    )
            if not node.holders and not node.drained:
                self.emit(NodeDrained(node=name))

    # -- 2. placement in fair-share order ------------------------------------------------------
    def schedule_pool(self, pool: str) -> None:
        cluster = self.cluster
        queues = cluster.pending.get(pool, {})
        capacity = cluster.capacity(pool)
        if not queues or capacity <= 0:
            return
        node_size = largest_node(cluster, pool)
        self.node_size = node_size
        order = FairShareOrder(
            self.tree,
            pool,
            self.ctx.now,
            self.usage(pool),
            capacity,
            self.ctx.window_s,
            held_by_leaf(cluster, pool),
        )
        searches = [self.ctx.max_preemption_searches if self.ctx.preemption else 0]
        self.victims: VictimIndex | None = None
        #: Nodes held in this pass for a gang that is owed GPUs (reservation.py).
        self.held_nodes: frozenset[str] = frozenset()
        lane = lane_state(cluster, self.ctx.debug_lanes, pool, self.ctx.now)
        in_use = self._lane_phase(pool, order, lane, node_size, searches)
        keep = lane.withheld(in_use)
        for allocated in (True, False):
            self._phase(pool, order, queues, allocated, node_size, searches, keep)

    def _lane_phase(
        self,
        pool: str,
        order: FairShareOrder,
        lane: LaneState,
        node_size: int,
        searches: list[int],
    ) -> int:
        """Lane work first, in fair-share order (each pick charged before the next, as in the
        other phases), while the lane holds fewer GPUs than its bound; returns the GPUs lane
        work holds afterwards."""
        in_use = lane.in_use
        by_leaf: dict[str, list[WorkloadState]] = {}
        for workload_id in lane.pending:
            workload = self.cluster.workloads[workload_id]
            if (
                workload.budget in order.shares
                and not order.children.get(workload.budget)
                and self.ctx.schedules(workload)
            ):
                by_leaf.setdefault(workload.budget, []).append(workload)
        if not by_leaf:
            return in_use
        for waiting in by_leaf.values():
            waiting.sort(key=WorkloadState.queue_key, reverse=True)  # next one last
        order.activate(by_leaf)
        active = set(by_leaf)
        failed: set[tuple[str, int, str]] = set()
        while (leaf := order.best_leaf()) is not None:
            if not by_leaf[leaf]:
                order.deactivate(leaf)
                active.discard(leaf)
                continue
            workload = by_leaf[leaf].pop()
            shape = (workload.budget, workload.gpus, workload.gang)
            if in_use + workload.gpus > lane.max_in_use or shape in failed:
                continue
            if self._lane_start(workload, pool, order, lane, node_size, searches):
                order.charge(leaf, float(workload.gpus * workload.min_runtime_s))
                order.hold(leaf, workload.gpus)
                in_use += workload.gpus
            elif self.ctx.now - workload.submitted_at >= lane.lane.patience_s:
                failed.add(shape)
        for leaf in sorted(active):
            order.deactivate(leaf)
        return in_use

    def _lane_start(
        self,
        workload: WorkloadState,
        pool: str,
        order: FairShareOrder,
        lane: LaneState,
        node_size: int,
        searches: list[int],
    ) -> bool:
        """Place lane work on any free GPU, or once its patience is spent, preempt for it."""
        cluster, now = self.cluster, self.ctx.now
        placement = None
        if workload.gpus <= cluster.pools[pool].max_free() or workload.gang == "whole-nodes":
            placement = find_placement(cluster, pool, workload.gpus, workload.gang, node_size)
        if placement is not None:
            detail = "debug lane: small, short work starts first"
            decision = self.decision("fairshare", order, (workload.budget,), detail=detail)
            self.place(workload, pool, placement, decision)
            return True
        if now - workload.submitted_at < lane.lane.patience_s:
            # GPUs come free often in a busy pool: wait a little before stopping a run.
            self.result.wake(workload.submitted_at + lane.lane.patience_s)
            return False
        if searches[0] <= 0:
            return False
        searches[0] -= 1
        if self.victims is None:
            self.victims = victim_index(cluster, pool, now)
        rule = VictimRule(self.ctx.churn, lane=lane.lane, node_size=node_size)
        plan = find_preemption(cluster, pool, workload, order, self.victims, node_size, now, rule)
        if plan is None:
            return False
        self.victims.remove(cluster, plan.victims)
        self._preempt_for(workload, pool, plan.placement, plan.victims, order, lane=True)
        return True

    def _phase(
        self,
        pool: str,
        order: FairShareOrder,
        queues: Mapping[str, Mapping[QueueKind, SortedList[QueueKey]]],
        allocated: bool,
        node_size: int,
        searches: list[int],
        keep: int = 0,
    ) -> None:
        """``keep``: free GPUs this phase must leave free (the debug lane's reserve)."""
        cluster, now = self.cluster, self.ctx.now
        index = cluster.pools[pool]
        # Per leaf, the kinds of work (GPUs, gang shape) still worth trying in this phase.
        sizes: dict[str, list[QueueKind]] = {}
        for budget, kinds in queues.items():
            live = sorted(kind for kind, q in kinds.items() if kind[0] == allocated and q)
            if live and budget in order.shares:
                sizes[budget] = live
        order.activate(sizes)
        # Per (leaf, whole nodes?, starving?): the smallest gang and request that found no
        # victims in this pass. A bigger one cannot do better (churn.py), unless it starves.
        failed_searches: dict[tuple[str, bool, bool], tuple[int, float]] = {}
        while True:
            if (index.max_free() == 0 or index.free_total <= keep) and (
                not allocated or searches[0] <= 0
            ):
                return  # nothing fits, and nothing more may be preempted in this pass
            leaf = order.best_leaf()
            if leaf is None:
                return
            candidate: tuple[QueueKey, QueueKind] | None = None
            for kind in sizes[leaf]:
                queue = queues[leaf].get(kind)
                if queue:
                    head = queue[0] if self.ctx.pools is None else self._first_scheduled(queue)
                    if head is not None and (candidate is None or head < candidate[0]):
                        candidate = (head, kind)
            if candidate is None:
                order.deactivate(leaf)
                continue
            (_prio, _submitted, workload_id), kind = candidate
            g = kind[1]
            workload = cluster.workloads[workload_id]
            placement = None
            if index.free_total - g >= keep and (
                g <= index.max_free() or g > node_size or workload.gang == "whole-nodes"
            ):
                placement = find_placement(
                    cluster, pool, g, workload.gang, node_size, self.held_nodes
                )
            if placement is not None:
                reason: ReasonCode = "fairshare" if allocated else "burst"
                self.place(workload, pool, placement, self.decision(reason, order, (leaf,)))
                if workload.status == "pending":
                    raise AssertionError(f"{workload_id} was placed but is still pending")
                if allocated:
                    order.charge(leaf, float(g * workload.min_runtime_s))
                    order.hold(leaf, g)
                    # More held can make another budget's runs victims: forget failures.
                    failed_searches.clear()
                continue
            extra = float(g * workload.min_runtime_s)
            whole = needs_whole_nodes(g, workload.gang, node_size)
            big = needs_a_node(workload, node_size)
            starving = self.ctx.churn.starving(workload, node_size, now)
            failed = failed_searches.get((leaf, whole, starving))
            hopeless = failed is not None and g >= failed[0] and extra >= failed[1]
            owed = allocated and self.ctx.churn.owed(order, leaf)
            eligible: frozenset[str] | None = None
            if allocated and searches[0] > 0 and not hopeless:
                searches[0] -= 1
                free_cap = max(0, index.free_total - keep) if keep else None
                usable = index.free_total if free_cap is None else free_cap
                eligible = self._eligible(workload, pool, order, g - usable)
                assert self.victims is not None
                plan = find_preemption(
                    cluster,
                    pool,
                    workload,
                    order,
                    self.victims,
                    node_size,
                    now,
                    VictimRule(self.ctx.churn, node_size=self.node_size),
                    free_cap,
                    self.held_nodes,
                    eligible,
                )
                if plan is not None:
                    self.victims.remove(cluster, plan.victims)
                    self._preempt_for(workload, pool, plan.placement, plan.victims, order)
                    order.charge(leaf, extra)
                    order.hold(leaf, g)
                    failed_searches.clear()  # the pool changed
                    continue
                # A bigger gang with a bigger request cannot succeed where this one failed.
                failed_searches[(leaf, whole, starving)] = (g, extra)
            if owed and big and not starving and self.ctx.preemption:
                # It may preempt more once it starves: ask for a pass then.
                self.result.wake(workload.submitted_at + self.ctx.churn.starving_after_s)
            if owed and not self.held_nodes and big:
                if eligible is None or not eligible:
                    eligible = self._eligible(workload, pool, order)
                self.held_nodes = nodes_to_hold(
                    cluster,
                    pool,
                    workload,
                    eligible,
                    node_size,
                    self.held_nodes,
                    now,
                    self.ctx.churn.hold_horizon_s,
                    self.victims,
                )
            # Nothing of this kind fits or can be freed for this budget in this pass.
            sizes[leaf].remove(kind)

    def _first_scheduled(self, queue: SortedList[QueueKey]) -> QueueKey | None:
        """The first entry of ``queue`` this pass may place (``PassContext.schedules``)."""
        for key in queue:
            if self.ctx.schedules(self.cluster.workloads[key[2]]):
                return key
        return None

    def _eligible(
        self, workload: WorkloadState, pool: str, order: FairShareOrder, need: int = 0
    ) -> frozenset[str]:
        """The runs ``workload`` may preempt now (preemption.eligible_victims), or none when
        they could not free ``need`` GPUs whichever they were."""
        cluster, now = self.cluster, self.ctx.now
        if self.victims is None:
            self.victims = victim_index(cluster, pool, now)
        rule = VictimRule(self.ctx.churn, node_size=self.node_size)
        return eligible_victims(cluster, pool, workload, order, self.victims, rule, now, need)

    def _preempt_for(
        self,
        preemptor: WorkloadState,
        pool: str,
        placement: PlacementSpec,
        victims: tuple[str, ...],
        order: FairShareOrder,
        lane: bool = False,
    ) -> None:
        cluster = self.cluster
        why = (
            "debug lane, whatever the ranks"
            if lane
            else "ranks ahead by the churn margin after counting its request"
        )
        for victim_id in victims:
            victim = cluster.workloads[victim_id]
            tier = "unallocated" if not victim.allocated else "past its contract"
            detail = (
                f"{victim_id} ({victim.budget}, {tier}) makes room for {preemptor.workload_id} "
                f"({preemptor.budget}, {why})"
            )
            decision = self.decision(
                "preempt-for",
                order,
                (preemptor.budget, victim.budget),
                preemptor=preemptor.workload_id,
                detail=detail,
            )
            self.preempt(victim, "preempt-for", decision, requeue=victim.resumable)
            if victim.allocated:
                order.hold(victim.budget, -victim.gpus)
        detail = f"placed on GPUs freed by preempting {', '.join(victims)}"
        self.place(
            preemptor,
            pool,
            placement,
            self.decision("fairshare", order, (preemptor.budget,), detail=detail),
        )


def run_pass(
    cluster: ClusterState, tree: BudgetTree, usage: UsageSource, ctx: PassContext
) -> PassResult:
    """Decide everything that can be decided at ``ctx.now``; fold it into ``cluster``."""
    scheduling = PassRecorder(cluster, tree, usage, ctx)
    scheduling.maintenance()
    for pool in sorted(cluster.pools):
        if ctx.leads(pool):
            scheduling.schedule_pool(pool)
    return scheduling.result


def next_contract_expiry(cluster: ClusterState, now: float) -> float | None:
    """When time alone next changes what a pass may do: the earliest contract to end among
    running allocated work (victims become eligible; cordoned nodes can drain). Read from the
    state's sorted contract ends (a placed run gets its entry when it starts, a fact that
    triggers a pass anyway)."""
    best: float | None = None
    for ends in cluster.contract_ends.values():
        position = ends.bisect_right((now, "\U0010ffff"))
        if position < len(ends):
            expiry = ends[position][0]
            if best is None or expiry < best:
                best = expiry
    return best
