"""One scheduling pass: from state and a time to decisions, each with its reasons.

Pure and deterministic: no I/O, no clock (``now`` is an argument), iteration in sorted orders
only. The pass folds each decision into the state it was given as soon as it makes it, exactly
as replaying the decision from the log would (the fold ignores the replayed duplicate), so the
next pick already sees the GPUs taken and the budget charged. It returns the decisions for the
caller to publish (the service) or to act out (the simulator). Decisions are built with
``events.prevalidated`` (no re-validation of values the core computed from validated state); the
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

:class:`SchedulingPass` is what the pass of every policy shares (the state, each decision folded
in and recorded as it is made, step 1); :class:`FairSharePass` adds step 2. What passes keep
from one to the next (victim indexes, failed searches, the lane's index) is no part of the
state: the caller owns it and hands it in (``memos.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

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
from events.prevalidated import prevalidated
from events.times import DEFAULT_WINDOW_S, fold_instant
from events.times import utc_from_epoch as _utc
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import PlacementSpec, QueueKey, QueueKind, WorkloadState
from projections.usage_snapshots import RankedUsage
from scheduling.churn import ChurnControl, needs_a_node, preemptions_left
from scheduling.debug_lane import DebugLanes, LaneState, lane_state
from scheduling.fairshare_order import FairShareOrder, held_by_leaf
from scheduling.gang_turn import waiting_by_leaf
from scheduling.memos import PassMemos
from scheduling.placement import find_placement, largest_node, needs_whole_nodes
from scheduling.preemption import (
    PreemptionMemo,
    PreemptionPlan,
    VictimIndex,
    VictimRule,
    eligible_victims,
    find_preemption,
    victim_index,
)
from scheduling.reservation import nodes_to_hold
from scheduling.time_limits import TimeLimits, limit_s

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
    #: How long runs may last, per pool (time_limits.py): stated on each place command.
    time_limits: TimeLimits = field(default_factory=TimeLimits)
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


#: The source every scheduler's outputs carry (its envelopes'), whichever instance leads: how
#: a reader of the log tells a pass's decisions from the facts it decided on.
SOURCE = "fairshare/scheduler"


def command_id(kind: str, workload: WorkloadState) -> str:
    """Deterministic and readable: one place and at most one preempt per workload attempt."""
    return f"{kind}:{workload.workload_id}:{workload.attempt}"


class _ReadOncePerPass:
    """A pool's usage as the pass first read it: the pass ranks on one figure per pool
    whoever asks and whenever, as the live scheduler's source gives it (``LiveState``'s is
    read once per pass), so a source that would recompute it from a state the pass is
    changing (the simulator's) ranks alike."""

    def __init__(self, source: UsageSource) -> None:
        self._source = source
        self._read: dict[str, Mapping[str, float]] = {}

    def __call__(self, pool: str) -> Mapping[str, float]:
        read = self._read.get(pool)
        if read is None:
            read = self._read[pool] = self._source(pool)
        return read


class SchedulingPass:
    """One pass in progress, as every policy runs it (the fair-share pass and the baselines):
    the state it decides from, each decision folded into that state the moment it is made and
    kept in ``result`` in decision order, and the maintenance every policy starts with."""

    def __init__(
        self, cluster: ClusterState, tree: BudgetTree, usage: UsageSource, ctx: PassContext
    ) -> None:
        self.cluster = cluster
        self.tree = tree
        self.usage: UsageSource = _ReadOncePerPass(usage)
        self.ctx = ctx
        self.result = PassResult()

    # -- emitting ----------------------------------------------------------------------------
    def emit(self, data: EventData, command: bool = False) -> None:
        # Folded at the time any reader of the log folds it (a whole second), so the state the
        # pass leaves is the log's fold of what it decided: a standby taking over, or an
        # audit, rebuilds the very state the leader went on from.
        self.cluster.apply(data, fold_instant(self.ctx.now))
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
                    prevalidated(
                        BudgetStanding,
                        budget=budget,
                        rank=ranks.get(budget, len(ranks) + 1),
                        share=min(1.0, max(0.0, order.shares.get(budget, 0.0))),
                        usage_gpu_s=int(order.usage.get(budget, 0.0)),
                        usage_ratio=ratio if ratio != float("inf") else 1e18,
                    )
                )
        return prevalidated(
            DecisionRecord,
            pass_id=self.ctx.pass_id,
            input_position=self.ctx.input_position,
            reason=reason,
            budgets=tuple(standings),
            preemptor=preemptor,
            detail=detail,
            usage_as_of=None if order is None else self.usage_as_of(order.pool),
        )

    def usage_as_of(self, pool: str) -> datetime | None:
        """The end of the usage snapshot ``pool``'s ranks start from, where the usage source
        says (``RankedUsage``; a bare mapping, as tests and baselines may give: None)."""
        ranked = self.usage(pool)
        return ranked.as_of if isinstance(ranked, RankedUsage) else None

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
            prevalidated(
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
        shape = prevalidated(
            Placement, nodes=tuple(prevalidated(NodeGpus, node=n, gpus=g) for n, g in placement)
        )
        attempt = workload.attempt
        self.emit(
            prevalidated(
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
                time_limit_s=limit_s(workload, pool, self.ctx.time_limits),
            ),
            command=True,
        )
        self.emit(
            prevalidated(
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
        self._lose_work_on_down_nodes()
        self._requeue_stopped_work()
        self._stop_cancelled_work()
        self._drain_cordoned_nodes(drain)

    def _lose_work_on_down_nodes(self) -> None:
        cluster, now = self.cluster, self.ctx.now
        for name in sorted(cluster.indexes.down_nodes):
            node = cluster.nodes[name]
            if not self.ctx.leads(node.pool):
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

    def _requeue_stopped_work(self) -> None:
        cluster = self.cluster
        for workload_id in sorted(cluster.indexes.awaiting_requeue):
            workload = cluster.workloads[workload_id]
            if not self.ctx.leads(workload.pool or workload.pools[0]):
                continue
            self.emit(
                WorkloadRequeued(
                    workload_id=workload_id,
                    attempt=workload.attempt,
                    original_submit_time=_utc(workload.submitted_at),
                    reason="lost" if workload.status == "lost" else "preempted",
                )
            )

    def _stop_cancelled_work(self) -> None:
        cluster = self.cluster
        for workload_id in sorted(cluster.indexes.cancelling):
            workload = cluster.workloads[workload_id]
            if not workload.preempting and self.ctx.leads(workload.pool or workload.pools[0]):
                self.preempt(
                    workload,
                    "cancel",
                    self.decision("cancel", None, (), detail="cancelled by its submitter"),
                    requeue=False,
                )

    def _drain_cordoned_nodes(self, drain: bool) -> None:
        cluster, now = self.cluster, self.ctx.now
        for name in sorted(cluster.indexes.cordoned_nodes):
            node = cluster.nodes[name]
            if node.down or not self.ctx.leads(node.pool):
                continue
            for workload_id in sorted(node.holders) if drain else ():
                workload = cluster.workloads[workload_id]
                if (
                    not workload.preempting
                    and workload.contract_over(now)
                    and preemptions_left(workload, self.ctx.churn.drain_bound)
                ):
                    detail = f"node {name} is cordoned and the contract of {workload_id} is over"
                    self.preempt(
                        workload,
                        "drain",
                        self.decision("drain", None, (), detail=detail),
                        requeue=workload.resumable,
                    )
            if not node.holders and not node.drained:
                self.emit(NodeDrained(node=name))


@dataclass
class _PoolTurn:
    """One pool's turn in a fair-share pass: what every phase of it shares and spends."""

    pool: str
    order: FairShareOrder
    #: GPUs of the pool's largest node.
    node_size: int
    #: Preemption searches the pass may still make in the pool (each scans the pool's nodes).
    searches_left: int
    memo: PreemptionMemo
    #: The pool's victim index, from the first time a phase needs it.
    victims: VictimIndex | None = None
    #: Nodes held in this pass for a gang that is owed GPUs (reservation.py), and when the
    #: last of them is ready: work whose time limit ends by then may backfill them.
    held_nodes: frozenset[str] = frozenset()
    held_from: float = 0.0

    def spend_search(self) -> bool:
        """Whether one more preemption search may run (and count it)."""
        if self.searches_left <= 0:
            return False
        self.searches_left -= 1
        return True


#: Pending work of a pool: per budget, per kind, in queue order (``ClusterIndexes.pending``).
PoolQueues = Mapping[str, Mapping[QueueKind, SortedList[QueueKey]]]

#: A failed search's class: (leaf, whole nodes?, starving?).
SearchClass = tuple[str, bool, bool]


@dataclass
class _Phase:
    """One phase of a pool's turn: allocated or unallocated work, in fair-share order."""

    allocated: bool
    queues: PoolQueues
    #: Free GPUs this phase must leave free (the debug lane's reserve).
    keep: int
    #: Per leaf, the kinds of work (allocated, GPUs, gang shape) still worth trying.
    kinds: dict[str, list[QueueKind]]
    #: Per search class, the smallest gang and request that found no victims in this phase.
    #: A bigger one cannot do better (churn.py), unless it starves.
    failed_searches: dict[SearchClass, tuple[int, float]] = field(default_factory=dict)

    def hopeless(self, search: SearchClass, gpus: int, request: float) -> bool:
        failed = self.failed_searches.get(search)
        return failed is not None and gpus >= failed[0] and request >= failed[1]


@dataclass(frozen=True)
class _SearchOutcome:
    """What one preemption search for a workload came to."""

    preempted: bool
    #: The runs the workload may preempt, when the search looked at them.
    eligible: frozenset[str] | None


class FairSharePass(SchedulingPass):
    """The fair-share policy's pass: after maintenance, each led pool in turn, the debug lane
    first, then allocated work, then unallocated work, in fair-share order (module docstring).
    ``memos``: what the passes before it over the same state kept (``memos.py``)."""

    def __init__(
        self,
        cluster: ClusterState,
        tree: BudgetTree,
        usage: UsageSource,
        ctx: PassContext,
        memos: PassMemos,
    ) -> None:
        super().__init__(cluster, tree, usage, ctx)
        self.memos = memos

    # -- 2. placement in fair-share order ------------------------------------------------------
    def schedule_pool(self, pool: str) -> None:
        cluster, ctx = self.cluster, self.ctx
        queues = cluster.indexes.pending.get(pool, {})
        capacity = cluster.capacity(pool)
        if not queues or capacity <= 0:
            return
        order = FairShareOrder(
            self.tree,
            pool,
            ctx.now,
            self.usage(pool),
            capacity,
            ctx.window_s,
            held_by_leaf(cluster, pool),
            waiting_by_leaf(cluster, pool) if ctx.churn.gang_turn else None,
        )
        turn = _PoolTurn(
            pool=pool,
            order=order,
            node_size=largest_node(cluster, pool),
            searches_left=ctx.max_preemption_searches if ctx.preemption else 0,
            memo=self.memos.of_pool(pool),
        )
        lane = lane_state(cluster, ctx.debug_lanes, pool, ctx.now, self.memos.lane)
        in_use = self._lane_phase(turn, lane)
        keep = lane.withheld(in_use)
        for allocated in (True, False):
            self._phase(turn, queues, allocated, keep)

    def _victims(self, turn: _PoolTurn) -> VictimIndex:
        """The pool's victim index, caught up (or built) the first time the turn needs it."""
        if turn.victims is None:
            turn.victims = victim_index(
                self.cluster, turn.pool, self.ctx.now, turn.memo, self.ctx.churn.max_preemptions
            )
        return turn.victims

    # -- 2a. the debug lane ------------------------------------------------------------------
    def _lane_phase(self, turn: _PoolTurn, lane: LaneState) -> int:
        """Lane work first, in fair-share order (each pick charged before the next, as in the
        other phases), while the lane holds fewer GPUs than its bound; returns the GPUs lane
        work holds afterwards."""
        order = turn.order
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
            if self._lane_start(turn, workload, lane):
                order.charge(leaf, float(workload.gpus * workload.min_runtime_s))
                order.hold(leaf, workload.gpus)
                in_use += workload.gpus
            elif self.ctx.now - workload.submitted_at >= lane.lane.patience_s:
                failed.add(shape)
        for leaf in sorted(active):
            order.deactivate(leaf)
        return in_use

    def _lane_start(self, turn: _PoolTurn, workload: WorkloadState, lane: LaneState) -> bool:
        """Place lane work on any free GPU, or once its patience is spent, preempt for it."""
        cluster, now, pool = self.cluster, self.ctx.now, turn.pool
        placement = None
        if (
            workload.gpus <= cluster.indexes.pools[pool].max_free()
            or workload.gang == "whole-nodes"
        ):
            placement = find_placement(cluster, pool, workload.gpus, workload.gang, turn.node_size)
        if placement is not None:
            detail = "debug lane: small, short work starts first"
            decision = self.decision("fairshare", turn.order, (workload.budget,), detail=detail)
            self.place(workload, pool, placement, decision)
            return True
        if now - workload.submitted_at < lane.lane.patience_s:
            # GPUs come free often in a busy pool: wait a little before stopping a run.
            self.result.wake(workload.submitted_at + lane.lane.patience_s)
            return False
        if not turn.spend_search():
            return False
        victims = self._victims(turn)
        rule = VictimRule(self.ctx.churn, lane=lane.lane, node_size=turn.node_size)
        plan = find_preemption(
            cluster, pool, workload, turn.order, victims, turn.node_size, now, rule, turn.memo
        )
        if plan is None:
            return False
        victims.remove(cluster, plan.victims)
        self._preempt_for(turn, workload, plan, lane=True)
        return True

    # -- 2b. allocated, then unallocated work --------------------------------------------------
    def _phase(self, turn: _PoolTurn, queues: PoolQueues, allocated: bool, keep: int) -> None:
        """Pick the best leaf's next workload until nothing more fits or may be preempted for:
        place it, or preempt for it, or give up on its kind for this phase."""
        kinds = _kinds_to_try(self.cluster, turn.pool, allocated, turn.order)
        phase = _Phase(allocated, queues, keep, kinds)
        turn.order.activate(phase.kinds)
        while not self._phase_exhausted(turn, phase):
            leaf = turn.order.best_leaf()
            if leaf is None:
                return
            candidate = self._next_of(phase, leaf)
            if candidate is None:
                turn.order.deactivate(leaf)
                continue
            (*_order, workload_id), kind = candidate
            workload = self.cluster.workloads[workload_id]
            if self._place_in_phase(turn, phase, leaf, workload, kind[1]):
                continue
            if not self._no_room_for(turn, phase, leaf, workload, kind[1]):
                # Nothing of this kind fits or can be freed for this budget in this pass.
                phase.kinds[leaf].remove(kind)

    def _phase_exhausted(self, turn: _PoolTurn, phase: _Phase) -> bool:
        """Nothing fits any more, and nothing more may be preempted in this pass."""
        index = self.cluster.indexes.pools[turn.pool]
        no_room = index.max_free() == 0 or index.free_total <= phase.keep
        return no_room and (not phase.allocated or turn.searches_left <= 0)

    def _next_of(self, phase: _Phase, leaf: str) -> tuple[QueueKey, QueueKind] | None:
        """The leaf's next workload in queue order among the kinds still worth trying."""
        candidate: tuple[QueueKey, QueueKind] | None = None
        for kind in phase.kinds[leaf]:
            queue = phase.queues[leaf].get(kind)
            if queue:
                head = queue[0] if self.ctx.pools is None else self._first_scheduled(queue)
                if head is not None and (candidate is None or head < candidate[0]):
                    candidate = (head, kind)
        return candidate

    def _first_scheduled(self, queue: SortedList[QueueKey]) -> QueueKey | None:
        """The first entry of ``queue`` this pass may place (``PassContext.schedules``)."""
        for key in queue:
            if self.ctx.schedules(self.cluster.workloads[key[3]]):
                return key
        return None

    def _place_in_phase(
        self, turn: _PoolTurn, phase: _Phase, leaf: str, workload: WorkloadState, gpus: int
    ) -> bool:
        """Place ``workload`` on free GPUs, leaving the lane's reserve free, if it fits."""
        cluster, pool = self.cluster, turn.pool
        index = cluster.indexes.pools[pool]
        placement = None
        if index.free_total - gpus >= phase.keep and (
            gpus <= index.max_free() or gpus > turn.node_size or workload.gang == "whole-nodes"
        ):
            placement = find_placement(
                cluster, pool, gpus, workload.gang, turn.node_size, turn.held_nodes
            )
            if placement is None and self._backfills(turn, workload, pool):
                placement = find_placement(cluster, pool, gpus, workload.gang, turn.node_size)
        if placement is None:
            return False
        reason: ReasonCode = "fairshare" if phase.allocated else "burst"
        self.place(workload, pool, placement, self.decision(reason, turn.order, (leaf,)))
        if workload.status == "pending":
            raise AssertionError(f"{workload.workload_id} was placed but is still pending")
        if phase.allocated:
            turn.order.charge(leaf, float(gpus * workload.min_runtime_s))
            turn.order.hold(leaf, gpus)
            # More held can make another budget's runs victims: forget failures.
            phase.failed_searches.clear()
        return True

    def _backfills(self, turn: _PoolTurn, workload: WorkloadState, pool: str) -> bool:
        """Whether ``workload`` may run on the nodes held for a gang: its time limit ends
        before the hold starts, so it is gone (stopped at its limit, if need be) in time."""
        if not turn.held_nodes:
            return False
        return self.ctx.now + limit_s(workload, pool, self.ctx.time_limits) <= turn.held_from

    def _no_room_for(
        self, turn: _PoolTurn, phase: _Phase, leaf: str, workload: WorkloadState, gpus: int
    ) -> bool:
        """``workload`` does not fit: preempt for it if it may (True when it did); otherwise
        ask for a pass when it starts to starve, and hold nodes for it if it is owed them."""
        churn, node_size = self.ctx.churn, turn.node_size
        whole = needs_whole_nodes(gpus, workload.gang, node_size)
        big = needs_a_node(workload, node_size)
        starving = churn.starving(workload, node_size, self.ctx.now)
        owed = phase.allocated and (churn.owed(turn.order, leaf) or turn.order.due(leaf))
        if phase.allocated and not owed and self.ctx.preemption:
            # Waiting longer makes a budget due its gang's turn: ask for a pass then.
            due_at = turn.order.due_at(leaf)
            if due_at is not None:
                self.result.wake(due_at)
        eligible: frozenset[str] | None = None
        if phase.allocated:
            search = self._search_victims(
                turn, phase, leaf, workload, gpus, (leaf, whole, starving)
            )
            if search.preempted:
                return True
            eligible = search.eligible
        if owed and big and not starving and self.ctx.preemption:
            # It may preempt more once it starves: ask for a pass then.
            self.result.wake(workload.submitted_at + churn.starving_after_s)
        if owed and not turn.held_nodes and big:
            if eligible is None or not eligible:
                eligible = self._eligible(turn, workload)
            turn.held_nodes, turn.held_from = nodes_to_hold(
                self.cluster,
                turn.pool,
                workload,
                eligible,
                node_size,
                turn.held_nodes,
                self.ctx.now,
                churn.hold_horizon_for(starving and turn.order.due(leaf)),
                turn.victims,
                self.ctx.time_limits,
                churn.limit_hold_horizon_s,
            )
        return False

    def _search_victims(
        self,
        turn: _PoolTurn,
        phase: _Phase,
        leaf: str,
        workload: WorkloadState,
        gpus: int,
        search: SearchClass,
    ) -> _SearchOutcome:
        """Preempt the cheapest victims that make room for ``workload``, unless the search
        budget is spent or a smaller request of its class already found none."""
        request = float(gpus * workload.min_runtime_s)
        if phase.hopeless(search, gpus, request) or not turn.spend_search():
            return _SearchOutcome(preempted=False, eligible=None)
        index = self.cluster.indexes.pools[turn.pool]
        free_cap = max(0, index.free_total - phase.keep) if phase.keep else None
        usable = index.free_total if free_cap is None else free_cap
        eligible = self._eligible(turn, workload, gpus - usable)
        plan = find_preemption(
            self.cluster,
            turn.pool,
            workload,
            turn.order,
            self._victims(turn),
            turn.node_size,
            self.ctx.now,
            VictimRule(self.ctx.churn, node_size=turn.node_size),
            turn.memo,
            free_cap,
            turn.held_nodes,
            eligible,
        )
        if plan is None:
            # A bigger gang with a bigger request cannot succeed where this one failed.
            phase.failed_searches[search] = (gpus, request)
            return _SearchOutcome(preempted=False, eligible=eligible)
        self._victims(turn).remove(self.cluster, plan.victims)
        self._preempt_for(turn, workload, plan)
        turn.order.charge(leaf, request)
        turn.order.hold(leaf, gpus)
        phase.failed_searches.clear()  # the pool changed
        return _SearchOutcome(preempted=True, eligible=eligible)

    def _eligible(self, turn: _PoolTurn, workload: WorkloadState, need: int = 0) -> frozenset[str]:
        """The runs ``workload`` may preempt now (preemption.eligible_victims), or none when
        they could not free ``need`` GPUs whichever they were."""
        rule = VictimRule(self.ctx.churn, node_size=turn.node_size)
        return eligible_victims(
            self.cluster,
            turn.pool,
            workload,
            turn.order,
            self._victims(turn),
            rule,
            self.ctx.now,
            turn.memo,
            need,
        )

    def _preempt_for(
        self,
        turn: _PoolTurn,
        preemptor: WorkloadState,
        plan: PreemptionPlan,
        lane: bool = False,
    ) -> None:
        cluster, order = self.cluster, turn.order
        why = (
            "debug lane, whatever the ranks"
            if lane
            else "ranks ahead by the churn margin after counting its request"
        )
        for victim_id in plan.victims:
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
        detail = f"placed on GPUs freed by preempting {', '.join(plan.victims)}"
        self.place(
            preemptor,
            turn.pool,
            plan.placement,
            self.decision("fairshare", order, (preemptor.budget,), detail=detail),
        )


def _kinds_to_try(
    cluster: ClusterState, pool: str, allocated: bool, order: FairShareOrder
) -> dict[str, list[QueueKind]]:
    """Per leaf with a share, the kinds of the phase's work that have someone waiting (read
    from the fold's summaries of the queues, ``ClusterIndexes.heads``)."""
    kinds: dict[str, list[QueueKind]] = {}
    shares = order.shares
    for budget, heads in cluster.indexes.heads.get(pool, {}).items():
        if budget in shares:
            live = [kind for kind in heads.kinds if kind[0] == allocated]
            if live:
                kinds[budget] = live
    return kinds


def run_pass(
    cluster: ClusterState,
    tree: BudgetTree,
    usage: UsageSource,
    ctx: PassContext,
    memos: PassMemos | None = None,
) -> PassResult:
    """Decide everything that can be decided at ``ctx.now``; fold it into ``cluster``.
    ``memos``: the caller's, kept from its earlier passes over ``cluster`` (none: this pass
    starts cold, with the same decisions; see ``memos.py``)."""
    memos = PassMemos() if memos is None else memos
    fair_share = FairSharePass(cluster, tree, usage, ctx, memos.serving(cluster))
    fair_share.maintenance()
    for pool in sorted(cluster.indexes.pools):
        if ctx.leads(pool):
            fair_share.schedule_pool(pool)
    return fair_share.result


def next_contract_expiry(cluster: ClusterState, now: float) -> float | None:
    """When time alone next changes what a pass may do: the earliest contract to end among
    running allocated work (victims become eligible; cordoned nodes can drain). Read from the
    state's sorted contract ends (a placed run gets its entry when it starts, a fact that
    triggers a pass anyway)."""
    best: float | None = None
    for ends in cluster.indexes.contract_ends.values():
        position = ends.bisect_right((now, "\U0010ffff"))
        if position < len(ends):
            expiry = ends[position][0]
            if best is None or expiry < best:
                best = expiry
    return best
