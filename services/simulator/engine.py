"""The discrete-event engine: jumps from event to event, runs a scheduling pass after each
batch, and acts out the decisions the way a cluster agent would.

The scheduler's state is built by the same folds the live system uses (``ClusterState``,
``BudgetTree``, ``UsageWindow``); the simulator only plays the agent's and the world's part: a
placed workload starts when its GPUs are physically free and runs for its traced duration; a
preempted one stops after the grace period and keeps only the progress it had checkpointed,
paying a restart when it runs again (``preemption_cost.py``); and, in the maintenance scenario,
nodes are cordoned for repair, taken down once empty (or when stuck) and brought back
(``maintenance.py``); and, when given, the world's facts happen at their times: cancels, weight
changes, nodes lost under their work (``world.py``). Everything is a function of the trace, the
configuration and those facts: no clock, no unseeded randomness.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import JsonValue

from events.models import (
    BudgetCreated,
    EventData,
    GpuHeartbeat,
    GpuReading,
    NodeCordoned,
    NodeDown,
    NodeRegistered,
    NodeUncordoned,
    NodeUp,
    PlaceCommand,
    Placement,
    PreemptCommand,
    UsageSnapshot,
    WorkloadFinished,
    WorkloadLost,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.times import DEFAULT_WINDOW_S, HOUR, as_logged, fold_instant
from projections.budget_tree import BudgetTree
from projections.cluster_state import ClusterState
from projections.cluster_types import WorkloadState
from projections.contract import contract_end, inside_contract
from projections.figures import wanted
from projections.ledger import Ledger
from projections.steps import Steps
from projections.usage_snapshots import count_charge, usage_snapshots, usage_to_rank
from projections.usage_window import UsageWindow, bucket_of
from scheduling.churn import ChurnControl
from scheduling.debug_lane import DebugLanes
from scheduling.memos import PassMemos
from scheduling.scheduling_pass import PassContext, PassResult, UsageSource
from scheduling.settings import settings_of
from scheduling.time_limits import TimeLimits, limit_s
from services.runtime.gc_pause import gc_paused
from services.simulator.estimates import StartEstimates
from services.simulator.limits import SIMULATED_LIMITS, TimeLimitRule
from services.simulator.maintenance import Drain, MaintenanceConfig, repair_requests
from services.simulator.preemption_cost import (
    CHECKPOINT_EVERY_KEY,
    RESTART_OVERHEAD_KEY,
    Interruption,
    PreemptionCost,
    at_risk,
)
from services.simulator.topology import GangBlocks, TopologyConfig
from services.simulator.trace import ContractRule, TraceJob
from services.simulator.world import LateLossConfig, World, WorldFact

POOL = "sim"
CLUSTER = "sim"

# Event kinds, in the order they are handled when they fall on the same instant: ends first
# (they free GPUs), then repaired nodes, starts, arrivals, repair requests, then timers, then
# the world's facts (world.py) and lost nodes coming back.
FINISH, PREEMPT_DONE, REPAIRED, START, ARRIVAL, CORDON, DRAIN_CAP, WAKE, TICK = range(9)
WORLD, NODE_BACK = 9, 10

Policy = Callable[[ClusterState, BudgetTree, UsageSource, PassContext, PassMemos], PassResult]


@dataclass(frozen=True)
class SimulationConfig:
    gpus: int
    gpus_per_node: int = 8
    contract: ContractRule = field(default_factory=ContractRule)
    grace_period_s: int = 30
    window_s: int = DEFAULT_WINDOW_S
    max_preemption_searches: int = 16
    #: Stop at the last arrival (the evaluation period); work still running is cut there.
    stop_at_last_arrival: bool = True
    cost: PreemptionCost = field(default_factory=PreemptionCost)
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)
    #: Runs an agent reports lost, dated before a heartbeat that named them (world.py).
    late_losses: LateLossConfig = field(default_factory=LateLossConfig)
    #: The policy's churn control and debug lanes (the core's defaults unless set).
    churn: ChurnControl = field(default_factory=ChurnControl)
    debug_lanes: DebugLanes = field(default_factory=DebugLanes)
    #: Blocks and racks of the nodes (topology.py; none by default).
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    #: The limit each traced job asks for (limits.py), and the simulated pool's limits.
    time_limit_rule: TimeLimitRule = field(default_factory=TimeLimitRule)
    time_limits: TimeLimits = SIMULATED_LIMITS

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1 or self.gpus < self.gpus_per_node:
            raise ValueError("--gpus must be at least --gpus-per-node (and both positive)")
        if self.gpus % self.gpus_per_node:
            raise ValueError("--gpus must be a multiple of --gpus-per-node")


@dataclass
class Run:
    """The agent's view of one workload."""

    job: TraceJob
    remaining: float
    min_runtime_s: int
    debug: bool
    first_start: float | None = None
    run_start: float | None = None
    last_posted: float = 0.0
    #: Restart seconds the current run pays before it progresses.
    overhead: float = 0.0
    #: Seconds (per GPU) of progress thrown away by stops, and of restarts paid, so far.
    discarded_s: float = 0.0
    restart_s: float = 0.0
    #: Seconds (per GPU) held in runs that have ended, and when the job was done.
    busy_s: float = 0.0
    finished_at: float | None = None
    #: When its submitter cancelled it (a world fact), if it did.
    cancelled_at: float | None = None
    #: Whether the current run ends at its time limit before it is done (the job ends there,
    #: failed, as its agent stops it), and whether the job did end so.
    ends_at_limit: bool = False
    time_limited: bool = False


@dataclass
class PreemptionRecord:
    time: float
    workload_id: str
    budget: str
    reason: str
    #: When the stopped attempt started, as the fold dates it (None: it had not started).
    started_at: float | None
    min_runtime_s: int
    allocated: bool

    @property
    def violates_contract(self) -> bool:
        """An allocated run stopped inside its contract, by the one rule
        (``projections/contract.py``) at the whole second the log dates the stop: the contract
        counts from the start as the log dates it, which the policy protects; the engine's own
        clock is finer, and measured from it a stop at the contract's last second would read
        as a violation by a fraction of a second. A run stopped before it started counts too
        (the policy never stops one there)."""
        if not self.allocated:
            return False
        if self.started_at is None:
            return True
        return inside_contract(self.started_at, self.min_runtime_s, fold_instant(self.time))


def hourly(steps: Steps, start: float, end: float) -> dict[int, float]:
    """Level x seconds per hour bucket of ``[start, end)`` (where it is not zero)."""
    out: dict[int, float] = {}
    for bucket in range(bucket_of(start), bucket_of(end) + 1):
        amount = steps.integral(max(start, bucket * HOUR), min(end, (bucket + 1) * HOUR))
        if amount:
            out[bucket] = amount
    return out


@dataclass
class SimulationOutcome:
    """Everything the metrics need, recorded while the simulation ran."""

    start: float
    end: float
    capacity_gpus: int
    shares: dict[str, float]
    usage: UsageWindow
    #: GPU-seconds wanted per budget per hour (from ``demand_steps``).
    demand: dict[str, dict[int, float]]
    runs: dict[str, Run]
    preemptions: list[PreemptionRecord]
    passes: int
    wall_seconds: float
    interruptions: list[Interruption]
    drains: list[Drain]
    #: Repair requests for a node already out of service (merged into that repair).
    repairs_merged: int
    config: SimulationConfig
    #: GPUs wanted per budget over time (:func:`projections.figures.wanted`), and GPUs in
    #: capacity: what :func:`projections.figures.pool_figures` computes owed from.
    demand_steps: dict[str, Steps] = field(default_factory=dict)
    capacity_steps: Steps = field(default_factory=Steps)
    #: The budget tree the shares were computed from (weights over time).
    tree: BudgetTree = field(default_factory=BudgetTree)
    #: The world's facts, and which of them were stated or skipped.
    world: World = field(default_factory=World)
    #: The blocks each gang over several nodes spanned (topology.py), with a topology.
    gang_blocks: GangBlocks | None = None
    #: Start estimates made at submission (estimates.py), when asked for.
    start_estimates: StartEstimates | None = None


class Simulation:
    def __init__(
        self,
        jobs: list[TraceJob],
        weights: dict[str, float],
        config: SimulationConfig,
        policy: Policy,
        progress: Callable[[float], None] | None = None,
        recorder: Callable[[EventData, float], None] | None = None,
        world: Sequence[WorldFact] = (),
        start_estimates: StartEstimates | None = None,
    ) -> None:
        if not jobs:
            raise ValueError("the trace has no jobs")
        unknown = sorted({j.budget for j in jobs} - set(weights))
        if unknown:
            raise ValueError(f"budgets in the trace but not in the budgets file: {unknown}")
        self.jobs = jobs
        self.config = config
        #: Estimates of when sampled jobs will start, made as they arrive (estimates.py).
        self.start_estimates = start_estimates
        self.policy = policy
        self.progress = progress
        self.start = jobs[0].arrival
        self.end = jobs[-1].arrival
        # Every fact and decision is folded as the live system folds it: the ledger posts the
        # charges a live charging service would (hourly heartbeats confirm occupancy) and
        # their usage snapshots are what the policy ranks on, exactly as the live scheduler
        # does. With a recorder they are also written out as the run's event log, so a
        # simulated run can be audited like a real one: nothing a pass reads is missing.
        self.recorder = recorder
        self.ledger = Ledger()
        #: The charged usage a live charging service would publish snapshots of.
        self.charged = UsageWindow(config.window_s)
        #: The latest of those snapshots per pool: what every pass ranks on.
        self.snapshots: dict[str, UsageSnapshot] = {}
        self.now = self.start - 1
        self.tree = BudgetTree()
        for budget in sorted(weights):
            created = BudgetCreated(budget=budget, weight=weights[budget], created_by="simulator")
            self.tree.apply(created, fold_instant(self.now))
            self.record(created)
        self.cluster = ClusterState()
        self.demand_steps: dict[str, Steps] = {b: Steps() for b in weights}
        self.capacity_steps = Steps()
        #: What the policy's passes over ``cluster`` keep between them (memos.py).
        self.memos = PassMemos()
        for i in range(config.gpus // config.gpus_per_node):
            block, rack = config.topology.place(i)
            self.apply(
                NodeRegistered(
                    node=f"node-{i:04d}",
                    cluster=CLUSTER,
                    pool=POOL,
                    gpus=config.gpus_per_node,
                    gpu_type="sim",
                    block=block,
                    rack=rack,
                )
            )
        self.gang_blocks = GangBlocks(POOL) if config.topology.enabled else None
        # The policy's tuning, stated before the first pass as a leader states it: an audit of
        # the log re-runs every pass with it (not with its own defaults).
        self.record(settings_of(self.context(self.now, 0)))
        #: Cancels, weight changes and node losses at given times (world.py).
        late = self.config.late_losses.facts(sorted(self.cluster.nodes), self.start, self.end)
        self.world = World((*world, *late))
        self.world.check((j.job_id for j in jobs), weights, self.cluster.nodes)
        self.usage = UsageWindow(config.window_s)
        self.runs: dict[str, Run] = {}
        self.placements: dict[str, Placement] = {}
        self.preemptions: list[PreemptionRecord] = []
        self.heap: list[tuple[float, int, int, str, int]] = []
        self.seq = 0
        self.now = self.start
        self.passes = 0
        self.preempt_commands: dict[str, str] = {}
        self.interruptions: list[Interruption] = []
        #: Nodes out of service for repair (cordoned, then down), and every drain in order.
        self.in_repair: dict[str, Drain] = {}
        self.drains: list[Drain] = []
        self.repairs_merged = 0
        #: Times the policy asked to be woken at (a pass runs then).
        self.wakes: set[float] = set()

    # -- plumbing ------------------------------------------------------------------------
    def context(self, now: float, pass_id: int) -> PassContext:
        """What a pass at ``now`` decides with (the configuration's tuning)."""
        return PassContext(
            now=now,
            pass_id=pass_id,
            window_s=self.config.window_s,
            grace_period_s=self.config.grace_period_s,
            max_preemption_searches=self.config.max_preemption_searches,
            churn=self.config.churn,
            debug_lanes=self.config.debug_lanes,
            time_limits=self.config.time_limits,
        )

    def push(self, at: float, kind: int, workload_id: str = "", attempt: int = 0) -> None:
        # Every instant is one the log can state: the audit re-runs a pass at its commands'
        # logged time, so the simulator's passes run at exactly that time too.
        self.seq += 1
        heapq.heappush(self.heap, (as_logged(at), kind, self.seq, workload_id, attempt))

    def apply(self, data: EventData) -> None:
        """Fold a fact in, and follow what it changes of demand (the one rule,
        :func:`projections.figures.wanted`) and of capacity."""
        workload_id = getattr(data, "workload_id", None)
        workload = self.cluster.workloads.get(workload_id) if isinstance(workload_id, str) else None
        before = wanted(self.cluster, workload).get(POOL, 0)
        capacity = self.cluster.capacity(POOL)
        self.cluster.apply(data, fold_instant(self.now))  # as a reader of the log folds it
        if isinstance(workload_id, str):
            workload = self.cluster.workloads.get(workload_id)
            after = wanted(self.cluster, workload).get(POOL, 0)
            if workload is not None and after != before:
                self.demand_steps[workload.budget].change(self.now, after - before)
        if self.cluster.capacity(POOL) != capacity:
            self.capacity_steps.change(self.now, self.cluster.capacity(POOL) - capacity)
        self.record(data)

    def record(self, data: EventData) -> None:
        if self.recorder is not None:
            self.recorder(data, self.now)
        for charge in self.ledger.apply(data, self.now):
            if self.recorder is not None:
                self.recorder(charge, self.now)
            count_charge(self.charged, charge)

    def heartbeats(self) -> None:
        """One heartbeat per node naming each GPU's occupant, folded in as every reader of the
        log folds it: lost work is dated at its last heartbeat (the pass reads it)."""
        for name in sorted(self.cluster.nodes):
            node = self.cluster.nodes[name]
            occupant: dict[int, tuple[str, int]] = {}
            for workload_id, gpus in node.holders.items():
                workload = self.cluster.workloads[workload_id]
                if workload.status == "running":
                    for gpu in gpus:
                        occupant[gpu] = (workload_id, workload.attempt)
            self.apply(
                GpuHeartbeat(
                    node=name,
                    cluster=node.cluster,
                    sequence=int(self.now),
                    gpus=tuple(
                        GpuReading(
                            index=gpu,
                            occupant=occupant[gpu][0] if gpu in occupant else None,
                            attempt=occupant[gpu][1] if gpu in occupant else None,
                            utilisation_pct=100.0 if gpu in occupant else 0.0,
                            memory_used_bytes=0,
                        )
                        for gpu in range(node.gpus)
                    ),
                )
            )

    def _post(self, workload: WorkloadState, run: Run, until: float) -> None:
        """Post occupancy since the last posting into the usage window (as heartbeats would)."""
        if until > run.last_posted:
            self.usage.add_interval(
                POOL, workload.budget, workload.gpus, run.last_posted, until, workload.allocated
            )
        run.last_posted = until

    def _close(self, workload: WorkloadState, run: Run) -> None:
        self._post(workload, run, self.now)
        run.run_start = None

    def usage_source(self, pool: str) -> dict[str, float]:
        """What the live scheduler ranks on, from the same facts (``usage_to_rank``)."""
        return usage_to_rank(self.snapshots.get(pool), self.cluster, pool, self.now)

    # -- event handlers ------------------------------------------------------------------
    def on_arrival(self, job: TraceJob) -> None:
        rule = self.config.contract
        run = Run(job, job.duration, rule.min_runtime_s(job), rule.is_debug(job))
        self.runs[job.job_id] = run
        spec: dict[str, JsonValue] = {"duration_s": job.duration}
        cost = self.config.cost
        if cost.enabled:
            # Declared by the job, as a real one would declare how it checkpoints: lets a
            # policy weigh what a preemption would throw away (preemption_cost.at_risk).
            spec[CHECKPOINT_EVERY_KEY] = cost.checkpoint_every_s
            spec[RESTART_OVERHEAD_KEY] = cost.restart_overhead_s
        self.apply(
            WorkloadSubmitted.model_construct(
                workload_id=job.job_id,
                budget=job.budget,
                pools=(POOL,),
                gpus=job.gpus,
                gang="single-node" if job.gpus <= self.config.gpus_per_node else "whole-nodes",
                min_runtime_s=run.min_runtime_s,
                resumable=job.resumable,
                priority=rule.priority(job),
                submitter="trace",
                spec=spec,
                time_limit_s=self.config.time_limit_rule.limit_s(job),
            )
        )

    def on_start(self, workload_id: str, attempt: int) -> None:
        workload = self.cluster.workloads[workload_id]
        if workload.attempt != attempt or workload.status != "placed":
            return
        run = self.runs[workload_id]
        self.apply(
            WorkloadStarted.model_construct(
                workload_id=workload_id,
                attempt=attempt,
                pool=workload.pool or POOL,
                placement=self.placements[workload_id],
                allocated=workload.allocated,
            )
        )
        if run.first_start is None:
            run.first_start = self.now
        run.run_start = run.last_posted = self.now
        run.overhead = self.config.cost.overhead(attempt)
        # Done, or stopped by its agent at its time limit, whichever comes first.
        limit = limit_s(workload, workload.pool or POOL, self.config.time_limits)
        done = self.now + run.overhead + run.remaining
        run.ends_at_limit = self.now + limit < done
        self.push(min(done, self.now + limit), FINISH, workload_id, attempt)
        # A pass once its contract is over, by the engine's own clock: at or after the fold's
        # end (the fold dates the start at its whole second), never before it. Unallocated
        # work (no contract) asks for one at once. Kept on the engine's clock on purpose:
        # waking at the fold's end instead would move the replay's passes, and its log.
        wake = contract_end(self.now, workload.min_runtime_s) if workload.allocated else self.now
        self.push(wake, WAKE)

    def on_finish(self, workload_id: str, attempt: int) -> None:
        workload = self.cluster.workloads[workload_id]
        if workload.attempt != attempt or workload.status != "running":
            return
        run = self.runs[workload_id]
        limited = run.time_limited = run.ends_at_limit
        if run.run_start is not None:
            ran = self.now - run.run_start
            run.busy_s += ran
            # A finished run paid its restart in full; one stopped at its limit, what it could.
            run.restart_s += min(run.overhead, ran) if limited else run.overhead
        self._close(workload, run)
        run.remaining = 0.0
        run.finished_at = self.now
        self.apply(
            WorkloadFinished.model_construct(
                workload_id=workload_id,
                attempt=attempt,
                outcome="failed" if limited else "succeeded",
                exit_code=None if limited else 0,
                message="time limit" if limited else "",
            )
        )

    def on_preempt_done(self, workload_id: str, attempt: int) -> None:
        workload = self.cluster.workloads[workload_id]
        if workload.attempt != attempt or workload.status not in ("placed", "running"):
            return
        run = self.runs[workload_id]
        if workload.cancel_requested:
            ran = self._stop_cancelled(workload, run)
        else:
            ran = self._stop(workload, run, "preempted")
        self.apply(
            WorkloadPreempted.model_construct(
                workload_id=workload_id,
                attempt=attempt,
                command_id=self.preempt_commands.get(workload_id, "unknown"),
                ran_s=int(ran),
            )
        )

    def _stop(self, workload: WorkloadState, run: Run, cause: str) -> float:
        """End the current run (if it started): keep its checkpointed progress, count what is
        wasted, and close its occupancy. Returns how long it ran."""
        if run.run_start is None:
            return 0.0
        ran = self.now - run.run_start
        loss = at_risk(self.config.cost, ran, run.overhead, workload.resumable)
        run.remaining = max(0.0, run.remaining - loss.kept_s)
        run.discarded_s += loss.discarded_s
        run.restart_s += loss.restart_s
        run.busy_s += ran
        self.interruptions.append(
            Interruption(
                self.now, workload.workload_id, workload.budget, workload.gpus, cause, ran, loss
            )
        )
        self._close(workload, run)
        return ran

    def _stop_cancelled(self, workload: WorkloadState, run: Run) -> float:
        """End a run its submitter cancelled (world.py): its occupancy closes; nothing counts as
        lost to a preemption, the work is not wanted any more. Returns how long it ran."""
        if run.run_start is None:
            return 0.0
        ran = self.now - run.run_start
        run.busy_s += ran
        self._close(workload, run)
        return ran

    def on_lost(self, lost: WorkloadLost) -> None:
        """The pass declared a run on a down node lost: the job loses what a preemption would."""
        workload = self.cluster.workloads[lost.workload_id]
        self._stop(workload, self.runs[lost.workload_id], "lost")

    # -- maintenance ---------------------------------------------------------------------
    def on_cordon(self, node: str) -> None:
        if node in self.in_repair or node in self.world.down:
            self.repairs_merged += 1
            return
        self.apply(NodeCordoned(node=node, cordoned_by="simulator", reason="repair"))
        drain = Drain(node, self.now)
        self.in_repair[node] = drain
        self.drains.append(drain)
        index = len(self.drains) - 1
        self.push(self.now + self.config.maintenance.stuck_after_s, DRAIN_CAP, node, index)

    def on_drain_cap(self, node: str, index: int) -> None:
        drain = self.drains[index]
        if drain.down_at is None:
            if self.cluster.nodes[node].holders:
                drain.stuck = True  # someone has to step in: the node goes down with its work
            else:
                drain.drained_at = self.now  # emptied at this very instant
            self._take_down(drain, index)

    def check_drains(self) -> None:
        """Nodes under repair that are now empty go down for their repair."""
        for index, drain in enumerate(self.drains):
            if drain.down_at is None and not self.cluster.nodes[drain.node].holders:
                drain.drained_at = self.now
                self._take_down(drain, index)

    def _take_down(self, drain: Drain, index: int) -> None:
        drain.down_at = self.now
        self.apply(NodeDown(node=drain.node))
        self.push(self.now + self.config.maintenance.repair_s, REPAIRED, drain.node, index)

    def on_repaired(self, node: str) -> None:
        self.apply(NodeUp(node=node))
        self.apply(NodeUncordoned(node=node, uncordoned_by="simulator"))
        del self.in_repair[node]

    def on_tick(self) -> None:
        self.heartbeats()
        for snapshot in usage_snapshots(self.charged, self.now):
            self.snapshots[snapshot.pool] = snapshot
            if self.recorder is not None:
                self.recorder(snapshot, self.now)
        for pool in self.cluster.active:
            for workload_id in self.cluster.active[pool]:
                run = self.runs[workload_id]
                if run.run_start is not None:
                    self._post(self.cluster.workloads[workload_id], run, self.now)

    def node_back_at(self, at: float, node: str) -> None:
        """Bring a lost node back up at ``at`` (world.py)."""
        self.push(at, NODE_BACK, node)

    def wake(self, at: float) -> None:
        """Run a pass at ``at`` (once, however often the policy asks for it)."""
        if at not in self.wakes:
            self.wakes.add(at)
            self.push(at, WAKE)

    # -- decisions -----------------------------------------------------------------------
    def act(self, result: PassResult) -> None:
        if self.recorder is not None:
            for decided in result.ordered:
                self.record(decided)
        for event in result.events:
            if isinstance(event, WorkloadLost):
                self.on_lost(event)
        for command in result.commands:
            if isinstance(command, PreemptCommand):
                self.preempt_commands[command.workload_id] = command.command_id
                self.push(
                    self.now + command.grace_period_s,
                    PREEMPT_DONE,
                    command.workload_id,
                    command.attempt,
                )
                if command.decision.reason == "cancel":
                    continue  # its submitter's wish, not a preemption
                workload = self.cluster.workloads[command.workload_id]
                self.preemptions.append(
                    PreemptionRecord(
                        self.now,
                        command.workload_id,
                        workload.budget,
                        command.decision.reason,
                        workload.started_at,
                        workload.min_runtime_s,
                        workload.allocated,
                    )
                )
            elif isinstance(command, PlaceCommand):
                self.placements[command.workload_id] = command.placement
                if self.gang_blocks is not None:
                    self.gang_blocks.placed(
                        self.cluster, command.workload_id, command.placement, self.now
                    )
                delay = 0.0
                for part in command.placement.nodes:
                    node = self.cluster.nodes[part.node]
                    mine = set(part.gpus)
                    for holder, gpus in node.holders.items():
                        if holder != command.workload_id and mine.intersection(gpus):
                            delay = float(self.config.grace_period_s)
                self.push(self.now + delay, START, command.workload_id, command.attempt)

    def run(self) -> SimulationOutcome:
        wall = time.perf_counter()
        gc.collect()
        gc.freeze()  # the trace and the initial state live for the whole run
        for job in self.jobs:
            self.push(job.arrival, ARRIVAL, job.job_id)
        requests = repair_requests(
            self.config.maintenance, sorted(self.cluster.nodes), self.start, self.end
        )
        for at, node in requests:
            self.push(at, CORDON, node)
        for at, index in self.world.schedule():
            self.push(at, WORLD, "", index)
        by_id = {job.job_id: job for job in self.jobs}
        position = {job.job_id: i for i, job in enumerate(self.jobs)}
        next_tick = (bucket_of(self.start) + 1) * HOUR
        self.push(next_tick, TICK)
        span = max(1.0, self.end - self.start)
        last_report = 0.0
        while self.heap:
            at = self.heap[0][0]
            if self.config.stop_at_last_arrival and at > self.end:
                break
            self.now = at
            dirty = False
            arrived: list[str] = []
            while self.heap and self.heap[0][0] == at:
                _, kind, _, workload_id, attempt = heapq.heappop(self.heap)
                if kind == ARRIVAL:
                    self.on_arrival(by_id[workload_id])
                    arrived.append(workload_id)
                elif kind == START:
                    self.on_start(workload_id, attempt)
                    continue  # a start alone changes nothing a pass could use
                elif kind == FINISH:
                    self.on_finish(workload_id, attempt)
                elif kind == PREEMPT_DONE:
                    self.on_preempt_done(workload_id, attempt)
                elif kind == TICK:
                    self.on_tick()
                    self.push(at + HOUR, TICK)
                elif kind == CORDON:
                    self.on_cordon(workload_id)
                elif kind == DRAIN_CAP:
                    self.on_drain_cap(workload_id, attempt)
                elif kind == REPAIRED:
                    self.on_repaired(workload_id)
                elif kind == WORLD:
                    if not self.world.state(self, attempt):
                        continue  # the scheduler meets it in its next pass (world.py)
                elif kind == NODE_BACK:
                    self.world.node_back(self, workload_id)
                dirty = True
            if dirty:
                if self.in_repair:
                    self.check_drains()
                if self.start_estimates is not None and arrived:
                    sampled = [w for w in arrived if self.start_estimates.sampled(position[w])]
                    self.start_estimates.at_submission(
                        self.cluster, self.tree, self.usage_source, self.context(at, 0), sampled
                    )
                self.passes += 1
                ctx = self.context(at, self.passes)
                if self.gang_blocks is not None:
                    self.gang_blocks.before_pass(self.cluster)
                with gc_paused():
                    result = self.policy(
                        self.cluster, self.tree, self.usage_source, ctx, self.memos
                    )
                self.act(result)
                if result.wake_at is not None and result.wake_at > at:
                    self.wake(result.wake_at)
            if self.progress is not None and at - last_report > span / 200:
                last_report = at
                self.progress(min(1.0, (at - self.start) / span))
        self.now = self.end
        for pool in self.cluster.active:
            for workload_id in sorted(self.cluster.active[pool]):
                run = self.runs[workload_id]
                if run.run_start is not None:
                    self._post(self.cluster.workloads[workload_id], run, self.end)
                    # A restart paid by a run still going is spent all the same.
                    run.restart_s += min(run.overhead, max(0.0, self.end - run.run_start))
        if self.progress is not None:
            self.progress(1.0)
        return SimulationOutcome(
            start=self.start,
            end=self.end,
            capacity_gpus=self.config.gpus,
            shares={
                b: s
                for b, s in self.tree.shares(POOL, self.start).items()
                if b in self.demand_steps
            },
            usage=self.usage,
            demand={b: hourly(s, self.start, self.end) for b, s in self.demand_steps.items()},
            demand_steps=self.demand_steps,
            capacity_steps=self.capacity_steps,
            tree=self.tree,
            runs=self.runs,
            preemptions=self.preemptions,
            passes=self.passes,
            wall_seconds=time.perf_counter() - wall,
            interruptions=self.interruptions,
            drains=self.drains,
            repairs_merged=self.repairs_merged,
            config=self.config,
            world=self.world,
            gang_blocks=self.gang_blocks,
            start_estimates=self.start_estimates,
        )
